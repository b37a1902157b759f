"""The per-step traces in a model proposer's prompt: a PNG plot as an image block (OpenAI's
``image_url`` data URL, Anthropic's base64 ``image`` source) when the model accepts images
(``--llm-images``), a table in the text otherwise."""

from __future__ import annotations

import base64
import random
import struct
import subprocess
import sys

import pytest

from fake_llm_server import FakeLLMServer, Scripted

from loopwise.core.propose.llm import LLMConfig, LLMProposer
from loopwise.training.config import StageConfig
from loopwise.training.proposer import ModelTransitions
from loopwise.training.transitions import Bounds

BASE = StageConfig(learning_rate=3e-4, temperature=1.0, difficulty=1)
TRACE = [{"step": i + 1, "reward": 0.5 + 0.02 * i, "entropy": 1.0 - 0.05 * i, "kl": 0.001 * i,
          "completions/mean_length": 6.0 + 0.25 * i, "frac_reward_zero_std": 0.1} for i in range(10)] + \
        [{"step": 10, "eval/reward": 0.61, "eval/train_reward": 0.66}]
REPLY = 'Move: warmer\n\n```json\n{"changes": {"temperature": 1.25}}\n```\n'


def _ask(api: str, images: bool, monkeypatch) -> dict:
    monkeypatch.setenv("LOOPWISE_TEST_KEY", "sk-test")
    server = FakeLLMServer().start()
    try:
        server.queue(Scripted(text=REPLY))
        url = server.base_url + ("/v1" if api == "openai" else "")
        llm = LLMProposer(LLMConfig(api=api, model="fake-model", base_url=url, api_key_env="LOOPWISE_TEST_KEY",
                                    timeout_s=5, max_retries=0, images=images))
        [t] = ModelTransitions(llm, "Task arithmetic.", images=images)(BASE, [], random.Random(0), 1, Bounds.for_task(6),
                                                                        reward=0.61, trace=TRACE)
        assert t.changes == {"temperature": (1.0, 1.25)}
        return server.posts()[0].body
    finally:
        server.stop()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_an_openai_request_carries_the_plot_as_an_image_url_block(monkeypatch):
    user = _ask("openai", True, monkeypatch)["messages"][1]
    assert isinstance(user["content"], list)
    text = [b["text"] for b in user["content"] if b["type"] == "text"]
    [image] = [b for b in user["content"] if b["type"] == "image_url"]
    prefix = "data:image/png;base64,"
    assert image["image_url"]["url"].startswith(prefix)
    width, height = _png_size(base64.b64decode(image["image_url"]["url"][len(prefix):]))
    assert width >= 400 and height >= 200
    assert len(text) == 1 and "attached" in text[0] and "| step |" not in text[0]


def test_an_anthropic_request_carries_the_plot_as_a_base64_image_block(monkeypatch):
    body = _ask("anthropic", True, monkeypatch)
    [user] = body["messages"]
    [image] = [b for b in user["content"] if b["type"] == "image"]
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    _png_size(base64.b64decode(image["source"]["data"]))
    assert any(b["type"] == "text" and "attached" in b["text"] for b in user["content"])


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_model_without_images_gets_the_traces_as_a_table(api, monkeypatch):
    body = _ask(api, False, monkeypatch)
    user = body["messages"][1 if api == "openai" else 0]
    assert isinstance(user["content"], str)  # text only: no image block
    content = user["content"]
    assert "| step | reward | entropy | kl | length |" in content
    assert "| 10 | 0.68 | 0.55 | 0.009 | 8.25 |" in content


def test_the_search_command_takes_llm_images():
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "--help"], capture_output=True,
                          text=True, timeout=120, env={"COLUMNS": "200", "PATH": ""})
    assert "--llm-images" in done.stdout



def test_a_recorded_call_keeps_the_plot_it_sent():
    from loopwise.core.propose import Image
    from loopwise.core.propose._prompt import Prompt
    from loopwise.core.propose.llm._proposer import CallRecord
    from loopwise.core.propose.llm._record import record_llm_call
    from loopwise.core.store import InMemoryRunStore
    from loopwise.training.trace_view import trace_png

    png = trace_png(TRACE)
    store = InMemoryRunStore("training.search", "{}")
    record_llm_call(store, CallRecord(origin="openai:m", prompt=Prompt("s", "u", images=(Image(data=png),)),
                                      reply=REPLY, finish_reason="stop", usage=None, attempts=1, waits=(),
                                      latency_s=0.1, outcome="ok"))
    [event] = list(store.events(kind="llm_call"))
    [digest] = event.payload["image_sha256"]
    assert store.get_artifact(digest) == png
