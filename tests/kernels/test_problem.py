"""Loading and validating KernelBench-format problems, and resolving kernelbench:LEVEL/ID specs."""

from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path

import pytest

from loopwise.errors import ProblemError, UserError
from loopwise.kernels.problem import KERNELBENCH_ENV, load_problem, validate_problem

# 16 GiB of inputs: validation only survives this because it builds them on the meta device.
GOOD = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale

        def forward(self, a, b, alpha):
            return torch.matmul(a, b) * self.scale * alpha

    def get_inputs():
        return [torch.rand(1 << 16, 1 << 16), torch.rand(1 << 16, 8), 2.0]

    def get_init_inputs():
        return [3]
    """)

_HEADER = "import torch\nimport torch.nn as nn\n"
_MODEL = "class Model(nn.Module):\n    def forward(self, x):\n        return x\n"
_INPUTS = "def get_inputs():\n    return [torch.rand(2, 2)]\n"
_INIT = "def get_init_inputs():\n    return []\n"

MALFORMED = {
    "syntax": (_HEADER + "def get_inputs(:\n    pass\n", "syntax error at line 3"),
    "import_raises": (_HEADER + "raise RuntimeError('boom')\n", "import failed: RuntimeError: boom (line 3)"),
    "missing_model": (_HEADER + _INPUTS + _INIT, "missing Model"),
    "missing_two": (_HEADER + _MODEL, "missing get_inputs, get_init_inputs"),
    "model_not_module": (_HEADER + "class Model:\n    pass\n" + _INPUTS + _INIT,
                         "Model is not a torch.nn.Module subclass"),
    "inputs_not_callable": (_HEADER + _MODEL + "get_inputs = [1]\n" + _INIT,
                            "get_inputs is not callable (it is a list)"),
    "inputs_raise": (_HEADER + _MODEL + "def get_inputs():\n    raise ValueError('bad size')\n" + _INIT,
                     "get_inputs() raised ValueError: bad size (line 7)"),
    "inputs_tensor": (_HEADER + _MODEL + "def get_inputs():\n    return torch.rand(2, 2)\n" + _INIT,
                      "get_inputs() returned a Tensor of shape (2, 2), expected a list or tuple"),
    "init_dict": (_HEADER + _MODEL + _INPUTS + "def get_init_inputs():\n    return {}\n",
                  "get_init_inputs() returned a dict, expected a list or tuple"),
    "model_init_raises": (_HEADER + _MODEL + _INPUTS + "def get_init_inputs():\n    return [1, 2]\n",
                          "Model(*get_init_inputs()) raised TypeError"),
}


def _write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")
    return path


def test_good_problem_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, "tiny_matmul.py", GOOD)
    problem = load_problem(str(path))
    assert problem.name == "tiny_matmul"
    assert problem.sha256 == hashlib.sha256(GOOD.encode()).hexdigest()
    assert (problem.level, problem.problem_id) == (None, None)
    signature = problem.signature
    assert signature.input_shapes == ((65536, 65536), (65536, 8), None)
    assert signature.input_dtypes == ("float32", "float32", None)
    assert signature.init_args == "[3]"
    assert signature.skipped == ()
    assert "tiny_matmul" in problem.describe()


def test_load_module_is_fresh_and_unregistered(tmp_path: Path) -> None:
    problem = load_problem(str(_write(tmp_path, "p.py", GOOD)), validate=False)
    module = problem.load_module()
    assert module.__file__ == str(problem.path)
    assert module.__name__ not in sys.modules
    assert problem.load_module().Model is not module.Model
    registered = problem.load_module("loopwise_test_registered", register=True)
    try:
        assert sys.modules["loopwise_test_registered"] is registered
    finally:
        del sys.modules["loopwise_test_registered"]


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_problem_is_one_line(tmp_path: Path, kind: str) -> None:
    source, fault = MALFORMED[kind]
    path = _write(tmp_path, f"{kind}.py", source)
    with pytest.raises(ProblemError) as caught:
        load_problem(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}: ")
    assert fault in message
    assert "\n" not in message


def test_meta_only_failure_is_skipped_not_reported(tmp_path: Path) -> None:
    source = _HEADER + textwrap.dedent("""\
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.depth = int(torch.linspace(0, 3, 4)[-1].item())

            def forward(self, x):
                return x * self.depth
        """) + _INPUTS + _INIT
    signature = validate_problem(load_problem(str(_write(tmp_path, "p.py", source)), validate=False))
    assert signature.input_shapes == ((2, 2),)
    assert len(signature.skipped) == 1 and "Model" in signature.skipped[0]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="no such file"):
        load_problem(str(tmp_path / "nope.py"))


def _checkout(root: Path, inner: bool) -> Path:
    """A fake KernelBench checkout with three level-1 problems; ``inner`` nests them like the repo."""
    base = root / "KernelBench" if inner else root
    for name in ("1_First.py", "2_Second.py", "3_Third_problem.py"):
        _write(base / "level1", name, GOOD)
    _write(base / "level2", "1_Fused.py", GOOD)
    return root


@pytest.mark.parametrize("inner", [True, False], ids=["repo_root", "inner_folder"])
def test_kernelbench_spec_by_argument(tmp_path: Path, inner: bool) -> None:
    root = _checkout(tmp_path / "kb", inner)
    problem = load_problem("kernelbench:1/3", kernelbench=str(root))
    assert problem.name == "level1/3_Third_problem"
    assert (problem.level, problem.problem_id) == (1, 3)
    assert problem.path.name == "3_Third_problem.py"


def test_kernelbench_spec_from_env_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KERNELBENCH_ENV, str(_checkout(tmp_path / "kb", inner=True)))
    assert load_problem("kernelbench:2/1", validate=False).name == "level2/1_Fused"
    monkeypatch.delenv(KERNELBENCH_ENV)
    _checkout(tmp_path / "work" / "third_party" / "KernelBench", inner=True)
    monkeypatch.chdir(tmp_path / "work")
    assert load_problem("kernelbench:1/2", validate=False).problem_id == 2


def test_path_into_checkout_names_level_and_id(tmp_path: Path) -> None:
    root = _checkout(tmp_path, inner=True)
    problem = load_problem(str(root / "KernelBench" / "level1" / "2_Second.py"), validate=False)
    assert (problem.name, problem.level, problem.problem_id) == ("level1/2_Second", 1, 2)


def test_no_checkout_says_how_to_give_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KERNELBENCH_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        load_problem("kernelbench:1/3")
    assert "--kernelbench PATH" in str(caught.value) and KERNELBENCH_ENV in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "checkout", "message"),
    [
        ("kernelbench:1/99", "kb", "no problem 99 in KernelBench level 1"),
        ("kernelbench:1/99", "kb", "level 1 has 3 problems"),
        ("kernelbench:7/1", "kb", "level 7 not found"),
        ("kernelbench:one/3", "kb", "expected kernelbench:LEVEL/ID"),
        ("kernelbench:1", "kb", "expected kernelbench:LEVEL/ID"),
        ("kernelbench:1/3", "missing", "is not a KernelBench checkout"),
    ],
)
def test_kernelbench_spec_errors(tmp_path: Path, spec: str, checkout: str, message: str) -> None:
    _checkout(tmp_path / "kb", inner=True)
    with pytest.raises(UserError) as caught:
        load_problem(spec, kernelbench=str(tmp_path / checkout))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


EMBEDDING_BF16 = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8).to(torch.bfloat16)

    def forward(self, ids):
        return self.emb(ids)


def get_inputs():
    return [torch.randint(0, 50, (4, 3))]


def get_init_inputs():
    return []
"""


def test_a_model_whose_tensors_are_half_precision_computes_in_it_whatever_its_inputs(tmp_path: Path) -> None:
    """A bf16 embedding table read by int64 indices: the signature lists the model's tensor dtypes,
    and the static scan treats bf16 as the problem's own precision, as for bf16 inputs."""
    from loopwise.kernels.evaluate.verdict import static_policy

    problem = load_problem(str(_write(tmp_path, "emb_bf16.py", EMBEDDING_BF16)))
    assert problem.signature.input_dtypes == ("int64",)
    assert problem.signature.model_dtypes == ("bfloat16",)
    assert static_policy(problem, "fp32") == "relaxed"
    fp32 = load_problem(str(_write(tmp_path, "emb_fp32.py", EMBEDDING_BF16.replace(".to(torch.bfloat16)", ""))))
    assert fp32.signature.model_dtypes == ("float32",) and static_policy(fp32, "fp32") == "fp32"
