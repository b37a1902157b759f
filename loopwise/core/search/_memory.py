"""What a search has learned, in a form small enough to put in a prompt.

Kept per proposal note (the move name): how often it was tried, how often it improved on its
parent and by how much at best, and how it failed. Aggregating by note keeps the record compact
however large the tree grows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loopwise.core.search._records import Outcome

_NO_NOTE = "(no note)"


@dataclass
class NoteRecord:
    """Everything the search knows about one kind of proposal.

    Attributes:
        tried: proposals with this note that were added (duplicates included).
        duplicates: proposals that named a candidate already in the tree.
        improved: correct children that beat their parent.
        best_gain: best child speedup over its parent's speedup (0 when never correct).
        failures: count per failure status.
    """

    tried: int = 0
    duplicates: int = 0
    improved: int = 0
    best_gain: float = 0.0
    failures: dict[str, int] = field(default_factory=dict)


class SearchMemory:
    """A compact, JSON-serializable record of what was tried, what worked and what failed."""

    def __init__(self) -> None:
        self._notes: dict[str, NoteRecord] = {}

    def notes(self) -> dict[str, NoteRecord]:
        """Returns the record per note, in order of first use (a copy)."""
        return {note: NoteRecord(r.tried, r.duplicates, r.improved, r.best_gain,
                                 dict(r.failures)) for note, r in self._notes.items()}

    def worked(self) -> list[tuple[str, float]]:
        """Returns ``(note, best gain)`` for notes that improved on a parent, best first."""
        hits = [(note, r.best_gain) for note, r in self._notes.items() if r.improved]
        return sorted(hits, key=lambda hit: -hit[1])

    def failed(self) -> dict[str, list[str]]:
        """Returns the notes that failed, per failure status."""
        by_status: dict[str, list[str]] = {}
        for note, record in self._notes.items():
            for status in record.failures:
                by_status.setdefault(status, []).append(note)
        return by_status

    def record_proposal(self, note: str, *, duplicate: bool) -> None:
        """Counts one proposal (called by the search from ``add_child``)."""
        record = self._notes.setdefault(note or _NO_NOTE, NoteRecord())
        record.tried += 1
        record.duplicates += duplicate

    def record_outcome(self, note: str, outcome: Outcome, parent_value: float | None) -> None:
        """Counts one evaluated proposal (called by the search from ``tell``)."""
        record = self._notes.setdefault(note or _NO_NOTE, NoteRecord())
        if not outcome.ok:
            status = outcome.status.value
            record.failures[status] = record.failures.get(status, 0) + 1
            return
        gain = outcome.value / parent_value if parent_value else 1.0
        record.best_gain = max(record.best_gain, gain)
        record.improved += gain > 1.0

    def summary(self, limit: int = 5) -> str:
        """Returns a few lines for a prompt: totals, the best moves, failures, dead ends.

        Args:
            limit: at most this many notes per section.
        """
        tried = sum(r.tried for r in self._notes.values())
        dups = sum(r.duplicates for r in self._notes.values())
        lines = [f"Tried {tried} proposals over {len(self._notes)} kinds ({dups} duplicates)."]
        worked = self.worked()[:limit]
        if worked:
            lines.append("Worked: " + "; ".join(f"{n} (x{g:.3g})" for n, g in worked) + ".")
        for status, notes in sorted(self.failed().items()):
            shown = ", ".join(notes[:limit]) + (", ..." if len(notes) > limit else "")
            total = sum(self._notes[n].failures[status] for n in notes)
            lines.append(f"Failed with {status} ({total}x): {shown}.")
        stale = [n for n, r in self._notes.items()
                 if not r.improved and r.best_gain > 0 and r.tried >= 2][:limit]
        if stale:
            lines.append("Correct but never faster: " + ", ".join(stale) + ".")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Returns the memory as a JSON-safe dict."""
        return {note: {"tried": r.tried, "duplicates": r.duplicates, "improved": r.improved,
                       "best_gain": r.best_gain, "failures": dict(r.failures)}
                for note, r in self._notes.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchMemory:
        """Rebuilds a memory written by ``to_dict``."""
        memory = cls()
        for note, r in data.items():
            memory._notes[note] = NoteRecord(r["tried"], r["duplicates"], r["improved"],
                                             r["best_gain"], dict(r["failures"]))
        return memory

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SearchMemory) and self.to_dict() == other.to_dict()
