"""Iterations of a loop the replay (:mod:`loopwise.memory.verify`) need not replay one by one: a
loop whose iteration leaves the replay as it found it repeats that iteration exactly wherever the
bytes its entries cut out of their tensors are the same.

Why that holds. The replay of one iteration reads the iteration (which part of each loop it runs)
in three ways only: the share of each entry and transfer split over the loop (``bytes * hi //
extent - bytes * lo // extent``, loop by loop), the byte range of each part (where a tensor is
freed or accumulated part by part, :mod:`loopwise.memory.verify_parts`), and the place named in a
violation. A *plain* body (with the loops inside it) uses no byte range: no entry of it frees part
of a tensor, none accumulates parts in one buffer (an allocation with labels at a size that holds
every part), and no tensor it names has parts freed or accumulated when the loop runs (nothing in
the body can make one). Its iteration then depends on the iteration only through the bytes each
entry split over the loop has once cut by its labels up to the loop's own (the loops around it
stay where they are; a loop inside cuts those bytes the same way at every iteration; an entry
cut by a loop inside before this one makes the body not plain). Those bytes are the iteration's
*signature*: two iterations with the same signature, started from the same state, do the same.
A loop over key blocks also checks that the online softmax's state is on chip, which reads the
state alone. When the replay of an iteration of a plain body finds no violation and ends in the
state it started from (every buffer, its place and its bytes, what holds data, what was freed),
the next iteration starts from that state too, so each later iteration with the same signature
moves the same bytes, stores the same bytes of each tensor and holds the same bytes at every step
(at most what the replay has seen already, so the peaks stand). The replay adds those bytes and
goes on; an iteration with another signature is replayed in full.

Like the replay, this module reads only the plan's JSON and shares no code with the planner.
"""

from __future__ import annotations

from loopwise.memory.verify_group import flat


def plain_body(loop: dict, dma: dict[str, list[dict]]) -> tuple[frozenset, list] | None:
    """The tensors a plain loop body names (in the loops inside it too) and its entries split over
    the loop (each as ``[tensor, bytes, labels]``, its labels up to the loop's own), or None when
    the body is not plain (or its JSON is malformed: the replay itself then says how)."""
    try:
        return _plain_body(loop, dma)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None


def _plain_body(loop: dict, dma: dict[str, list[dict]]) -> tuple[frozenset, list] | None:
    label = loop["loop"]
    inside = {inner["loop"] for inner in _loops(loop["steps"])}
    if label in inside:
        return None  # a loop inside with the same label: its iterations would read this one's
    names, split = set(), []

    def depends(entry: list) -> bool:
        """Adds what of ``entry`` depends on this loop's iteration to ``split``; False when its
        share is cut by a loop inside the body before it is cut by this one."""
        labels = list(entry[2]) if len(entry) > 2 and entry[2] else []
        if label not in labels:
            return True
        upto = len(labels) - labels[::-1].index(label)
        if any(other in inside for other in labels[:upto]):
            return False
        split.append([entry[0], entry[1], labels[:upto]])
        return True

    for step in flat(loop["steps"]):
        for entry in step.get("free", []):
            if len(entry) > 1:
                return None  # a part freed: its byte range matters
            names.add(entry[0])
        for entry in step.get("alloc", []):
            labels = entry[2] if len(entry) > 2 else []
            if labels and len(entry) > 4 and int(entry[4]) >= int(entry[1]):
                return None  # parts accumulate in one buffer: their byte ranges matter
            names.add(entry[0])
            if not depends(entry):
                return None
        for entry in step.get("needs", []):
            names.add(entry[0])
            if not depends(entry):
                return None
        names.update(step.get("uses", []))
        for d in dma.get(step.get("id"), []):
            names.add(d["tensor"])
            if not depends([d["tensor"], d["bytes"], d.get("split", [])]):
                return None
    return frozenset(names), split


def ranged_alike(loop: dict, dma: dict[str, list[dict]], sizes: dict[str, int]) -> frozenset | None:
    """Where the replay knows which bytes of a tensor hold data (:mod:`loopwise.memory.verify_ranges`),
    the range an entry cut by the loop fills or needs moves with the iteration. The tensors of the
    body with such entries, when each one's entries in the body (allocations, loads, needs of a
    range the replay places: its whole size cut by its labels, or its first bytes) are all alike
    (the same bytes, the same labels): an iteration then fills and needs the same range of it, and
    one that starts with none of it on chip checks it as any other does. None when a tensor's
    entries differ, or the JSON is malformed (the replay says how)."""
    try:
        label = loop["loop"]
        kinds: dict[str, set] = {}
        for step in flat(loop["steps"]):
            entries = [*step.get("alloc", []), *step.get("needs", [])]
            entries += [[d["tensor"], d["bytes"], d.get("split", [])] for d in dma.get(step.get("id"), [])
                        if d.get("from") == "dram"]
            for entry in entries:
                t, total = entry[0], int(entry[1])
                labels = tuple(entry[2]) if len(entry) > 2 and entry[2] else ()
                size = sizes.get(t)
                if size is not None and (total == size or (not labels and total < size)):
                    kinds.setdefault(t, set()).add((total, labels))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
    cut_here = {t for t, ks in kinds.items() if any(label in labels for _, labels in ks)}
    if any(len(kinds[t]) > 1 for t in cut_here):
        return None
    return frozenset(cut_here)


def _loops(steps: list):
    for step in steps:
        if "loop" in step:
            yield step
            yield from _loops(step["steps"])


def signature(split: list, loops: dict) -> tuple[int, ...] | None:
    """The share of each entry of ``split`` in the iteration ``loops`` gives (label: ``(lo, hi,
    extent, count)``), cut as the replay cuts it; None when an entry names a loop that does not
    enclose it (the replay reports that)."""
    if any(label not in loops for entry in split for label in entry[2]):
        return None
    out = []
    for entry in split:
        nbytes = int(entry[1])
        for label in entry[2]:
            lo, hi, extent, _ = loops[label]
            nbytes = nbytes * hi // extent - nbytes * lo // extent
        out.append(nbytes)
    return tuple(out)
