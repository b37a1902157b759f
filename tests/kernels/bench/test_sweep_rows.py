"""bench/bench_rows.py and bench/sweep_table.py name the GPU each finished problem was judged on:
a sweep's device calls may get different GPUs, and its table says which, problem by problem."""

from __future__ import annotations

import csv
from pathlib import Path

from bench_modules import bench_module

from loopwise.core.run import create_run


def _runs(tmp_path: Path) -> Path:
    """A bench with three finished problems: two judged on one GPU, one on another, one whose run
    folder is gone."""
    runs = tmp_path / "runs"
    bench = create_run(runs, "kernels.bench", "{}")
    for i, device in enumerate(["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H100 80GB HBM3", None]):
        run_id = f"missing-{i}"
        if device is not None:
            opt = create_run(runs, "kernels.optimize", "{}")
            opt.append("reference", {"device": device, "eager_ms": 1.0})
            run_id = opt.meta.run_id
            opt.close()
        bench.append("problem_result", {"level": 1, "id": i, "problem": f"level1/{i}_p", "run_id": run_id,
                                        "best_speedup": 1.0}, key=f"1/{i}")
    bench.close()
    return runs


def test_each_row_names_the_gpu_its_problem_was_judged_on(tmp_path):
    rows_mod = bench_module("bench_rows")
    runs = _runs(tmp_path)
    assert rows_mod.main(str(runs), str(tmp_path / "rows.csv")) == 0
    with open(tmp_path / "rows.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["problem"], r["device"]) for r in rows] == [
        ("level1/0_p", "NVIDIA H100 80GB HBM3"), ("level1/1_p", "NVIDIA H200"),
        ("level1/2_p", "NVIDIA H100 80GB HBM3"), ("level1/3_p", "")]


def test_the_table_says_which_gpus_judged_how_many_problems():
    table = bench_module("sweep_table").table
    settings = {"budget": 2, "search": "greedy", "per_step": 2, "order": "shuffled:1", "levels": [1], "subset": "all"}
    rows = [{"level": 1, "id": i, "problem": f"level1/{i}_p", "best_speedup": 1.2, "over_compile": 1.1,
             "eager_ms": 1.0, "compile_ms": 1.0, "seconds": 60.0} for i in range(3)]
    head = table(settings, rows, {1: 100}, {"NVIDIA H200": 1, "NVIDIA H100 80GB HBM3": 2}).splitlines()[0]
    assert head.endswith("; judged on NVIDIA H100 80GB HBM3 (2 problems), NVIDIA H200 (1 problem)"), head
    assert "judged on" not in table(settings, rows, {1: 100}).splitlines()[0]
