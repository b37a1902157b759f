"""The replay's (:mod:`loopwise.memory.verify`) checks of a schedule against the model it plans:
the model is imported again from what the plan records (``model`` and ``imported_as``: batch,
sequence length, element size), and its graph, not the planner, says what must happen.

- Every operator of the graph runs in exactly one step of the schedule, or is listed in the plan's
  ``operators_folded`` and applied by its readers: it writes one result at its own loops (no
  reduction), each of its readers runs (or is folded in turn), and its result is never on chip
  under its own name (``operators``). A step names
  no operator the graph does not have.
- A tensor no step of the schedule computes (no operator that runs writes it) is in DRAM from the
  start only if it is a model input or a weight of the graph; a tensor of the graph that the graph
  computes, used with no operator of the schedule writing it, is a dropped computation
  (``inputs``). A tensor that is not the graph's (an online softmax's running state) is never
  moved to or from DRAM.
- Each operator runs after the operators whose results it reads, through folded ones (``order``).
- The model's outputs are the graph's: each is stored in full (``output``), whatever the plan's
  own ``outputs`` list says.

Graph tensors a reader reads that never appear in the schedule (a folded operator's result, an
intermediate a tiled product accumulates straight into its epilogue's output) are not checked
here beyond the order of their operators.

This module imports the model (the importers) and reads the plan's JSON; it shares no code with
the planner.
"""

from __future__ import annotations

from pathlib import Path

from loopwise.memory.verify_group import flat
from loopwise.memory.verify_verdict import Violation


def rebuild(plan: dict):
    """The graph of the model ``plan`` names, imported again as the plan records it was, and why
    not when it cannot be (then None)."""
    model, how = plan.get("model"), plan.get("imported_as")
    if not isinstance(model, str) or not model:
        return None, "the plan names no model"
    if not isinstance(how, dict) or "elem_bytes" not in how:
        return None, f"the plan does not record how {model} was imported (batch, sequence, element size)"
    try:
        if model.startswith(("zoo:", "torchvision:")):
            from loopwise.memory.torch_import import load_torch

            imported = load_torch(model, batch=int(how.get("batch") or 1), seq=how.get("seq"),
                                  elem_bytes=int(how["elem_bytes"]))
        elif Path(model).suffix.lower() == ".onnx" and Path(model).is_file():
            from loopwise.memory.onnx_import import load_onnx

            imported = load_onnx(Path(model), int(how["elem_bytes"]))
        else:
            return None, f"{model} is no zoo or torchvision model nor an ONNX file here"
    except Exception as exc:  # an importer's failure is a reason, never a traceback
        return None, f"{model} cannot be imported again ({exc.__class__.__name__}: {exc})"
    return imported.graph, ""


def model_violations(plan: dict, graph, stored: dict[str, int]) -> list[Violation]:
    """What the schedule does that the model's ``graph`` says it must not; ``stored``: the bytes of
    each tensor the replay counted as stored to DRAM."""
    schedule = plan["schedule"]
    ops = {op.name: op for op in graph.operators}
    out: list[Violation] = []

    def violate(kind: str, where: str, message: str) -> None:
        out.append(Violation(kind, where, message))

    steps = [(gi, s) for gi, g in enumerate(schedule["groups"]) for s in flat(g["steps"])]
    position: dict[str, int] = {}
    for n, (gi, s) in enumerate(steps):
        name = s.get("operator")
        if not name:
            continue
        if name not in ops:
            violate("operators", f"group {gi}", f"{name} is no operator of the model")
        elif name in position:
            violate("operators", f"group {gi}", f"{name} runs in two steps of the schedule")
        else:
            position[name] = n
    folded = set(plan.get("operators_folded") or [])
    producer = {a.tensor: op.name for op in graph.operators for a in op.writes}
    readers: dict[str, list[str]] = {}
    for op in graph.operators:
        for t in {a.tensor for a in op.reads}:
            readers.setdefault(t, []).append(op.name)
    seen = named_tensors(schedule)
    for op in graph.operators:
        if op.name in position:
            continue
        if op.name not in folded:
            violate("operators", "whole plan", f"{op.name}, an operator of the model, runs in no step and is not "
                                               "listed as folded")
            continue
        if len(op.writes) != 1 or tuple(op.writes[0].index) != tuple(op.dims):
            violate("operators", "whole plan", f"{op.name} is listed as folded, but it does not write one result at "
                                               "its own loops (a reduction): its readers cannot apply it")
        for t in {a.tensor for a in op.writes}:
            if not readers.get(t):
                violate("operators", "whole plan", f"{op.name} is listed as folded, but no operator reads its {t}")
            for r in readers.get(t, []):
                if r not in position and r not in folded:
                    violate("operators", "whole plan", f"{op.name} is listed as folded into {r}, which does not run")
            if t in seen:
                violate("operators", "whole plan", f"{op.name} is listed as folded, but its result {t} is on chip")
    tensors = graph.tensors()
    computed = {producer[t] for t in producer if producer[t] in position}
    made = {a.tensor for name in computed for a in ops[name].writes}
    in_dram = set(graph.inputs()) | set(graph.weights)
    for t in sorted(seen):
        if t in tensors and t not in made and t not in in_dram:
            violate("inputs", "whole plan", f"{t} is taken from DRAM as if it were a model input, but the model "
                                            f"computes it ({producer.get(t, '?')}) and no step of the schedule does")
    for gi, g in enumerate(schedule["groups"]):
        for d in g.get("dma", []):
            if d["tensor"] not in tensors:
                violate("inputs", f"group {gi}", f"{d['tensor']} is no tensor of the model, yet it is moved "
                                                 f"{'to' if d['to'] == 'dram' else 'from'} DRAM")
    out += _order(graph, position, folded, producer, steps)
    for t in graph.outputs():
        if stored.get(t, 0) < graph.nbytes(t):
            violate("output", "end of plan", f"model output {t} (the model's graph): {stored.get(t, 0)} of its "
                                             f"{graph.nbytes(t)} bytes stored")
    return out


def _order(graph, position: dict[str, int], folded: set[str], producer: dict[str, str], steps: list) -> list[Violation]:
    ops = {op.name: op for op in graph.operators}

    def sources(name: str, depth: int = 0) -> set[str]:
        """The operators that run whose results ``name`` reads, through folded ones."""
        out: set[str] = set()
        for a in ops[name].reads:
            p = producer.get(a.tensor)
            if p is None or p == name:
                continue
            if p in position:
                out.add(p)
            elif p in folded and depth < len(ops):
                out |= sources(p, depth + 1)
        return out

    out = []
    for name, n in position.items():
        for p in sorted(sources(name)):
            if position[p] > n:
                out.append(Violation("order", f"group {steps[n][0]}", f"{name} runs before {p}, whose result it "
                                                                       "reads"))
    return out


def named_tensors(schedule: dict) -> set[str]:
    """Every tensor the schedule names in a step or a transfer."""
    out: set[str] = set()
    for g in schedule["groups"]:
        for s in flat(g["steps"]):
            out |= set(s.get("uses", []))
            for key in ("needs", "alloc", "free"):
                out |= {e[0] for e in s.get(key, [])}
        out |= {d["tensor"] for d in g.get("dma", [])}
    return out
