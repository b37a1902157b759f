"""Records what ZigZag says about the DRAM traffic of its own ResNet-18 and MobileNetV2 workloads on
the 24 MiB hierarchy the agreement tests use (about three minutes on the CI machine, most of it
ResNet-18), so those tests compare loopwise against the recording instead of running ZigZag each
time. Run it again whenever the installed zigzag-dse is another version than the recording's:

    .venv/bin/python tests/memory/record_zigzag.py
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import zigzag

from loopwise.memory.targets import load_target
from loopwise.memory.zigzag_compare import run_zigzag

FIXTURE = Path(__file__).parent / "fixtures" / "zigzag_layers.json"
TARGET, NETS = "neuroncore-v2", ("resnet18", "mobilenetv2")


def main() -> None:
    workloads = Path(zigzag.__file__).parent / "inputs" / "workload"
    data = {"zigzag_dse": version("zigzag-dse"), "target": TARGET, "elem_bytes": 2, "lpf_limit": 1,
            "models": {net: run_zigzag(workloads / f"{net}.onnx", load_target(TARGET)) for net in NETS}}
    FIXTURE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")


if __name__ == "__main__":
    main()
