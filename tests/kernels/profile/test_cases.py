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
import importlib.util, json, sys
from pathlib import Path
import torch
from loopwise.kernels.problem import load_problem
root, case = Path(sys.argv[1]), sys.argv[2]
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
print("ok")
"""


@pytest.mark.parametrize("case", sorted(c for c in LABELS if (CASES / c / "candidate.py").is_file()))
def test_candidate_matches_its_problem(case, tmp_path):
    source = (CASES / case / "candidate.py").read_text()
    if "load_inline" in source and not torch.cuda.is_available():
        pytest.skip("CUDA extension: needs nvcc and a GPU")
    (tmp_path / "problem.py").write_text(small(problem_file(case).read_text()))
    (tmp_path / "candidate.py").write_text(source)
    # A process of its own: Triton must be imported with TRITON_INTERPRET set for its standard
    # library (tl.sum, tl.max) to be interpretable, and this test process may have imported it.
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path), case], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
