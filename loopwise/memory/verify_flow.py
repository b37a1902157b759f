"""Where the bytes the replay (:mod:`loopwise.memory.verify`) finds on chip come from, and in what
order their parts lie.

Data flow: a buffer holds data only once something put it there. A tensor is *filled* when a step
loads it from DRAM, or when a step's operator writes it: a tensor the step allocates, or uses while
it holds no data, that the step neither loads nor lists in ``needs`` is the operator's output. A
step that reads (``needs``) or stores a tensor that is not filled is rejected (``unloaded``); a
tensor leaves chip, and is no longer filled, when its last byte is freed. A tensor an operator
wrote is an intermediate: loading it back needs a store of it before (``unstored``); a tensor no
operator wrote is a graph input or a weight, in DRAM from the start.

Bytes with data: a load fills as many bytes as it moves, up to what its tensor holds on chip; an
operator fills all its output holds; a part freed leaves at most what remains. A step's share of
a tensor it needs, a tensor it reads (uses, not its output) and, where the replay knows the model,
the bytes its operator reads of each tensor (:mod:`loopwise.memory.verify_reads`) must be bytes
with data (``unfilled``): a buffer allocated in full and loaded with a few bytes holds a few bytes.

Layout: an entry with labels cuts its tensor loop by loop in the order of its labels, so its parts
are the bytes of a row-major layout whose dimensions are those loops' dimensions in that order.
Where a tensor's parts are placed one by one over the parts of another freed slab by slab, where
each part lies matters: the order it is made in is the order of the first entry that allocates it
so. A free with labels that cuts it another way frees bytes that are not the ones the replay
counts as freed: the extents of its loops, multiplied out from the first, give the number of parts
at each level, and of two cuts of the same bytes one's levels must all be levels of the other
(``[32, 197]`` and ``[6304]`` agree; ``[32, 197]`` and ``[197, 32]`` do not). Such a tensor is
*scrambled*: the free still counts its bytes, but no buffer may be placed in its room while it is
on chip (``layout``). Two loops of equal extent that trade places cannot be told apart this way,
and a tensor made whole, or made part by part where nothing lay before, has no order to compare.

Like the replay, this module reads only the plan's JSON and shares no code with the planner.
"""

from __future__ import annotations

from functools import lru_cache


def written(step: dict, loaded: set[str], filled: set[str]) -> set[str]:
    """The tensors a step's operator writes: those it allocates, and those it uses that hold no data
    yet, neither loaded by the step nor read (``needs``)."""
    if not step.get("operator"):
        return set()
    read = {e[0] for e in step.get("needs", [])} | loaded
    return ({e[0] for e in step.get("alloc", [])} | (set(step.get("uses", [])) - filled)) - read


@lru_cache(maxsize=4096)
def _agree(made: tuple[int, ...], here: tuple[int, ...]) -> bool:
    levels = [set(), set()]
    for side, extents in enumerate((made, here)):
        count = 1
        for extent in extents:
            count *= extent
            levels[side].add(count)
    return levels[0] <= levels[1] or levels[1] <= levels[0]


class Flow:
    """The tensors on chip that hold data, the intermediates, and the order each tensor was made in."""

    def __init__(self) -> None:
        self.filled: set[str] = set()
        self.bytes: dict[str, int] = {}  # per tensor on chip: the bytes that hold data (loaded or written)
        self.made: set[str] = set()  # written by an operator at some point: intermediates
        self.cuts: dict[str, tuple[int, ...]] = {}  # per tensor on chip: the extents it was made cut by
        self.scrambled: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # made, freed cut
        self.reported: set[tuple[str, str]] = set()  # (kind, tensor) reported in the current group

    def state(self) -> tuple:
        """What holds data, how many of its bytes, and how tensors were cut (the complaints made so
        far aside)."""
        return (set(self.filled), set(self.made), dict(self.cuts), dict(self.scrambled), set(self.reported),
                dict(self.bytes))

    def load(self, t: str, stored: int, nbytes: int, held: int) -> str | None:
        """A load of ``nbytes`` of ``t``, which holds ``held`` bytes on chip; the complaint when it
        is an intermediate that was never stored."""
        self.filled.add(t)
        self.bytes[t] = min(held, self.bytes.get(t, 0) + nbytes)
        if t in self.made and stored <= 0:
            return self._once("unstored", t, f"{t} is loaded, but the operator that made it never stored it")
        return None

    def read(self, t: str, how: str) -> str | None:
        """``t`` read (``how``: needed or stored); the complaint when no data was put in its buffer."""
        if t in self.filled:
            return None
        return self._once("unloaded", t, f"{t} is {how} on chip, but was never loaded nor made there")

    def write(self, tensors: set[str], live: dict[str, int]) -> None:
        """An operator writes ``tensors``: every byte they hold on chip (``live``) holds data."""
        self.filled |= tensors
        self.made |= tensors
        for t in tensors:
            self.bytes[t] = live.get(t, 0)

    def freed(self, t: str, held: int) -> None:
        """A part of ``t`` freed, ``held`` bytes left: the bytes with data are at most those."""
        if t in self.bytes:
            self.bytes[t] = min(self.bytes[t], held)

    def gone(self, t: str) -> None:
        """``t`` has no byte left on chip."""
        self.filled.discard(t)
        self.bytes.pop(t, None)
        self.cuts.pop(t, None)
        self.scrambled.pop(t, None)

    def cut(self, t: str, extents: tuple[int, ...], frees: bool) -> None:
        """An allocation (``frees`` False) or a free of ``t`` with labels whose loops have ``extents``."""
        made = self.cuts.get(t)
        if made is None:
            if not frees:
                self.cuts[t] = extents
        elif frees and not _agree(made, extents):
            self.scrambled[t] = (made, extents)

    def placed_over(self, t: str) -> str | None:
        """The complaint when a buffer is placed in the room of ``t``, which was freed in parts cut
        another way than it was made."""
        made, freed = self.scrambled[t]
        return self._once("layout", t, f"a buffer is placed in the room of {t}, made cut over loops of extents "
                                       f"{list(made)} and freed cut over {list(freed)}: the bytes freed are not "
                                       "the ones made there")

    def _once(self, kind: str, t: str, message: str) -> str | None:
        if (kind, t) in self.reported:
            return None
        self.reported.add((kind, t))
        return message
