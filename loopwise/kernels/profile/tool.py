"""The contract every micro-profiling tool keeps, so the registry can run any of them blindly.

A tool is one object, registered under the entry-point group ``loopwise.kernels.tools``. It
declares what it reads (``needs``, from :data:`~loopwise.kernels.profile.findings.INPUTS`) and for
which roofline classes the proactive mode runs it (``applies_to``); ``run`` answers ``[]`` whenever
an input it needs is missing or it has nothing to say, and never raises on a well-formed input, so
one tool's blind spot cannot stop the others.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from loopwise.kernels.profile.classify import KernelClass
from loopwise.kernels.profile.findings import Finding, ToolInput


class Tool(ABC):
    """Base of the micro-profiling tools.

    Class attributes:
        name: registered name, also the ``tool`` of its findings.
        needs: inputs that must be present for the tool to say anything.
        applies_to: roofline classes for which the proactive mode runs it.
        summary: one line on what it looks for.
        generic: the tool reports a symptom (stalls, distance from the roofline) that the specific
            tools explain by its causes; its score counts only the time they leave unexplained
            (see :func:`~loopwise.kernels.profile.registry.diagnose`).
    """

    name: ClassVar[str]
    needs: ClassVar[frozenset[str]]
    applies_to: ClassVar[frozenset[KernelClass]]
    summary: ClassVar[str]
    generic: ClassVar[bool] = False

    def run(self, inp: ToolInput) -> list[Finding]:
        """Findings on ``inp``; ``[]`` when an input in ``needs`` is missing."""
        if not inp.has_all(self.needs):
            return []
        return self.inspect(inp)

    @abstractmethod
    def inspect(self, inp: ToolInput) -> list[Finding]:
        """Findings on ``inp``, whose ``needs`` are all present."""

    def __repr__(self) -> str:
        return f"<tool {self.name}>"
