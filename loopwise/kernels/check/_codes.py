"""The reason codes of the static check: default level, meaning, and the record of one rule's match."""

from __future__ import annotations

from dataclasses import dataclass, field
from loopwise.kernels.evaluate.result import NoteLevel


@dataclass(frozen=True)
class Code:
    """One reason code: its name, default severity and what it means for a person."""

    name: str
    severity: NoteLevel
    meaning: str


_TABLE: tuple[Code, ...] = (
    Code("syntax_error", "reject", "the source does not parse as Python"),
    Code("missing_modelnew", "reject", "the source defines no class ModelNew"),
    Code("no_custom_kernel", "reject", "ModelNew launches no Triton, CUDA/C++ or CuTe kernel: plain PyTorch"),
    Code("timer_patch", "reject", "the source patches a clock or CUDA event the judge times with"),
    Code("library_patch", "reject", "the source monkeypatches torch, triton, numpy or builtins (e.g. torch.allclose)"),
    Code("thread_injection", "reject",
         "the source uses threads, processes or async tasks (Python or C++) to hide work"),
    Code("lazy_eval", "reject", "the output is a Tensor subclass or wrapper that can defer its work"),
    Code("reference_access", "reject", "the source reaches for the reference through gc, frames, modules or files"),
    Code("reference_call", "reject", "ModelNew runs the reference Model"),
    Code("fallback", "reject", "an exception handler swallows a kernel failure and falls back silently"),
    Code("process_spawn", "reject", "the source spawns processes, opens sockets or calls C libraries via ctypes"),
    Code("environment_read", "reject",
         "the source reads environment variables, where API keys and tokens live; a kernel never needs them"),
    Code("stream_injection", "flag", "work is put on a side CUDA stream the judge may not wait for"),
    Code("pointer_cache", "flag", "results may be cached across calls, keyed on tensor identity or pointers"),
    Code("precision_downgrade", "reject", "fp32 math is downgraded to TF32, fp16, bf16 or fp8"),
)

CODES: dict[str, Code] = {code.name: code for code in _TABLE}


@dataclass(frozen=True)
class RuleMatch:
    """What one rule found at one line, before the policy turns it into a ``Reason``.

    Attributes:
        code: a key of ``CODES``.
        line: 1-based line in the candidate source.
        what: the start of the message, naming what was found (e.g. "``tl.dot`` without input_precision").
        why: the end of the message; the code's meaning when empty.
        severity: overrides the code's default (e.g. a ``flag`` for an unresolvable argument).
        evidence: extra facts for the ``Reason``.
        place: replaces "at line N" when a finding spans the file (it must still name a line).
    """

    code: str
    line: int
    what: str
    why: str = ""
    severity: NoteLevel | None = None
    evidence: dict[str, str | int | bool] = field(default_factory=dict)
    place: str = ""

    def message(self) -> str:
        """One sentence: what was found, where (``at line N`` unless ``place`` says), and why it matters."""
        why = self.why or CODES[self.code].meaning
        return f"{self.what} {self.place or f'at line {self.line}'}: {why}."
