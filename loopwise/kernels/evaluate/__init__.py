"""The judge: candidates run in isolated sandboxes, checked for correctness, timed, and audited.

:class:`Judge` is the interface the optimize loop talks to. Two implementations stand behind it:
:class:`~loopwise.kernels.evaluate.judge.LocalJudge` judges on this machine's device, one candidate
after another, and :class:`~loopwise.kernels.evaluate.workers.ExecutorJudge` spreads candidates
over an executor's workers. Verdicts are :class:`~loopwise.kernels.evaluate.result.Evaluation`
records; the records module sits below the judge and imports none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from loopwise.kernels.evaluate.result import Evaluation

__all__ = ["Judge"]


@runtime_checkable
class Judge(Protocol):
    """Judges candidates of one problem: one verdict per candidate source, failures included.

    Attributes:
        device: Where candidates run, as this process sees it: ``cuda:N``, ``cpu``, or ``remote``
            when they run on other processes' devices (the loop profiles only a local CUDA device).
        device_name: The device in words, as the proposer and the reports show it.
    """

    device: str
    device_name: str

    def evaluate(self, source: str, name: str = "<candidate>") -> Evaluation:
        """The verdict on one candidate source; never raises for anything the candidate does."""
        ...

    def evaluate_many(self, items: list[tuple[str, str]]) -> list[Evaluation]:
        """Verdicts on ``[(source, name), ...]``, in that order."""
        ...

    def precompile(self, sources: list[str]) -> int:
        """Builds the native extensions among ``sources`` ahead of judging them; returns how many
        were built (0 when this judge builds nothing ahead)."""
        ...

    def reference_facts(self, compile: bool = False) -> dict:
        """What is measured of the reference before any candidate: ``device``, ``statistic``,
        ``eager_ms``, ``compile_ms`` (asked for with ``compile``), ``floor_ms``, ``floor_bound``,
        the device's ceilings (``bandwidth_gbs``, ``fp32_tflops``, ``tf32_tflops``, ``bf16_tflops``),
        each None where not measured, and ``notes`` saying why. Never raises."""
        ...

    def close(self) -> None:
        """Releases what the judge started (sandboxes); a judge is not used after this."""
        ...
