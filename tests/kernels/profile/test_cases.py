"""The kernels recorded for the profiling fixtures compute what their problems ask (checked at small
sizes with Triton's interpreter), and every case has a designed label naming a registered tool."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from loopwise.kernels.profile.registry import load_tools

CASES = Path(__file__).parents[1] / "profile_cases"
ROOT = Path(__file__).resolve().parents[3]
LABELS = json.loads((CASES / "cases.json").read_text())["cases"]


def problem_file(case: str) -> Path:
    """The case's problem: its own, or the one it shares (``problem`` in cases.json)."""
    return CASES / LABELS[case].get("problem", case) / "problem.py"
SMALL = {"N": 160, "M": 96, "ROWS": 5, "COLS": 3000}


def small(source: str) -> str:
    """The problem with its size constants shrunk, so the interpreter runs it in seconds."""
    def repl(m: re.Match) -> str:
        return f"{m.group(1)} = {SMALL[m.group(1)]}" if m.group(1) in SMALL else m.group(0)

    return re.sub(r"^([A-Z_]+) = [^\n]+$", repl, source, flags=re.M)


def test_every_case_folder_is_labelled_with_a_registered_tool():
    folders = sorted(p.name for p in CASES.iterdir() if p.is_dir() and not p.name.startswith("_"))
    assert folders == sorted(LABELS)
    names = {t.name for t in load_tools()}
    for case, label in LABELS.items():
        assert label["expected"] is None or label["expected"] in names, case
        assert problem_file(case).is_file()


CHECK = r"""
import importlib.util, json, sys, traceback
from pathlib import Path
import torch
from loopwise.kernels.problem import load_problem


def check(root, case):
    module = load_problem(str(root / "problem.py")).load_module()
    spec = importlib.util.spec_from_file_location("case_" + case, root / "candidate.py")
    cand = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cand)
    torch.manual_seed(0)
    args = module.get_inputs()
    ref = module.Model(*module.get_init_inputs())(*args)
    out = cand.ModelNew(*module.get_init_inputs())(*args)
    assert out.shape == ref.shape, (out.shape, ref.shape)
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)


results = {}
for root, case in json.loads(sys.argv[1]):
    try:
        check(Path(root), case)
        results[case] = "ok"
    except Exception:
        results[case] = traceback.format_exc()[-3000:]
print("RESULT " + json.dumps(results))
"""

CANDIDATES = sorted(c for c in LABELS if (CASES / c / "candidate.py").is_file())


def _runs_here(case: str) -> bool:
    return torch.cuda.is_available() or "load_inline" not in (CASES / case / "candidate.py").read_text()


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict[str, str]:
    """Each case that runs here checked in one process of its own: "ok", or the failure's traceback.
    A process apart from the tests': Triton must be imported with TRITON_INTERPRET set for its
    standard library (tl.sum, tl.max) to be interpretable, and this test process may have imported
    it. One for all the cases: starting it (torch, Triton) costs more than most checks."""
    cases = []
    for case in filter(_runs_here, CANDIDATES):
        folder = tmp_path_factory.mktemp(case)
        (folder / "problem.py").write_text(small(problem_file(case).read_text()))
        (folder / "candidate.py").write_text((CASES / case / "candidate.py").read_text())
        cases.append((str(folder), case))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CHECK, json.dumps(cases)], env=env, capture_output=True,
                          text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("case", CANDIDATES)
def test_candidate_matches_its_problem(case, checked):
    if not _runs_here(case):
        pytest.skip("CUDA extension: needs nvcc and a GPU")
    assert checked[case] == "ok", checked[case]
