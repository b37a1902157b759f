"""The kernels engine's commands for an exchange agent: search the CUTLASS / CuTe sources, check a
draft statically, judge it, profile it; the same tools a model gets as tool calls, as exact
``loopwise kernels`` command lines on this machine's Python. The problem is written next to the
prompts (``problem.py``) so that the judge and the profiler can run against it."""

from __future__ import annotations

import sys
from pathlib import Path

from loopwise.core.files import write_atomic
from loopwise.core.propose.commands import AgentCommand


def _problem_file(folder: Path, source: str) -> Path:
    """``folder/problem.py`` holding ``source`` (rewritten only when it changed)."""
    path = folder / "problem.py"
    if not path.is_file() or path.read_text(encoding="utf-8") != source:
        write_atomic(path, source)
    return path


def agent_commands(request, folder: Path, draft: Path) -> list[AgentCommand]:
    """The commands an agent answering a kernels ``request`` may run on its ``draft`` file."""
    from loopwise.kernels.optimize.prompt import judge_options

    kernels = (sys.executable, "-m", "loopwise", "kernels")
    options = judge_options(request.rules)  # the run's own precision policy and tolerance
    policy = options[1:2] if options[:1] == ("--precision",) else ()
    out = [AgentCommand("search the CUTLASS / CuTe sources for real names, signatures and examples "
                        "(replace QUERY, e.g. 'tma warp specialized gemm')", (*kernels, "codesearch", "QUERY")),
           AgentCommand("check your file statically for what the judge rejects (exploits, reduced precision)",
                        (*kernels, "check", str(draft), *(("--policy", *policy) if policy else ())))]
    if request.task.strip():
        problem = str(_problem_file(Path(folder), request.task))
        out += [AgentCommand("judge your file against the reference: correctness, speedup, reasons "
                             f"({' '.join(options[1::2]) or 'the judge defaults: fp32, strict'})",
                             (*kernels, "eval", problem, str(draft), *options)),
                AgentCommand("profile your file: each kernel's roofline class and the profiling tools' findings",
                             (*kernels, "profile", problem, str(draft)), needs="an NVIDIA GPU")]
    return out
