"""What the replay (:mod:`loopwise.memory.verify`) reads from a plan's JSON before it replays it:
the plan file; of a group, the DMA transfers by step, the operators whose loop nest runs a slab
tile by tile, and whether a loop over key blocks runs an online softmax; and the place of a step,
in words for a violation. Reads only the plan's JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

KEY_LOOP = "key"  # the label of a loop over key blocks (flash-style attention)
_SOFTMAX_CHAIN = re.compile(r"^matmul( (mul|div))?( add)? softmax matmul$")


class PlanFormatError(ValueError):
    """The input is not a plan with a schedule this module can replay."""


def load_plan(path: Path) -> dict:
    """The plan's JSON from ``path``; :class:`PlanFormatError` (one line) when it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanFormatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanFormatError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(f"{path}: not a plan (not JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("schedule"), dict):
        raise PlanFormatError(f"{path}: not a plan (no \"schedule\"; write one with loopwise memory plan --json)")
    return data


class Where:
    """Where a step runs: the group, the iteration of each enclosing loop and the operator, put in
    words only for a violation."""

    __slots__ = ("group", "path", "operator")

    def __init__(self, group: str, path: list[int], operator: str | None) -> None:
        self.group, self.path, self.operator = group, path, operator

    def __str__(self) -> str:
        slab = ".".join(str(t + 1) for t in self.path) or "-"
        return f"{self.group}, slab {slab}, " + (f"operator {self.operator}" if self.operator else "transfers")


def softmax_of(names: list[str]) -> str | None:
    """The softmax of a chain of operators that a loop over key blocks can run online (by the kind
    each name starts with: a score product, a scale and a mask add, each optional, a softmax and
    the value product), or None when the chain is not one."""
    kinds = [n.partition(":")[0].lstrip("_").lower() if ":" in n else "?" for n in names]
    if not _SOFTMAX_CHAIN.match(" ".join(kinds)):
        return None
    return names[kinds.index("softmax")]


def flat(steps: list) -> list[dict]:
    """The steps of ``steps`` and of the loops in it, in order."""
    out = []
    for step in steps:
        out += flat(step["steps"]) if "loop" in step else [step]
    return out


def by_tiles(group: dict) -> set[str]:
    """The operators of a group whose loop nest runs each slab in more than one tile (a dimension
    no slab loop cuts, split in more than one trip): one tile's output could land on input bytes a
    later tile of the same slab reads."""
    nest = group.get("loop_nest") or {}
    return {o["operator"] for o in nest.get("operators", [])
            if any(int(l.get("trips", 1)) > 1 for l in o.get("loops", []) if "loop" not in l)}


def transfers_by_step(group: dict) -> dict[str, list[dict]]:
    """A group's DMA transfers by the step that makes them; a transfer naming no step of the group,
    or moving between levels other than DRAM and the scratchpad, is no plan."""
    ids = {step.get("id") for step in flat(group["steps"])}
    out: dict[str, list[dict]] = {}
    for d in group.get("dma", []):
        if d["step"] not in ids:
            raise PlanFormatError(f"not a plan (a DMA transfer of {d['tensor']} names step {d['step']!r}, "
                                  "which its group does not have)")
        if (d["from"], d["to"]) not in (("dram", "scratchpad"), ("scratchpad", "dram")):
            raise PlanFormatError(f"not a plan (a DMA transfer of {d['tensor']} from {d['from']} to {d['to']})")
        out.setdefault(d["step"], []).append(d)
    return out
