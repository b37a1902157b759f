"""Where a schedule's buffers sit in the scratchpad, and its DMA transfers.

Every allocation of the schedule (:mod:`loopwise.memory.schedule`) is one buffer: a range of
bytes ``[offset, offset + size)`` that no other buffer alive at the same time overlaps. A buffer
lives from its allocation to the first later step that frees its tensor; one allocated inside a
loop and freed after it (a tensor whose slab parts accumulate for the group after) is alive from
the loop's first step, since later iterations run while it holds the earlier parts, and it is
reserved at its full size from the start. A buffer allocated and freed within one iteration is
reserved at the largest share any iteration holds.

A part freed inside a loop leaves the buffer alive to the loop's end. A buffer written over
another tensor's buffer part by part as that tensor is freed (the schedule names it: ``over``)
takes that buffer's place, which stays reserved until the second is freed.

Offsets are chosen by first fit in program order (each step once, loops not unrolled): the lowest
offset where the buffer fits between the buffers alive at its first step. First fit can leave
holes that no later buffer fits (fragmentation): a plan that fits by bytes at every step may not
fit by offsets. Then the buffers are placed again, largest first, each at the lowest offset clear
of every buffer placed already whose life overlaps its own (knowing every buffer's life in
advance, which first fit in program order does not use). When neither packing fits, the better
one is kept and the buffers past the end are reported, so that the verifier rejects the plan
rather than trusting a packing that does not exist.

The loads and stores each step lists become the group's DMA list: per transfer the step (its
``id``), the tensor, the bytes (split over loops like an allocation), the levels it moves
between and the offset of the buffer it reads or fills.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass

from loopwise.memory.schedule_loops import static_steps, trips

DRAM, SCRATCHPAD = "dram", "scratchpad"


@dataclass
class _Buffer:
    entry: list
    start: int  # first static step it is alive at
    end: int  # last static step it is alive at
    size: int
    order: int
    offset: int = 0


def name_steps(schedule: dict) -> None:
    """Gives every step an ``id``: the group's index, then the position in each loop's body."""

    def walk(steps: list, prefix: str) -> None:
        for k, step in enumerate(steps):
            if "loop" in step:
                walk(step["steps"], f"{prefix}.{k}")
            else:
                step["id"] = f"{prefix}.{k}"

    for gi, group in enumerate(schedule["groups"]):
        walk(group["steps"], str(gi))


def place(schedule: dict) -> list[str]:
    """Assigns every allocation of ``schedule`` an offset and a size (the allocation entries become
    ``[tensor, bytes, labels, offset, size]``) and turns each step's loads and stores into its
    group's ``dma`` list; returns the buffers first fit could not place within the capacity."""
    name_steps(schedule)
    flat, owner, loop_start, loop_end = [], [], {}, {}
    for gi, group in enumerate(schedule["groups"]):
        for step, loops in static_steps(group["steps"]):
            for loop in loops:
                loop_start.setdefault(id(loop), len(flat))
                loop_end[id(loop)] = len(flat)
            flat.append((step, loops))
            owner.append(gi)
    frees: dict[str, list[int]] = {}
    for i, (step, loops) in enumerate(flat):
        for entry in step.get("free", []):
            # a part freed inside a loop: the buffer holds the other parts until the loop ends
            frees.setdefault(entry[0], []).append(loop_end[id(loops[0])] if len(entry) > 1 and loops else i)
    buffers, over = [], {}
    for i, (step, loops) in enumerate(flat):
        for entry in step.get("alloc", []):
            ends = frees.get(entry[0], [])
            k = bisect.bisect_left(ends, i)
            end = ends[k] if k < len(ends) else len(flat) - 1
            common = _common(loops, flat[end][1])
            outlived = loops[len(common):]
            start = loop_start[id(outlived[0])] if outlived else i
            buffers.append(_Buffer(entry, start, end, _reserve(entry, loops, common), len(buffers)))
            if entry[0] in step.get("over", {}):
                over[len(buffers) - 1] = step["over"][entry[0]]
        step.pop("over", None)
    buffers, followers = _written_over(buffers, over)
    capacity = int(schedule["capacity_bytes"])
    unplaced = _first_fit(buffers, capacity)
    if unplaced:
        first = [b.offset for b in buffers]
        by_size = _largest_first(buffers, capacity)
        if len(by_size) > len(unplaced) or (by_size and _top(buffers) > _top(buffers, first)):
            for b, offset in zip(buffers, first):
                b.offset = offset
        else:
            unplaced = by_size
    for b, lead in followers:
        b.offset = lead.offset
    for b in buffers + [b for b, _ in followers]:
        tensor, nbytes = b.entry[0], b.entry[1]
        labels = b.entry[2] if len(b.entry) > 2 else []
        b.entry[:] = [tensor, nbytes, list(labels), b.offset, b.size]
    _dma_lists(schedule, flat, owner)
    return unplaced


def _written_over(buffers: list[_Buffer], over: dict[int, str]) -> tuple[list[_Buffer], list]:
    """The buffers to place, and each buffer written over another tensor's part by part
    (:mod:`loopwise.memory.handed`) with the buffer it takes the place of: that one is placed for
    both, alive until the second is freed."""
    if not over:
        return buffers, []
    latest: dict[str, _Buffer] = {}
    followers, lead_of = [], {}
    for k, b in enumerate(buffers):
        if k in over and over[k] in latest and b.size <= latest[over[k]].size:
            lead = lead_of.get(id(latest[over[k]]), latest[over[k]])
            lead.end = max(lead.end, b.end)
            lead_of[id(b)] = lead
            followers.append((b, lead))
        latest[b.entry[0]] = b
    dropped = {id(b) for b, _ in followers}
    return [b for b in buffers if id(b) not in dropped], followers


def _common(a: tuple, b: tuple) -> tuple:
    n = 0
    while n < min(len(a), len(b)) and a[n] is b[n]:
        n += 1
    return a[:n]


def _reserve(entry: list, loops: tuple, common: tuple) -> int:
    """The most bytes the buffer holds: per iteration of the loops it does not outlive, the sum of
    its shares over the iterations of those it does (its parts accumulate there)."""
    nbytes = int(entry[1])
    labels = list(entry[2]) if len(entry) > 2 else []
    by_label = {loop["loop"]: loop for loop in loops}
    labelled = [by_label[label] for label in labels if label in by_label]
    repeats = 1
    for loop in loops[len(common):]:
        if loop["loop"] not in labels:
            repeats *= trips(loop)  # allocated again at every pass, never freed inside
    if not labelled:
        return nbytes * repeats
    cuts = tuple((int(loop["extent"]), int(loop["size"]), any(loop is c for c in common)) for loop in labelled)
    return most_held(nbytes, cuts) * repeats


@functools.lru_cache(maxsize=4096)
def most_held(nbytes: int, cuts: tuple[tuple[int, int, bool], ...]) -> int:
    """The largest sum, over the iterations of the loops an entry of ``nbytes`` outlives, of its
    shares, for any one iteration of the loops it does not; ``cuts``: per loop it is split over, in
    the order of its labels, (extent, size, not outlived).

    The shares are cut loop by loop (:func:`~loopwise.memory.schedule_loops.share`), so what an
    iteration holds depends only on the bytes left after the cuts before it. Each iteration of the
    loops not outlived so far is kept as the bytes left with how many iterations of the outlived
    ones leave them (a multiset); two such iterations with the same multiset hold the same from
    there on, so one of them stands for both."""
    states = {((nbytes, 1),)}
    for extent, size, kept in cuts:
        parts = [(t * size, min(extent, (t + 1) * size)) for t in range(-(-extent // size))]
        nxt = set()
        for state in states:
            if kept:
                for lo, hi in parts:
                    nxt.add(_merged(((v * hi // extent - v * lo // extent, c) for v, c in state)))
            else:
                nxt.add(_merged(((v * hi // extent - v * lo // extent, c) for v, c in state for lo, hi in parts)))
        states = nxt
    return max(sum(v * c for v, c in state) for state in states)


def _merged(pairs) -> tuple[tuple[int, int], ...]:
    counts: dict[int, int] = {}
    for v, c in pairs:
        counts[v] = counts.get(v, 0) + c
    return tuple(sorted(counts.items()))


def _first_fit(buffers: list[_Buffer], capacity: int) -> list[str]:
    alive: list[_Buffer] = []  # sorted by offset
    unplaced = []
    for b in sorted(buffers, key=lambda b: (b.start, b.order)):
        alive = [a for a in alive if a.end >= b.start]
        cursor = 0
        for a in alive:
            if a.offset - cursor >= b.size:
                break
            cursor = max(cursor, a.offset + a.size)
        b.offset = cursor
        if cursor + b.size > capacity:
            unplaced.append(f"{b.entry[0]}: {b.size} bytes at offset {cursor} pass the capacity {capacity} "
                            f"({sum(a.size for a in alive)} bytes alive beside it)")
        bisect.insort(alive, b, key=lambda a: a.offset)
    return unplaced


def _top(buffers: list[_Buffer], offsets=None) -> int:
    offsets = offsets or [b.offset for b in buffers]
    return max((o + b.size for b, o in zip(buffers, offsets)), default=0)


def _largest_first(buffers: list[_Buffer], capacity: int) -> list[str]:
    placed: list[_Buffer] = []  # sorted by offset
    unplaced = []
    for b in sorted(buffers, key=lambda b: (-b.size, b.start, b.order)):
        cursor = 0
        for a in placed:
            if a.end < b.start or b.end < a.start:
                continue  # never alive together
            if a.offset - cursor >= b.size:
                break
            cursor = max(cursor, a.offset + a.size)
        b.offset = cursor
        if cursor + b.size > capacity:
            unplaced.append(f"{b.entry[0]}: {b.size} bytes at offset {cursor} pass the capacity {capacity}")
        bisect.insort(placed, b, key=lambda a: a.offset)
    return unplaced


def _dma_lists(schedule: dict, flat: list, owner: list[int]) -> None:
    for group in schedule["groups"]:
        group["dma"] = []
    where: dict[str, int] = {}  # the latest buffer of each tensor
    for (step, _), gi in zip(flat, owner):
        for entry in step.get("alloc", []):
            where[entry[0]] = entry[3]
        for kind, src, dst in (("load", DRAM, SCRATCHPAD), ("store", SCRATCHPAD, DRAM)):
            for entry in step.pop(kind, []):
                schedule["groups"][gi]["dma"].append(
                    {"step": step["id"], "tensor": entry[0], "bytes": int(entry[1]),
                     "split": list(entry[2]) if len(entry) > 2 else [], "from": src, "to": dst,
                     "offset": where.get(entry[0])})
