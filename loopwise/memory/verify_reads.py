"""What an operator step reads, from the model's graph: the replay (:mod:`loopwise.memory.verify`)
holds each step to the bytes of every tensor its operator touches in one iteration of its
enclosing loops, counted exactly from the graph's access maps (:mod:`loopwise.memory.polyhedral`),
not from the ``needs`` the planner wrote.

Which operator dimension a loop slices is the schedule's data: a group's ``loop_nest`` lists, per
operator, its loops (``dim``, ``extent``, ``tile``, ``trips``) and the label of the schedule loop
that runs each (``loop``). This module checks that binding against the graph (``binding``): the
dimension is the operator's, or ``D_b`` and ``D_i``, the blocks of the operator's dimension ``D``
and the place in a block (``D = size(D_i) * D_b + D_i``), whose extents multiply to ``D``'s; the
loop's extent is the dimension's. One iteration of a loop over ``D`` covers ``[lo, hi)`` of ``D``;
a loop of the nest with no label and more than one trip runs the step tile by tile, and the step
must hold at least one tile (the first). An operator folded into its readers (listed in
``operators_folded``, writing its result at its own loops' index) is composed into each reader:
the reader reads the folded operator's inputs where it read its result.

A group run tile by tile as a whole (``loop_nest.runs == "tiled"``) is held to the graph tile by
tile instead (:mod:`loopwise.memory.verify_tiles`: its loads and stores, and each tile within its
buffers). Left out: tensors the schedule never names (a folded result, a product's
result accumulated straight into its epilogue's output), and which bytes of a tensor are on chip:
a step is held to a count of bytes with data, not to their element ranges. A loop's iterations
that differ only in where they start touch as many elements unless the tensor's edge clips them:
one count is taken per tile size and per whether the tile starts or ends the loop.

This module reads the graph and the plan's JSON; it shares no code with the planner.
"""

from __future__ import annotations

import re
from dataclasses import replace

from loopwise.memory.ir import Access, Operator
from loopwise.memory.verify_verdict import Violation


def _substituted(expr: str, names: dict[str, str]) -> str:
    if not names or not expr:
        return expr
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: f"({names[m.group(1)]})", expr)


def _with(op: Operator, names: dict[str, str], dims: dict[str, int], reads: tuple[Access, ...], tensors) -> Operator:
    def moved(a: Access) -> Access:
        return Access(a.tensor, tuple(_substituted(e, names) for e in a.index), _substituted(a.guard, names))

    return replace(op, dims=dims, tensors=tuple(tensors), reads=tuple(map(moved, reads)),
                   writes=tuple(map(moved, op.writes)), coupled=frozenset(d for d in op.coupled if d in dims))


class Reads:
    """The graph's reads of each operator, the current group's loop bindings, and the bytes a step
    reads per iteration (cached per tile shape)."""

    def __init__(self, graph, folded: set[str]) -> None:
        self.ops = {op.name: op for op in graph.operators}
        self.folded = folded
        self.producer = {a.tensor: op.name for op in graph.operators for a in op.writes}
        self.composed: dict[str, Operator] = {}
        self.nests: dict[str, tuple[Operator, dict[str, str], dict[str, tuple[int, int]]]] = {}
        self.counts: dict[tuple, dict[str, int]] = {}
        self.tiled = False  # the current group runs tile by tile as a whole (:mod:`verify_tiles` checks it)
        self.unbound: set[str] = set()  # operators of steps with no loop nest entry: not counted either
        self.reported: set[tuple[str, str]] = set()

    def compose(self, name: str, depth: int = 0) -> Operator:
        """The graph's operator ``name`` reading, where it read a folded operator's result, that
        operator's inputs."""
        if name in self.composed:
            return self.composed[name]
        op = self.ops[name]
        reads, tensors = [], {t.name: t for t in op.tensors}
        for a in op.reads:
            f = self.producer.get(a.tensor)
            inner = self.ops.get(f) if f in self.folded and f != name else None
            if inner is None or len(inner.writes) != 1 or tuple(inner.writes[0].index) != tuple(inner.dims) \
                    or depth > len(self.ops):
                reads.append(a)
                continue
            inner = self.compose(f, depth + 1)
            where = dict(zip(inner.dims, a.index))
            for b in inner.reads:
                reads.append(Access(b.tensor, tuple(_substituted(e, where) for e in b.index),
                                    " and ".join(x for x in (a.guard, _substituted(b.guard, where)) if x)))
                tensors.setdefault(b.tensor, inner.tensor(b.tensor))
        composed = _with(op, {}, dict(op.dims), tuple(reads), tensors.values())
        self.composed[name] = composed
        return composed

    def group(self, group: dict, where: str) -> list[Violation]:
        """Reads a group's loop nest: per operator, its dimensions split as the nest names them and
        the loop label that runs each; the violations of the binding against the graph."""
        nest = group.get("loop_nest") or {}
        self.tiled = nest.get("runs") == "tiled"
        self.nests, out = {}, []
        for entry in nest.get("operators", []):
            name = entry.get("operator")
            if name not in self.ops:
                continue
            bound = self._bind(self.compose(name), entry.get("loops", []))
            if isinstance(bound, str):
                out.append(Violation("binding", where, f"{name}: {bound}"))
            else:
                self.nests[name] = bound
        return out

    def _bind(self, op: Operator, loops: list[dict]):
        by_dim = {l["dim"]: l for l in loops}
        splits: dict[str, int] = {}
        for l in loops:
            dim, extent = l["dim"], int(l["extent"])
            base = dim[:-2] if dim.endswith(("_b", "_i")) else None
            if dim in op.dims:
                if extent != op.dims[dim]:
                    return f"the nest runs {dim} over {extent}, the model's operator over {op.dims[dim]}"
            elif base in op.dims and f"{base}_b" in by_dim and f"{base}_i" in by_dim:
                inner, block = int(by_dim[f"{base}_i"]["extent"]), int(by_dim[f"{base}_b"]["extent"])
                if inner * block != op.dims[base]:
                    return f"{base}_b and {base}_i ({block} x {inner}) do not split {base} ({op.dims[base]})"
                splits[base] = inner
            else:
                return f"the nest runs a dimension {dim}, which the model's operator has not"
        if splits:
            dims: dict[str, int] = {}
            for d, e in op.dims.items():
                dims.update({f"{d}_b": e // splits[d], f"{d}_i": splits[d]} if d in splits else {d: e})
            names = {d: f"{s}*{d}_b + {d}_i" for d, s in splits.items()}
            op = _with(op, names, dims, op.reads, op.tensors)
        labels = {l["loop"]: l["dim"] for l in loops if l.get("loop")}
        tiles = {l["dim"]: (0, int(l["tile"])) for l in loops
                 if not l.get("loop") and int(l.get("trips", 1)) > 1 and int(l["tile"]) < int(l["extent"])}
        return op, labels, tiles

    def required(self, name: str | None, loops: dict, where) -> tuple[dict[str, int], list[Violation]]:
        """The bytes of each tensor the step's operator reads in the current iteration of ``loops``
        (label -> (lo, hi, extent, count)), and the violations of a loop that does not run the
        dimension its binding names (``where``: the step, put in words only for one)."""
        nest = self.nests.get(name) if name and not self.tiled else None
        if nest is None:
            if name and not self.tiled and name in self.ops:
                self.unbound.add(name)
            return {}, []
        op, labels, tiles = nest
        key = (name,) + tuple((label, hi - lo, lo == 0, hi == extent)
                              for label, (lo, hi, extent, _) in loops.items() if label in labels)
        counts = self.counts.get(key)
        if counts is not None:
            return counts, []
        tile, out = dict(tiles), []
        for label, (lo, hi, extent, _) in loops.items():
            dim = labels.get(label)
            if dim is None:
                continue
            if extent != op.dims[dim]:
                if (name, label) not in self.reported:
                    self.reported.add((name, label))
                    out.append(Violation("binding", str(where), f"loop {label!r} of extent {extent} runs {dim} of "
                                                                f"{name}, whose extent is {op.dims[dim]}"))
                continue
            tile[dim] = (lo, hi - lo)
        from loopwise.memory.polyhedral import footprint_bytes

        counts = {t: footprint_bytes(op, t, tile) for t in dict.fromkeys(a.tensor for a in op.reads)}
        self.counts[key] = counts
        return counts, out

    def short(self, name: str | None, output: set[str], loops: dict, where, filled: dict[str, int],
              named: set[str]) -> list[Violation]:
        """Each tensor the step's operator reads (but not its ``output``), named in the schedule
        (``named``), whose bytes with data (``filled``) are fewer than the graph says it reads in
        this iteration, and the loops that run another extent than the dimension they name."""
        required, out = self.required(name, loops, where)
        slack = 2 * len(loops)  # each share may round by a byte or two per loop it is cut over
        for t, nbytes in required.items():
            have = filled.get(t, 0)
            if nbytes > have + slack and t not in output and t in named:
                out.append(Violation("short", str(where), f"{t}: the operator reads {nbytes} bytes of it in this "
                                                          f"iteration (the model's graph), {have} on chip hold data",
                                     nbytes, have))
        return out

    def unchecked(self) -> str:
        """The steps whose reads were not held to the graph's counts, in words ("" when none)."""
        plural = lambda n, word: f"{n} {word}" + ("s" if n != 1 else "")  # noqa: E731
        parts = []
        if self.unbound:
            names = ", ".join(sorted(self.unbound)[:3]) + (", ..." if len(self.unbound) > 3 else "")
            parts.append(plural(len(self.unbound), "operator") + f" with no loop nest ({names})")
        return "; ".join(parts)
