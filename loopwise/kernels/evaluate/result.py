"""The Evaluation record: what the judge says about one candidate.

Failure is a value here: compile errors, wrong output, hangs, crashes, out-of-memory and exploits
are statuses with reasons and logs, never exceptions that stop a caller.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from loopwise.core.records import Status

NoteLevel = Literal["reject", "flag", "info"]
"""What a reason does to a verdict: ``reject`` decides the status, ``flag`` asks for review,
``info`` is context. A consequence for the verdict, not a diagnosis severity."""


def headline(message: str) -> str:
    """A reason's message on one line: a compile error's carries the failing source line and a caret
    between its first line ("at 24:13:") and its cause, which are kept."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else ""
    return f"{lines[0]} ... {lines[-1].strip()}"


class Reason(BaseModel):
    """One named reason behind a verdict.

    Attributes:
        code: stable machine-readable name, e.g. ``side_stream`` or ``precision_downgrade``.
        message: one sentence for a person.
        severity: ``reject`` decides the status, ``flag`` asks for review, ``info`` is context.
        evidence: the numbers the reason is based on.
    """

    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    severity: NoteLevel = "reject"
    evidence: dict[str, float | int | str | bool | None] = Field(default_factory=dict)


class TimingStats(BaseModel):
    """Per-call times of one model in milliseconds (CUDA events, or the host clock on CPU) under
    the judge's clock (see :mod:`loopwise.kernels.evaluate.timing`)."""

    model_config = ConfigDict(frozen=True)

    trials: int
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    host_median_ms: float | None = None
    method: str = "cuda_event"
    slowest_trial: int | None = None  # index of the max_ms trial (is an outlier early, late, periodic?)
    slowest_host_ms: float | None = None  # the host clock's time of that trial
    # Which figure median_ms .. max_ms are (timing.CLOCKS), and the three side by side (medians):
    # the KernelBench protocol's event time, the GPU time with the call queued, the host's launch.
    clock: str = "kernelbench"
    kernelbench_median_ms: float | None = None
    gpu_median_ms: float | None = None
    launch_median_ms: float | None = None
    uncovered_trials: int | None = None  # queued trials whose launch outlasted the GPU sleep

    def pick(self, statistic: str) -> float:
        """The time a speedup is computed from: ``median`` or ``mean``."""
        return self.median_ms if statistic == "median" else self.mean_ms


class TrialRecord(BaseModel):
    """What one correctness trial found (kept short: the first failures are what matter)."""

    model_config = ConfigDict(frozen=True)

    kind: str
    seed: int
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    norm_err: float | None = None
    ref_norm_err: float | None = None
    message: str = ""


class Evaluation(BaseModel):
    """The judge's verdict on one candidate for one problem."""

    status: Status
    problem: str
    candidate: str
    candidate_key: str = ""
    backend: str = ""
    device: str = ""
    policy: str = "fp32"
    tolerance: str = "strict"
    reasons: list[Reason] = Field(default_factory=list)
    trials: list[TrialRecord] = Field(default_factory=list)
    timing: TimingStats | None = None
    reference_timing: TimingStats | None = None
    statistic: str = "median"
    speedup: float | None = None
    floor_ms: float | None = None
    energy_j_per_call: float | None = None
    reference_energy_j_per_call: float | None = None
    compile_s: float | None = None
    eval_s: float | None = None
    phases: dict[str, float] = Field(default_factory=dict)
    log: str = ""
    versions: dict[str, str] = Field(default_factory=dict)

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def timing_meaningful(self) -> bool:
        """Whether its times (and so its speedup) say anything about speed: not when timed on the CPU."""
        from loopwise.kernels.device import timing_meaningful

        return timing_meaningful(self.device)

    @property
    def rejections(self) -> list[Reason]:
        return [r for r in self.reasons if r.severity == "reject"]

    @property
    def flags(self) -> list[Reason]:
        return [r for r in self.reasons if r.severity == "flag"]

    def summary(self) -> str:
        """One line a person can read: status, speedup and the first reason."""
        head = self.status.value
        if self.speedup is not None:
            from loopwise.kernels.device import marked

            head += " " + marked(f"{self.speedup:.2f}x", self.timing_meaningful)
        first = self.rejections[:1] or self.flags[:1]
        return head + (f" ({first[0].code}: {headline(first[0].message)})" if first else "")

    def to_json_dict(self) -> dict:
        data = self.model_dump(mode="json")
        data["correct"] = self.correct
        data["timing_meaningful"] = self.timing_meaningful
        return data
