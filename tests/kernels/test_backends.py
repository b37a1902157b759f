"""C++ extensions through load_inline, on CPU: compile cache keyed by source, literal module
names, parallel builds that report failures per candidate, compile errors as a status."""

import os
from pathlib import Path

import pytest

from loopwise.kernels import backends
from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import Judge
from loopwise.kernels.evaluate.result import Status
from loopwise.kernels.problem import load_problem

HERE = Path(__file__).parent
SWISH = HERE / "candidates" / "problems" / "swish.py"


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOPWISE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_detect_backend():
    assert backends.detect((HERE / "candidates" / "cpp_swish.py").read_text()) == "cpp"
    assert backends.detect((HERE / "candidates" / "triton_relu.py").read_text()) == "triton"
    cute = ('from torch.utils.cpp_extension import load_inline\n'
            'src = """#include <cute/tensor.hpp>\n__global__ void k() {}"""\n'
            'ext = load_inline(name="x", cpp_sources="", cuda_sources=src)\n')
    assert backends.detect(cute) == "cutlass"
    assert backends.detect("import torch\n# load_inline in a comment does not count\n") == "pytorch"


def test_parallel_precompile_then_judge_uses_the_cache(cache):
    good = (HERE / "backend_cases" / "literal_module_name.py").read_text()
    bad = (HERE / "backend_cases" / "does_not_compile.py").read_text()
    ext_dir = cache / "extensions"
    ext_dir.mkdir(parents=True)
    results = backends.precompile([good, bad], str(ext_dir), None, jobs=2, timeout_s=300)
    assert results[0][0] is True, results
    assert results[1][0] is False and "Error" in results[1][1]
    built = [p.name for p in ext_dir.iterdir()]
    assert any(name.startswith("literal_swish_ext_") for name in built)  # one folder per source hash

    cfg = EvalConfig(perf_trials=3, seed=1, energy=False)
    with Judge(load_problem(str(SWISH)), cfg, device="cpu", spares=0) as judge:
        ev = judge.evaluate(good, "literal")
        broken = judge.evaluate(bad, "broken")
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
    assert ev.compile_s < 20  # loaded from the cache the parallel build filled, not rebuilt
    assert broken.status is Status.COMPILE_ERROR
    assert "Error building extension" in broken.reasons[0].message or "error" in broken.log.lower()


def test_clear_stale_locks(tmp_path):
    (tmp_path / "ext_abc").mkdir()
    lock = tmp_path / "ext_abc" / "lock"
    lock.write_text("")
    os.utime(lock, (10, 10))
    assert backends.clear_stale_locks(str(tmp_path), since=100) == 0 and lock.exists()
    assert backends.clear_stale_locks(str(tmp_path), since=5) == 1 and not lock.exists()


def test_cutlass_sources_get_headers_and_hopper_flags(monkeypatch, tmp_path):
    """A CUDA source that includes CuTe/CUTLASS headers is built with the wheel's include path and
    the sm_90a target on Hopper; the extension keeps its name and is counted when called."""
    import torch.utils.cpp_extension as ext

    seen = {}

    def fake_load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        seen.update(name=name, **kwargs)
        return type("Module", (), {"run": staticmethod(lambda: 7)})()

    monkeypatch.setattr(ext, "load_inline", fake_load_inline)
    monkeypatch.setattr(ext, "load", ext.load)  # restored after the test, like load_inline
    monkeypatch.setattr(backends, "cutlass_include_dirs", lambda: ["/wheel/cutlass/include"])
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    backends._wrap_load_inline("9.0")
    module = ext.load_inline("gemm_ext", "", "#include <cute/tensor.hpp>\n__global__ void k() {}")
    assert seen["name"] == "gemm_ext"
    assert "/wheel/cutlass/include" in seen["extra_include_paths"]
    assert "-gencode=arch=compute_90a,code=sm_90a" in seen["extra_cuda_cflags"]
    assert seen["build_directory"].startswith(str(tmp_path / "gemm_ext_"))
    from loopwise.kernels.evaluate import launches

    launches.reset()
    assert module.run() == 7 and launches.snapshot() == {"extension:gemm_ext.run": 1}
