"""bench/memory_matrix.py --tables renders a matrix file as one markdown table per batch: a verified
cell shows plan / compulsory and the plan's seconds, a timed-out cell says so, a missing cell says
it was not run."""

from __future__ import annotations

import csv

from bench_modules import bench_module


def test_tables_show_every_cell_as_it_ran(tmp_path):
    matrix = bench_module("memory_matrix")
    path = tmp_path / "m.csv"
    fields = ["model", "batch", "target", "status", "plan_over_compulsory", "plan_s"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fields)
        writer.writeheader()
        writer.writerow({"model": "resnet50", "batch": 1, "target": "neuroncore-v2", "status": "verified",
                         "plan_over_compulsory": "1.3174", "plan_s": "9.6"})
        writer.writerow({"model": "resnet50", "batch": 1, "target": "gpu-sm-shared", "status": "timeout: plan",
                         "plan_over_compulsory": "", "plan_s": ""})
        writer.writerow({"model": "gpt2", "batch": 32, "target": "scratchpad-1mib", "status": "verified",
                         "plan_over_compulsory": "100.295", "plan_s": "60.2"})
    text = matrix.tables(path)
    assert "**batch 1**" in text and "**batch 32**" in text and "**batch 8**" not in text
    assert "| resnet50 | 1.317 (10 s) | not run | not run | timeout |" in text
    assert "| gpt2 | not run | not run | 100.295 (60 s) | not run |" in text
