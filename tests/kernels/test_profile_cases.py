"""The kernels recorded for the profiling fixtures compute what their problems ask (checked at small
sizes with Triton's interpreter), and every case has a designed label naming a registered tool."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from loopwise.kernels.problem import load_problem
from loopwise.kernels.profile.registry import load_tools

CASES = Path(__file__).parent / "profile_cases"
LABELS = json.loads((CASES / "cases.json").read_text())["cases"]
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
        assert (CASES / case / "problem.py").is_file()


@pytest.mark.parametrize("case", sorted(c for c in LABELS if (CASES / c / "candidate.py").is_file()))
def test_candidate_matches_its_problem(case, tmp_path, monkeypatch):
    source = (CASES / case / "candidate.py").read_text()
    if "load_inline" in source and not torch.cuda.is_available():
        pytest.skip("CUDA extension: needs nvcc and a GPU")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    problem_file = tmp_path / "problem.py"
    problem_file.write_text(small((CASES / case / "problem.py").read_text()))
    module = load_problem(str(problem_file)).load_module()
    candidate_file = tmp_path / f"case_{case}.py"
    candidate_file.write_text(source)
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"case_{case}", candidate_file)
    cand = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cand)
    torch.manual_seed(0)
    args = module.get_inputs()
    ref = module.Model(*module.get_init_inputs())(*args)
    out = cand.ModelNew(*module.get_init_inputs())(*args)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)
