"""Where a plan's bytes go, group by group, against the I/O lower bound of the matrix products in
each group: `loopwise memory plan zoo:MODEL --batch B --out PLAN.json`, then

    OMP_NUM_THREADS=1 python bench/memory_product_bounds.py PLAN.json zoo:MODEL --batch B [--target T]

A product of independent items (the dimensions that index every tensor it touches: the heads of an
attention) is ``items`` products ``[m, k] x [k, n]``; each moves at least ``2*m*n*k/sqrt(S) - 2*S``
words through a fast memory of ``S`` words (the tight bound of Smith, Lowery, Langou and van de
Geijn, 2019, for loads and stores together, the operands coming from DRAM; negative, i.e. no
bound beyond the operands themselves, for a product whose operands fit). The operands once are not
added: a group may keep some on chip. The bound of a group is the sum over its products; products
that read one operand (q, k and v of one normalized input) are one wider product, whose bound is
the same sum. A chain of products whose intermediate never leaves the chip is not covered by this
argument: the sum is the per-product bound the plan's product groups are held to, not a proof for
the whole layer. Prints one row per group (operators, plan bytes, products, their bound, plan /
bound) and the totals.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def product_bound_bytes(op, scratchpad_bytes: int) -> int:
    """The least traffic of ``op`` (a product: MACs > 0) beyond what fits, ``scratchpad_bytes``."""
    elem = op.tensors[0].elem_bytes
    words = scratchpad_bytes / elem
    names = {a.tensor for a in op.reads + op.writes}
    items = math.prod(e for d, e in op.dims.items()
                      if all(any(d in part.replace("(", " ").replace(")", " ").split() for part in a.index)
                             for a in op.reads + op.writes if a.tensor in names))
    per_item = max(0.0, 2 * (op.macs / items) / math.sqrt(words) - 2 * words) * items * elem
    return int(per_item)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan")
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--target", default="neuroncore-v2")
    args = ap.parse_args()
    from loopwise.memory.targets import load_target
    from loopwise.memory.torch_import import load_torch

    capacity = load_target(args.target).scratchpad.bytes
    ops = {op.name: op for op in load_torch(args.model, batch=args.batch, elem_bytes=2).graph.operators}
    groups = json.loads(Path(args.plan).read_text())["schedule"]["groups"]
    total_plan = total_bound = 0
    print("group\toperators\tplan_MB\tproducts\tproducts_bound_MB\tplan/bound")
    for gi, g in enumerate(groups):
        products = [ops[name] for name in g["operators"] if ops[name].macs]
        bound = sum(product_bound_bytes(op, capacity) for op in products)
        total_plan += g["traffic_bytes"]
        total_bound += bound
        names = g["operators"]
        span = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)})"
        ratio = f"{g['traffic_bytes'] / bound:.3f}" if bound else "-"
        print(f"{gi}\t{span}\t{g['traffic_bytes'] / 1e6:,.2f}\t{','.join(op.name for op in products) or '-'}\t"
              f"{bound / 1e6:,.2f}\t{ratio}")
    print(f"total\t\t{total_plan / 1e6:,.2f}\t\t{total_bound / 1e6:,.2f}\t{total_plan / total_bound:.3f}")


if __name__ == "__main__":
    main()
