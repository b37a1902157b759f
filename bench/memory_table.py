"""The memory engine's table: each zoo model at batch 1 and 32 on a target, planned
whole-model, against the layer-by-layer baseline and the compulsory bound, with planning times.

    python3 bench/memory_table.py [--target neuroncore-v2] [--models resnet50,mobilenet_v2,bert-base,gpt2]
                                  [--batches 1,32] [--out docs/data/memory-table.csv]

Each row is one process-local run: import (torch.export on the meta device) and plan timed apart.
Rows are written as they finish, so an interrupted run keeps what it measured.
"""

from __future__ import annotations

import argparse
import csv
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopwise.memory.planner import plan  # noqa: E402
from loopwise.memory.targets import load_target  # noqa: E402
from loopwise.memory.torch_import import load_torch  # noqa: E402

FIELDS = ["model", "batch", "target", "operators", "compulsory_mb", "layer_by_layer_mb", "plan_mb", "plan_over_compulsory",
          "plan_over_layer_by_layer", "pairs_removed", "copies_folded", "groups", "slab_groups", "import_s", "plan_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="neuroncore-v2")
    ap.add_argument("--models", default="resnet50,mobilenet_v2,bert-base,gpt2")
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--out", default="docs/data/memory-table.csv")
    args = ap.parse_args()
    target = load_target(args.target)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, target {target.name}",
          file=sys.stderr)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, FIELDS)
        writer.writeheader()
        for model in args.models.split(","):
            for batch in (int(b) for b in args.batches.split(",")):
                t0 = time.perf_counter()
                imported = load_torch(f"zoo:{model}", batch=batch)
                t1 = time.perf_counter()
                p = plan(imported.graph, target.scratchpad.bytes)
                t2 = time.perf_counter()
                row = {"model": model, "batch": batch, "target": target.name, "operators": len(imported.graph.operators),
                       "compulsory_mb": round(p.compulsory_bytes / 1e6, 2),
                       "layer_by_layer_mb": round(p.layer_by_layer_bytes / 1e6, 2), "plan_mb": round(p.total_bytes / 1e6, 2),
                       "plan_over_compulsory": round(p.total_bytes / p.compulsory_bytes, 3),
                       "plan_over_layer_by_layer": round(p.total_bytes / p.layer_by_layer_bytes, 3),
                       "pairs_removed": p.pairs_removed, "copies_folded": len(imported.folded), "groups": len(p.groups),
                       "slab_groups": sum(g.slab is not None for g in p.groups),
                       "import_s": round(t1 - t0, 2), "plan_s": round(t2 - t1, 2)}
                writer.writerow(row)
                fh.flush()
                print(" ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr)


if __name__ == "__main__":
    main()
