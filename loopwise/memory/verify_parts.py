"""Which parts of a tensor the replay (:mod:`loopwise.memory.verify`) finds on chip, where a schedule
frees a tensor slab by slab.

A tensor split over loops lies in the order its loops cut it: one iteration's part is the byte
range ``[lo, hi)`` that the cut of :func:`cut` gives (the same rule that gives its share), so parts
made by one group and freed by the next line up when both cut it the same way. A free with labels
frees the part of the current iteration: from then on that range is *dead*, and a step that needs
a range of it is rejected (``freed``), as is freeing it twice (``overfree``); an allocation of the
range makes it alive again.

A buffer occupies its whole range, except where its parts accumulate (allocated with labels, at a
size that holds every part) and its tensor is freed slab by slab: then only the parts allocated in
it and alive. A new accumulating buffer whose range meets only such buffers is placed part by part:
each part must meet no part alive, and it occupies only its parts. A part may be placed where
another tensor's part is freed by the same step that reads it (an operator that writes its output
over the slab of the input it reads, in place); the bytes of both count in the capacity there.

Like the replay, this module reads only the plan's JSON and shares no code with the planner.
"""

from __future__ import annotations

Ranges = list[tuple[int, int]]


def cut(nbytes: int, labels, loops: dict) -> tuple[int, int]:
    """The byte range of one iteration's part of an entry of ``nbytes`` split over ``labels``:
    cut loop by loop, by units without remainder, as its share is."""
    lo, size = 0, nbytes
    for label in labels:
        first, last, extent, _ = loops[label]
        lo, size = lo + size * first // extent, size * last // extent - size * first // extent
    return lo, lo + size


def merged(ranges: Ranges) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(r for r in ranges if r[1] > r[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def minus(ranges: Ranges, taken: Ranges) -> Ranges:
    """``ranges`` less every range of ``taken``."""
    out = merged(ranges)
    for t_lo, t_hi in merged(taken):
        rest: Ranges = []
        for lo, hi in out:
            if t_hi <= lo or hi <= t_lo:
                rest.append((lo, hi))
                continue
            if lo < t_lo:
                rest.append((lo, t_lo))
            if t_hi < hi:
                rest.append((t_hi, hi))
        out = rest
    return out


def overlap(a: Ranges, b: Ranges) -> tuple[int, int] | None:
    """The first range of ``b`` that a range of ``a`` meets, or None."""
    for lo, hi in a:
        for o, z in b:
            if lo < z and o < hi:
                return o, z
    return None


def shifted(ranges: Ranges, offset: int) -> Ranges:
    return [(lo + offset, hi + offset) for lo, hi in ranges]


class Parts:
    """The dead parts of each tensor and the parts each accumulating buffer holds."""

    def __init__(self) -> None:
        self.dead: dict[str, Ranges] = {}
        self.held: dict[tuple[str, int], Ranges] = {}  # (tensor, offset): parts of an accumulating buffer
        self.partwise: set[tuple[str, int]] = set()  # buffers placed over parts freed slab by slab

    def untouched(self, tensors) -> bool:
        """No tensor of ``tensors`` has parts freed or accumulated."""
        return not any(t in self.dead for t in tensors) and not any(
            k[0] in tensors for k in (*self.held, *self.partwise))

    def state(self) -> tuple:
        return ({t: list(r) for t, r in self.dead.items()}, {k: list(r) for k, r in self.held.items()},
                set(self.partwise))

    def allocated(self, t: str, rng: tuple[int, int], offset: int | None = None) -> None:
        if t in self.dead:
            self.dead[t] = minus(self.dead[t], [rng])
        if offset is not None:
            self.held[(t, offset)] = merged(self.held.get((t, offset), []) + [rng])

    def freed(self, t: str, rng: tuple[int, int]) -> bool:
        """Records ``rng`` of ``t`` as dead; False when part of it was dead already."""
        dead = self.dead.setdefault(t, [])
        if overlap([rng], dead):
            return False
        self.dead[t] = merged(dead + [rng])
        return True

    def forget(self, t: str) -> None:
        """``t`` freed whole."""
        self.dead.pop(t, None)
        for key in [k for k in self.held if k[0] == t]:
            del self.held[key]
            self.partwise.discard(key)

    def by_part(self, t: str, offset: int, fresh: bool) -> bool:
        """Whether a part allocated in the buffer of ``t`` at ``offset`` must be checked on its own
        against the buffers alive: the buffer was placed over parts freed slab by slab, or it was
        there before and occupies only its parts alive, so that another may lie in its room."""
        key = (t, offset)
        return key in self.partwise or (not fresh and key in self.held and bool(self.dead.get(t)))

    def needed_dead(self, t: str, rng: tuple[int, int]) -> tuple[int, int] | None:
        """The first dead byte range of ``t`` within ``rng``, or None."""
        return overlap([rng], self.dead.get(t, []))

    def occupied(self, t: str, buffer: list, dying: Ranges = ()) -> Ranges:
        """The scratchpad addresses a buffer of ``t`` occupies: where its tensor is freed slab by
        slab (``dying``: parts of ``t`` freed by the step being replayed, which reads them), or
        where it was placed over such a buffer, the parts allocated in it and alive; otherwise its
        whole range."""
        offset, size = buffer[0], buffer[1]
        key = (t, offset)
        dead = self.dead.get(t, []) + list(dying)
        if key in self.held and (key in self.partwise or dead):
            return shifted(minus(self.held[key], dead), offset)
        return [(offset, offset + size)]

    def meets(self, buffers: dict, buffer: list, claim: Ranges, dying: dict) -> tuple[bool, bool]:
        """Whether ``claim`` meets the range of a buffer (of ``buffers``, by tensor) whose tensor
        is freed slab by slab, and whether it meets that of any other."""
        freeing = other_kind = False
        for other, theirs in buffers.items():
            for b in theirs:
                if b is buffer or not b[1] or overlap(claim, [(b[0], b[0] + b[1])]) is None:
                    continue
                if (other, b[0]) in self.held and (self.dead.get(other) or other in dying):
                    freeing = True
                else:
                    other_kind = True
        return freeing, other_kind


def freed_in_place(step: dict, loops: dict) -> dict[str, Ranges]:
    """The parts a step frees of tensors it reads (its output may be written over them)."""
    read = set(step.get("uses", [])) | {e[0] for e in step.get("needs", [])}
    return {e[0]: [cut(int(e[1]), e[2] if len(e) > 2 else [], loops)]
            for e in step.get("free", []) if len(e) > 1 and e[0] in read}
