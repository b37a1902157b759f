"""The seed's launch path: after the JIT's first launch of a kernel, later calls with the same
integer arguments and alignments go to Triton's compiled launcher directly, with every argument of
the compiled signature in its place (constants Inductor left out of the call, block sizes) and the
stream Inductor passes. Checked with a stand-in for Triton's compiled kernel, as Triton only
launches on a GPU."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_inductor_seed import problem_of, record  # noqa: E402

from loopwise.kernels.expert.inductor.standalone import render_seed  # noqa: E402

RECORD = "handwritten__softmax_problem"


@pytest.fixture
def launch_class(tmp_path):
    rec = record(RECORD)
    problem = problem_of(Path(__file__).parent / "records" / f"{RECORD}.json", tmp_path)
    path = tmp_path / "seed_file.py"
    path.write_text(render_seed(rec, problem))
    spec = importlib.util.spec_from_file_location("seed_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Compiled:
    """Triton's CompiledKernel as far as the launch path reads it."""

    def __init__(self, log):
        self.function, self.packed_metadata, self.log = "FUNCTION", "METADATA", log

    def run(self, *args):
        self.log.append(("direct", args))


class _Jit:
    def __init__(self, log):
        self.log, self.__name__ = log, "seed_k"

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.log.append(("jit", grid, args, kwargs))
            return _Compiled(self.log)
        return launch


def _grid(xnumel, XBLOCK, **_):
    return (-(xnumel // -XBLOCK), 1, 1)


def test_the_second_call_goes_to_the_compiled_launcher_with_every_argument_in_place(launch_class):
    log = []
    k = launch_class._Launch(_Jit(log), ["in_ptr0", "out_ptr0", "xnumel", "XBLOCK"], {"XBLOCK": 128}, {},
                             _grid, 4, 1)
    x, y = torch.zeros(1000), torch.zeros(1000)
    k.run(x, y, 1000, stream=77)
    k.run(x, y, 1000, stream=77)
    assert [e[0] for e in log] == ["jit", "direct"]
    assert log[1][1] == (8, 1, 1, 77, "FUNCTION", "METADATA", None, None, None, x, y, 1000, 128)


def test_a_constant_left_out_of_the_call_is_put_back_in_its_place(launch_class):
    log = []
    k = launch_class._Launch(_Jit(log), ["in_ptr0", "ks0", "out_ptr0", "xnumel", "XBLOCK"], {"XBLOCK": 64},
                             {"ks0": 3}, _grid, 4, 1)
    x, y = torch.zeros(256), torch.zeros(256)
    k.run(x, y, 256, stream=5)
    k.run(x, y, 256, stream=5)
    assert [e[0] for e in log] == ["jit", "direct"]
    assert log[1][1][9:] == (x, 3, y, 256, 64)


def test_other_integer_arguments_or_alignments_compile_again(launch_class):
    log = []
    k = launch_class._Launch(_Jit(log), ["in_ptr0", "xnumel", "XBLOCK"], {"XBLOCK": 128}, {}, _grid, 4, 1)
    x = torch.zeros(2048)
    k.run(x, 1000, stream=1)
    k.run(x, 2000, stream=1)
    k.run(x[1:], 1000, stream=1)  # 4 bytes off: another alignment
    assert [e[0] for e in log] == ["jit", "jit", "jit"]


def test_with_a_launch_hook_set_every_call_goes_through_triton(launch_class, monkeypatch):
    import triton

    log = []
    k = launch_class._Launch(_Jit(log), ["in_ptr0", "xnumel", "XBLOCK"], {"XBLOCK": 128}, {}, _grid, 4, 1)
    x = torch.zeros(1000)
    k.run(x, 1000, stream=1)
    hook = triton.knobs.runtime.launch_enter_hook
    if hasattr(hook, "add"):  # a chain of hooks (newer Triton)
        monkeypatch.setattr(hook, "calls", [_noop])
    else:
        monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", _noop)
    k.run(x, 1000, stream=1)
    assert [e[0] for e in log] == ["jit", "jit"]


def _noop(*_):
    return None
