"""The core proposers pass the proposer contract (``loopwise.core.propose.conformance``): the LLM
proposer against the scripted local server (both wire formats) and a closed port, the exchange
proposer with an agent answering in the folder and with nobody answering."""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path

import pytest
from fake_llm_server import GOOD_CODE, FakeLLMServer, good

from loopwise.core.propose import ExchangeProposer
from loopwise.core.propose.conformance import ProposerConformance
from loopwise.core.propose.llm import LLMConfig, LLMProposer

KEY_ENV = "LOOPWISE_CONFORMANCE_KEY"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _llm(api: str, base: str) -> LLMProposer:
    config = LLMConfig(api=api, model="fake-model", base_url=base, api_key_env=KEY_ENV, timeout_s=5,
                       max_retries=1, backoff_initial_s=0.01, backoff_max_s=0.05)
    return LLMProposer(config, sleep=lambda s: None, rng=random.Random(0))


@pytest.mark.parametrize("api", ["openai", "anthropic"])
class TestLLMProposer(ProposerConformance):
    KIND = "kernels"

    @pytest.fixture(autouse=True)
    def _server(self, monkeypatch, api):
        monkeypatch.setenv(KEY_ENV, "sk-test")
        self.api = api
        self.server = FakeLLMServer().start()
        self.server.queue(*[good() for _ in range(8)])
        yield
        self.server.stop()

    def _base(self, url: str) -> str:
        return url + "/v1" if self.api == "openai" else url

    def make_proposer(self, tmp_path):
        return _llm(self.api, self._base(self.server.base_url))

    def make_unanswering_proposer(self, tmp_path):
        return _llm(self.api, self._base(f"http://127.0.0.1:{_closed_port()}"))


class _Agent:
    """Answers every prompt that appears in ``folder`` with one good file, as a coding agent would."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.stop = folder, threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        done: set[str] = set()
        while not self.stop.is_set():
            for prompt in sorted(self.folder.glob("prompt-*.md")):
                answer = self.folder / prompt.name.replace("prompt-", "answer-")
                if prompt.name not in done and not answer.exists():
                    answer.write_text(f"Move: one fused kernel\n\n```python\n{GOOD_CODE}```\n")
                    done.add(prompt.name)
            time.sleep(0.01)


class TestExchangeProposer(ProposerConformance):
    KIND = "kernels"

    @pytest.fixture(autouse=True)
    def _agent(self, tmp_path):
        self.agent = _Agent(tmp_path / "answered")
        (tmp_path / "answered").mkdir()
        yield
        self.agent.stop.set()

    def make_proposer(self, tmp_path):
        return ExchangeProposer(tmp_path / "answered", timeout_s=10, poll_s=0.01, announce=lambda line: None)

    def make_unanswering_proposer(self, tmp_path):
        return ExchangeProposer(tmp_path / "nobody", timeout_s=0.2, poll_s=0.01, announce=lambda line: None)
