"""Which device judges candidates, and what the CPU means for Triton and for the times measured.

Without a CUDA GPU (or with ``--device cpu``), candidates and references run on the CPU. Triton
kernels run there only in Triton's interpreter, which Triton switches on from ``TRITON_INTERPRET``
when it is first imported: the variable is set here, in this process, before any sandbox starts,
and every sandbox inherits it. Times measured on the CPU say nothing about a kernel's speed, so
every speedup timed there is marked. This module is the one place that decides both.
"""

from __future__ import annotations

import os
import sys

INTERPRETER_ENV = "TRITON_INTERPRET"
NOTICE = "candidates run in Triton's CPU interpreter; verdicts are real, times are not meaningful"
NOT_MEANINGFUL = "timed on the CPU with Triton's interpreter: speedups are not meaningful"
MARK = "†"  # beside a speedup that is not meaningful; NOT_MEANINGFUL explains it
_announced: list[bool] = []


def resolve_device(requested: str = "auto") -> str:
    """``auto`` / ``cuda`` / ``cuda:N`` / ``cpu`` as the device the judge uses. On the CPU, Triton's
    interpreter is switched on (unless the user set ``TRITON_INTERPRET``) and one line on stderr
    says so, once per process."""
    import torch

    if requested != "cpu" and torch.cuda.is_available():
        return "cuda:0" if requested in ("auto", "cuda") else requested
    if requested == "cuda":
        from loopwise.errors import UserError

        raise UserError("no CUDA GPU is visible (torch.cuda.is_available() is False); use --device cpu")
    use_interpreter("--device cpu" if requested == "cpu" and torch.cuda.is_available() else "no CUDA GPU")
    return "cpu"


def use_interpreter(why: str = "no CUDA GPU") -> None:
    """Sets ``TRITON_INTERPRET=1`` for the sandboxes this process starts, unless the user chose a
    value, and says so on stderr (never stdout, which may carry ``--json``)."""
    os.environ.setdefault(INTERPRETER_ENV, "1")
    if os.environ[INTERPRETER_ENV] == "1" and not _announced:
        _announced.append(True)
        print(f"{why}: {NOTICE}", file=sys.stderr)


def timing_meaningful(device: str) -> bool:
    """Whether times measured on ``device`` (a device name as records keep it) say anything about
    a kernel's speed: not on the CPU."""
    return device != "cpu"


def marked(text: str, meaningful: bool) -> str:
    """A speedup's text with MARK when it is not meaningful."""
    return text if meaningful or text == "-" else f"{text}{MARK}"
