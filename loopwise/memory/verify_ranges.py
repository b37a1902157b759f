"""Which bytes of a tensor hold data on chip, for the replay (:mod:`loopwise.memory.verify`) when
it knows the model: a step that needs a part of a tensor must find that part, not only as many
bytes of it, loaded or written.

Ranges are in the tensor's own row-major bytes, of its size in the model's graph. An entry (a
load, an allocation, a free, a need) whose bytes are the tensor's whole size is cut by its labels
as its share is (:func:`loopwise.memory.verify_parts.cut`); one with no labels and fewer bytes
holds the same bytes at every pass, the first ones. Any other entry (labels over part of a tensor:
half of a head's columns) is in a layout this module cannot place: a tensor loaded or allocated so
is not checked while it is on chip, nor is a need so written. A load fills its range; an operator
fills the ranges allocated to what it writes; a free empties its range (a whole free, all of it).
A need whose range is not all filled is rejected (``elsewhere``): a weight chunk loaded once and
needed as every chunk in turn holds the right number of bytes, of the first chunk only.

Like the replay, this module reads only the plan's JSON and the graph's tensor sizes; it shares
no code with the planner.
"""

from __future__ import annotations

from loopwise.memory.verify_parts import Ranges, cut, merged, minus


class Held:
    """Per tensor on chip: the byte ranges that hold data and those allocated, and the tensors
    whose layout is unknown."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.filled: dict[str, Ranges] = {}
        self.allocated: dict[str, Ranges] = {}
        self.unknown: set[str] = set()

    def state(self) -> tuple:
        """What holds data and what is allocated, range by range (for the replay's repeats)."""
        return (tuple((t, tuple(map(tuple, r))) for t, r in sorted(self.filled.items()) if r),
                tuple((t, tuple(map(tuple, r))) for t, r in sorted(self.allocated.items()) if r),
                tuple(sorted(self.unknown)))

    def holds_any(self, tensors) -> bool:
        """Whether any of ``tensors`` has a byte range that holds data or is allocated."""
        return any(self.filled.get(t) or self.allocated.get(t) for t in tensors)

    def _range(self, t: str, total: int, labels, loops: dict) -> tuple[int, int] | None:
        size = self.sizes.get(t)
        if size is None:
            return None
        if total == size:
            return cut(size, labels, loops)
        if not labels and total < size:
            return (0, total)
        return None

    def alloc(self, entry: list, loops: dict) -> None:
        rng = self._range(entry[0], int(entry[1]), entry[2] if len(entry) > 2 else [], loops)
        if rng is None:
            self.unknown.add(entry[0])
        else:
            self.allocated[entry[0]] = merged(self.allocated.get(entry[0], []) + [rng])

    def load(self, t: str, total: int, labels, loops: dict) -> None:
        rng = self._range(t, total, labels, loops)
        if rng is None:
            self.unknown.add(t)
        else:
            self.filled[t] = merged(self.filled.get(t, []) + [rng])

    def write(self, t: str) -> None:
        """An operator writes ``t``: what is allocated to it holds data."""
        self.filled[t] = merged(self.filled.get(t, []) + self.allocated.get(t, []))

    def free(self, entry: list, loops: dict, gone: bool) -> None:
        """A free of ``entry``; ``gone``: no byte of its tensor is left on chip."""
        t = entry[0]
        if gone or len(entry) == 1:
            self.filled.pop(t, None)
            self.allocated.pop(t, None)
            self.unknown.discard(t)
            return
        rng = self._range(t, int(entry[1]), entry[2] if len(entry) > 2 else [], loops)
        if rng is not None:
            self.filled[t] = minus(self.filled.get(t, []), [rng])
            self.allocated[t] = minus(self.allocated.get(t, []), [rng])

    def missing(self, entry: list, loops: dict) -> tuple[tuple[int, int], tuple[int, int]] | None:
        """For a need: its range and the first part of it that holds no data, or None."""
        t = entry[0]
        if t in self.unknown or t not in self.filled or int(entry[1]) != self.sizes.get(t):
            return None
        need = cut(self.sizes[t], entry[2] if len(entry) > 2 else [], loops)
        left = minus([need], self.filled[t])
        return (need, left[0]) if left else None
