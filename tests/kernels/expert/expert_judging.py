"""What the expert's test modules share: where the test problems are, the judge settings of the
template tests, and the helpers that write, load and judge generated candidates."""

import functools
from pathlib import Path

import pytest

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.expert import capture, generate
from loopwise.kernels.expert.pattern import Pattern
from loopwise.kernels.problem import load_problem

try:
    # Imported now, before any test sets TRITON_INTERPRET for its sandboxes: Triton's standard
    # library (and gluon's copy of it, which the ahead-of-time compiles below import) is then built
    # for compilation, whatever order the tests run in.
    import triton.experimental.gluon  # noqa: F401
except ImportError:
    pass

HERE = Path(__file__).parents[1] / "expert_problems"


# The judge settings of the template tests: one draw of the problem's own distribution and one
# mixed-sign stress draw, each compared with float64 over the whole output, one timed call. The
# judge's own defaults (five and two draws, 100 timed calls) are tested in test_judge.py; here
# each call of a candidate is one pass of Triton's interpreter, 0.3-5 s on the CI machine (a judged
# candidate is called eight times: the draws, the determinism repeat, timing, launch counting), and
# a template's indexing is the same on every draw of one shape (the parameters vary the shapes).
TEMPLATE_JUDGE = {"correct_trials": 1, "stress_trials": 1, "perf_trials": 1, "warmup": 0, "seed": 9, "energy": False}
# The environment of those judges (and their sandboxes): the collector is left on through the timed
# call (LOOPWISE_TIMING_GC=on). A template test asserts the verdict, never the time, and would
# otherwise pay a full collection before every timed pass, in the judge and in its sandbox;
# test_timing.py tests the switch and the default (off), the judge's own tests run with the default.
TEMPLATE_JUDGE_ENV = {"LOOPWISE_TIMING_GC": "on"}


def tiered(cases: list, fast: set[int]) -> list:
    """``cases`` for ``pytest.mark.parametrize``, those whose index is not in ``fast`` in the slow
    tier: a family of judged cases keeps a few kinds in ``make test`` and runs whole in
    ``make test-slow`` (each judged case takes seconds in Triton's interpreter)."""
    return [case if i in fast else pytest.param(*(case if isinstance(case, tuple) else (case,)), marks=pytest.mark.slow)
            for i, case in enumerate(cases)]


def problem_variant(tmp_path: Path, fixture: str, replacements: dict[str, str]) -> Path:
    """A copy of an expert_problems fixture with parts of its source replaced (each must be there)."""
    source = (HERE / fixture).read_text()
    for old, new in replacements.items():
        assert old in source, (fixture, old)
        source = source.replace(old, new)
    path = tmp_path / f"variant_{fixture}"
    path.write_text(source)
    return path


def judged_variant(tmp_path, monkeypatch, fixture: str, kind: str, moves: dict, replacements: dict[str, str]):
    """The variant is captured as ``kind`` and its generated candidate judged correct; its pattern."""
    path = problem_variant(tmp_path, fixture, replacements)
    pattern = capture(load_problem(str(path)))
    assert pattern.kind == kind, pattern
    judged_correct(path, moves, tmp_path, monkeypatch)
    return pattern


def judged_correct(path, moves, tmp_path, monkeypatch, edit=None) -> str:
    """The candidate for ``moves`` (changed by ``edit``, a function of its source, if given) is
    judged correct in Triton's interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # inherited by the sandbox
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    problem = load_problem(str(path))
    source, pattern = generate(problem, moves)
    assert source is not None, pattern.reason
    source = edit(source) if edit else source
    compile(source, path.name, "exec")
    judge_on_cpu(problem, source, f"expert-{path.name}", tmp_path)
    return source


def judged_parts(tmp_path, monkeypatch, name, forward, parts, init, shape, kind, dtype="float32"):
    """The graph_norm plan of the generated-style problem has one ``kind`` part (row, pool) per entry
    of ``parts`` (its operations), nothing else in Triton, none of those operations left in
    PyTorch, and its candidate is judged correct; the plan."""
    from loopwise.kernels.expert.partition import kinds, launches, plan

    path = generated_style_problem(tmp_path, name, init, forward, f"torch.randn({shape}, dtype=DTYPE)", dtype)
    pattern = capture(load_problem(str(path)))
    assert "graph_norm" in kinds(pattern), pattern.reason
    chosen = plan(pattern, "graph_norm")
    assert [n.ops for n in chosen["norms"]] == parts and not chosen["groups"]
    assert {n.kind for n in chosen["norms"]} == {kind}
    assert launches(chosen) == len(parts) + len(chosen["pytorch"])
    source = judged_correct(path, {"template": "graph_norm", "block": 64}, tmp_path, monkeypatch)
    assert f"{kind}op_0_kernel[" in source
    return chosen


@functools.cache
def _cpu_ceilings_json() -> str:
    """This machine's CPU ceilings, measured once per test process."""
    from loopwise.kernels.roofline.ceilings import measure_ceilings

    return measure_ceilings("cpu").model_dump_json(indent=2)


def with_cpu_ceilings() -> None:
    """The cache in effect (each template test's own, fresh) gets this process's measured CPU
    ceilings where it has none, as a cache the judge filled before would: the judge reads them for
    its speed-of-light floor and would otherwise measure them again for every test."""
    from loopwise.kernels.roofline.ceilings import cache_path, read_ceilings

    path = cache_path("cpu")
    if read_ceilings(path) is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_cpu_ceilings_json())


def judge_on_cpu(problem, source, name, tmp_path, precision="fp32"):
    """``source`` is judged correct, with no rejection, on the CPU (Triton's interpreter where the
    caller set it): the ``fp32`` policy with strict tolerance, or ``relaxed`` with legacy."""
    cfg = EvalConfig(**TEMPLATE_JUDGE, precision=precision, tolerance="strict" if precision == "fp32" else "legacy")
    with_cpu_ceilings()
    with pytest.MonkeyPatch.context() as env:
        for key, value in TEMPLATE_JUDGE_ENV.items():
            env.setenv(key, value)
        with LocalJudge(problem, cfg, device="cpu", log_dir=tmp_path, spares=0) as judge:
            ev = judge.evaluate(source, name)
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
    assert not ev.rejections


def load_candidate(source, tmp_path, name):
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_source(init: str, forward: str, shape: str = "2, 3, 9, 9", params: str = "") -> str:
    """A problem file: ``Model`` whose __init__ runs the ``init`` lines and whose forward (x, then
    ``params``) runs the ``forward`` lines, on one input of ``shape``."""
    def lines(text: str) -> str:
        return "\n".join("        " + line for line in text.splitlines())

    return ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
            f"        super().__init__()\n{lines(init)}\n\n    def forward(self, x{', ' + params if params else ''}):\n"
            f"{lines(forward)}\n\n\ndef get_inputs():\n    return [torch.randn({shape})]\n\n\n"
            "def get_init_inputs():\n    return []\n")


PARTIAL = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.GroupNorm(2, 8)
        {extra}

    def forward(self, x):
        {body}


def get_inputs():
    return [torch.randn(2, 3, 9, 9)]


def get_init_inputs():
    return []
"""


SDPA = "F.scaled_dot_product_attention(q, k, v)"


def captured(name: str, replacements: dict[str, str] | None = None, tmp_path: Path | None = None) -> Pattern:
    """The pattern captured from an expert_problems fixture, with parts of its source replaced."""
    path = HERE / name
    if replacements:
        source = path.read_text()
        for old, new in replacements.items():
            assert old in source, (name, old)
            source = source.replace(old, new)
        path = tmp_path / f"variant_{name}"
        path.write_text(source)
    return capture(load_problem(str(path)))


def matmul_pattern(dtype: str, trans_a: bool = False, trans_b: bool = False, m: int = 256, n: int = 128, k: int = 64):
    """A matrix product's pattern of the given dtype, layout and sizes."""
    return Pattern("matmul", inputs=2, ops=("matmul",),
                   params=(("trans_a", trans_a), ("trans_b", trans_b), ("m", m), ("n", n), ("k", k), ("dtype", dtype)))


def bmm_pattern(dtype: str, trans_a: bool = False, trans_b: bool = False, shared_a: bool = False,
                shared_b: bool = False, batch: int = 3, m: int = 256, n: int = 128, k: int = 64):
    """A batch of matrix products' pattern (both operands inputs, a shared one 2-D) of the given
    dtype, layout and sizes."""
    return Pattern("bmm", inputs=2, ops=("matmul",),
                   params=(("a", "x0"), ("b", "x1"), ("trans_a", trans_a), ("trans_b", trans_b), ("batch", batch),
                           ("shared_a", shared_a), ("shared_b", shared_b), ("m", m), ("n", n), ("k", k),
                           ("dtype", dtype)))


def generated_style_problem(tmp_path, name: str, init: str, forward: str, inputs: str, dtype: str = "float32",
                            args: str = "x"):
    """A problem file in the generated suite's style: DTYPE at module level, ``init`` lines in
    __init__ (the model cast with ``self.to(DTYPE)`` where they say so), ``forward`` lines in
    forward(``args``) ending with ``x``, ``inputs`` from get_inputs."""
    path = tmp_path / f"{name}_{dtype}.py"
    body = "\n".join("        " + line for line in forward.splitlines())
    setup = "\n".join("        " + line for line in init.splitlines()) if init else "        pass"
    path.write_text(f"import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nDTYPE = torch.{dtype}\n\n\n"
                    f"class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n{setup}\n\n"
                    f"    def forward(self, {args}):\n{body}\n        return x\n\n\n"
                    f"def get_inputs():\n    return [{inputs}]\n\n\ndef get_init_inputs():\n    return []\n")
    return path


def compiles_for_hopper_without_spills(path, kernel: str, moves: dict | None = None) -> None:
    """The plan of the problem at ``path`` (``moves``: the graph_norm template's by default)
    compiled ahead of time for sm_90a: ``kernel`` gets registers and spills none."""
    from loopwise.kernels.expert.aot import compile_for_hopper

    problem = load_problem(str(path))
    source, pattern = generate(problem, moves or {"template": "graph_norm"})
    assert source is not None, pattern.reason
    report = compile_for_hopper(source, problem, kernel)
    assert report["registers"] > 0 and report["spill_bytes"] == 0, report
