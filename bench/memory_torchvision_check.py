"""torchvision's own ResNet-50, MobileNetV2 and EfficientNet-B0 against the zoo's plain-torch copies
of them (loopwise/memory/zoo.py): the same operators, the same tensors, the same plan. Run where
torchvision imports (the GPU machine's image has it; the CPU machines' torch build does not).

    source bench/remote_prelude.sh; python3 bench/memory_torchvision_check.py   # $OUT/memory_torchvision.md
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loopwise.memory.planner import plan  # noqa: E402
from loopwise.memory.targets import load_target  # noqa: E402
from loopwise.memory.torch_import import load_torch  # noqa: E402


def main() -> int:
    import torch
    import torchvision

    cap = load_target("neuroncore-v2").scratchpad.bytes
    lines = [f"torch {torch.__version__}, torchvision {torchvision.__version__}, target neuroncore-v2, batch 1", "",
             "| model | source | operators | tensors | unsupported | compulsory MB | plan MB | layer by layer MB | "
             "import s | plan s |", "|---|---|---|---|---|---|---|---|---|---|"]
    same = True
    for name in ("resnet50", "mobilenet_v2", "efficientnet_b0"):
        seen = []
        for source in ("zoo", "torchvision"):
            t0 = time.perf_counter()
            imported = load_torch(f"{source}:{name}", batch=1)
            t1 = time.perf_counter()
            p = plan(imported.graph, cap)
            t2 = time.perf_counter()
            g = imported.graph
            row = (len(g.operators), len(g.tensors()), len(imported.unsupported), p.compulsory_bytes, p.total_bytes,
                   p.layer_by_layer_bytes)
            seen.append(row)
            lines.append(f"| {name} | {source} | {row[0]} | {row[1]} | {row[2]} | {row[3] / 1e6:.3f} | "
                         f"{row[4] / 1e6:.3f} | {row[5] / 1e6:.3f} | {t1 - t0:.1f} | {t2 - t1:.1f} |")
        same = same and seen[0] == seen[1]
    lines.append("")
    lines.append("same graphs and plans: " + ("yes" if same else "NO"))
    text = "\n".join(lines) + "\n"
    out = Path(os.environ.get("OUT", "bench_out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_torchvision.md").write_text(text)
    print(text)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
