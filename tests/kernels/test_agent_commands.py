"""The exchange prompt lists the kernel tools as exact commands an agent may run, and each one that
runs without a GPU works as listed: code search, the static check, the judge."""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from pathlib import Path

import pytest

from loopwise.core.propose import ExchangeProposer, ProposalRequest

HERE = Path(__file__).parent / "candidates"
PROBLEM = HERE / "problems" / "relu.py"
GOOD = (HERE / "triton_relu.py").read_text()


def _listed(prompt: str) -> list[tuple[str, list[str]]]:
    """The commands of the prompt's ``## Commands you may run`` block: (its comment, its words)."""
    block = prompt.split("## Commands you may run", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line.strip()]
    return [(lines[i], shlex.split(lines[i + 1])) for i in range(0, len(lines), 2)]


@pytest.mark.slow
def test_every_listed_command_runs_as_written(tmp_path, cli_env):
    folder = tmp_path / "x"
    proposer = ExchangeProposer(folder, timeout_s=30, poll_s=0.01, announce=lambda line: None)
    answered = threading.Event()

    def agent():  # reads the prompt, then answers, as an agent would
        while not (folder / "prompt-0001.md").exists():
            time.sleep(0.01)
        (folder / "answer-0001.md").write_text(f"Move: one kernel\n\n```python\n{GOOD}```\n")
        answered.set()

    threading.Thread(target=agent, daemon=True).start()
    [result] = proposer.propose(ProposalRequest(task=PROBLEM.read_text(), kind="kernels"))
    assert result.ok and answered.is_set()
    listed = _listed((folder / "prompt-0001.md").read_text())
    verbs = [words[4] for _, words in listed]
    assert verbs == ["codesearch", "check", "eval", "profile"], listed
    assert all(words[1:4] == ["-m", "loopwise", "kernels"] for _, words in listed)
    draft = folder / "draft-0001.py"
    assert str(draft) in listed[1][1] and "(needs an NVIDIA GPU)" in listed[3][0]
    draft.write_text(GOOD)  # the agent saves its file where the prompt says, then runs the commands
    outputs = {}
    for comment, words in listed:
        if "needs an NVIDIA GPU" in comment:
            continue
        words = [w.replace("QUERY", "gemm epilogue") for w in words]
        out = subprocess.run([*words, "--json"], capture_output=True, text=True, env=cli_env, timeout=600)
        assert out.returncode == 0, (words, out.stderr[-2000:])
        outputs[words[4]] = out.stdout
    assert '"hits"' in outputs["codesearch"] and '"path"' in outputs["codesearch"]
    assert '"status": "correct"' in outputs["eval"]
    assert (folder / "problem.py").read_text() == PROBLEM.read_text()


def test_the_judge_command_uses_the_runs_precision_policy_and_tolerance(tmp_path):
    """A run under the relaxed policy and legacy tolerance lists `kernels eval` with those options,
    so the agent's own check judges as the run's judge does; with no rules, the judge's defaults."""
    from loopwise.kernels.agent_commands import agent_commands
    from loopwise.kernels.optimize.prompt import rules

    relaxed = ProposalRequest(task=PROBLEM.read_text(), kind="kernels", rules=rules("relaxed", 1e-2, 1e-2))
    [judge] = [c for c in agent_commands(relaxed, tmp_path, tmp_path / "d.py") if "eval" in c.argv]
    assert judge.argv[-4:] == ("--precision", "relaxed", "--tolerance", "legacy") and "relaxed legacy" in judge.purpose
    [check] = [c for c in agent_commands(relaxed, tmp_path, tmp_path / "d.py") if "check" in c.argv]
    assert check.argv[-2:] == ("--policy", "relaxed")
    strict = ProposalRequest(task=PROBLEM.read_text(), kind="kernels", rules=rules("fp32", 1e-4, 1e-4))
    [judge] = [c for c in agent_commands(strict, tmp_path, tmp_path / "d.py") if "eval" in c.argv]
    assert judge.argv[-4:] == ("--precision", "fp32", "--tolerance", "strict")
    bare = ProposalRequest(task=PROBLEM.read_text(), kind="kernels")
    [judge] = [c for c in agent_commands(bare, tmp_path, tmp_path / "d.py") if "eval" in c.argv]
    assert judge.argv[-1].endswith("d.py") and "judge defaults" in judge.purpose
