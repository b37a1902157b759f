"""The n requests of one step, as the model (or the agent at the exchange folder) reads them: each
asks for its own approach and names the others', the answer format the prompt asks for is the one
the printed instruction names, and every prompt carries the version of its templates."""

from __future__ import annotations

import random

from fake_llm_server import good

from loopwise.core.propose import (
    Attempt,
    ExchangeProposer,
    ProposalRequest,
    prompt_version,
    render_prompt,
)
from loopwise.core.propose.llm import LLMConfig, LLMProposer

DIRECTIONS = ("fuse every operator into one Triton kernel", "tile for shared-memory reuse",
              "vectorize loads and stores (16 bytes per thread)")
STEP = ProposalRequest(kind="kernels", task="class Model computes relu(x @ w).", n=3, directions=DIRECTIONS)


def test_each_request_of_a_step_asks_for_its_own_approach_and_names_the_others():
    users = [render_prompt(STEP, i).user for i in range(3)]
    assert len(set(users)) == 3
    for i, user in enumerate(users):
        assert f"This is request {i + 1} of 3 in this step. Your approach: {DIRECTIONS[i]}." in user
        others = [d for d in DIRECTIONS if d != DIRECTIONS[i]]
        assert f"The other requests of this step were asked for: {'; '.join(others)}." in user


def test_requests_without_directions_still_differ_and_one_request_says_nothing_of_a_step():
    two = ProposalRequest(kind="kernels", task="T", n=2)
    first, second = (render_prompt(two, i).user for i in range(2))
    assert first != second and "take number 2 of your ranking" in second
    assert "request 1 of" not in render_prompt(ProposalRequest(kind="kernels", task="T")).user
    training = ProposalRequest(kind="training", task="T", n=2)
    assert render_prompt(training, 0).user != render_prompt(training, 1).user


def test_the_exchange_writes_one_distinct_prompt_per_request(tmp_path):
    lines: list[str] = []
    ExchangeProposer(tmp_path, timeout_s=0.05, poll_s=0.01, announce=lines.append).propose(STEP)
    prompts = [(tmp_path / f"prompt-000{i}.md").read_text() for i in (1, 2, 3)]
    assert len(set(prompts)) == 3 and all(f"Your approach: {d}." in p for d, p in zip(DIRECTIONS, prompts))
    assert all("one ```python block" in line for line in lines)


def test_the_llm_proposer_sends_one_distinct_prompt_per_request(server, monkeypatch):
    monkeypatch.setenv("LOOPWISE_TEST_KEY", "sk-test")
    server.queue(good(), good(), good())
    calls = []
    config = LLMConfig(model="fake-model", base_url=server.base_url + "/v1", api_key_env="LOOPWISE_TEST_KEY",
                       max_retries=0, tools=False)
    LLMProposer(config, call_log=calls.append, rng=random.Random(0)).propose(STEP)
    users = [post.body["messages"][1]["content"] for post in server.posts()]
    assert len(users) == 3 and len(set(users)) == 3
    assert all(f"Your approach: {d}." in u for d, u in zip(DIRECTIONS, users))
    assert {c.prompt.version for c in calls} == {prompt_version("kernels")}


def test_a_training_prompt_and_its_printed_instruction_name_the_same_json_block(tmp_path):
    lines: list[str] = []
    request = ProposalRequest(kind="training", task="sorting, GRPO", candidate='{"lr": 1e-5}')
    ExchangeProposer(tmp_path, timeout_s=0.05, poll_s=0.01, announce=lines.append).propose(request)
    prompt = (tmp_path / "prompt-0001.md").read_text()
    [line] = lines
    assert "one ```json block" in prompt and "a Move: line and one ```json block" in line
    assert "```python" not in line


def test_the_template_version_changes_with_any_template_and_is_on_every_prompt(tmp_path, monkeypatch):
    version = prompt_version("kernels")
    assert version.startswith("kernels-") and len(version) == len("kernels-") + 12
    assert render_prompt(STEP).version == version and prompt_version("training") != version
    from loopwise.core.propose import _prompt

    folder = tmp_path / "prompts"
    folder.mkdir()
    real = _prompt._folder("kernels")
    for template in real.glob("*.j2"):
        (folder / template.name).write_text(template.read_text())
    monkeypatch.setattr(_prompt, "_folder", lambda kind: folder)
    assert prompt_version("kernels") == version  # same text, same version
    (folder / "user.md.j2").write_text((real / "user.md.j2").read_text() + "\nOne more line.\n")
    assert prompt_version("kernels") != version


def test_the_best_so_far_and_the_siblings_reach_the_prompt():
    request = ProposalRequest(kind="kernels", task="T", candidate="class ModelNew: pass\n",
                              best=Attempt(label="node 7", summary="persistent kernel: correct, 2.10x over eager",
                                           code="# best code\n"),
                              siblings=(Attempt(label="node 3", summary="tiled 2D: correct, 1.20x over eager",
                                                code="# sibling code\n"),
                                        Attempt(label="node 4", summary="fp16 dot: exploit (precision_downgrade)")))
    user = render_prompt(request).user
    assert "## Best so far: node 7" in user and "persistent kernel: correct, 2.10x" in user and "# best code" in user
    assert "## Already tried from the current candidate" in user
    assert "- node 3: tiled 2D: correct, 1.20x over eager" in user and "# sibling code" in user
    assert "- node 4: fp16 dot: exploit (precision_downgrade)" in user and "### node 4" not in user
