"""C++ extensions through load_inline, on CPU: compile cache keyed by source, literal module
names, parallel builds that report failures per candidate, compile errors as a status."""

import json
import os
import sqlite3
from pathlib import Path

import pytest
from judge_doubles import StandInJudge

from loopwise.kernels import backends
from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.judge import LocalJudge
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


def test_a_compile_worker_drops_torchs_no_cuda_runtime_notice_and_nothing_else(capsys):
    """A compile worker hides the GPU on purpose, so torch's "No CUDA runtime is found" warning (one
    per worker in a bench log on the H200) is noise; its other warnings still reach the user."""
    import logging

    logger = logging.getLogger("torch.utils.cpp_extension")
    handler = logging.StreamHandler()
    logger.addHandler(handler)
    logger.addFilter(backends._no_cuda_runtime_notice)
    try:
        logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local/cuda")
        logger.warning("Error checking compiler version for %s", "c++")
    finally:
        logger.removeFilter(backends._no_cuda_runtime_notice)
        logger.removeHandler(handler)
    err = capsys.readouterr().err
    assert "No CUDA runtime" not in err and "Error checking compiler version for c++" in err


def _built_objects(cache) -> dict[str, int]:
    """Every compiled object and library under the extensions cache, with its modification time."""
    return {str(p): p.stat().st_mtime_ns for p in (cache / "extensions").rglob("*") if p.suffix in (".o", ".so")}


@pytest.mark.slow
def test_parallel_precompile_then_judge_uses_the_cache(cache, monkeypatch):
    """The batch's parallel build fills the cache the sandboxes load from; a source the compiler
    rejected there gets its compile error, with the compiler's output, without a second build."""
    good = (HERE / "backend_cases" / "literal_module_name.py").read_text()
    bad = (HERE / "backend_cases" / "does_not_compile.py").read_text()
    cfg = EvalConfig(perf_trials=3, seed=1, energy=False)
    with LocalJudge(load_problem(str(SWISH)), cfg, device="cpu", spares=0) as judge:
        assert judge.precompile([good, bad]) == 2
        built = [p.name for p in (cache / "extensions").iterdir()]
        assert any(name.startswith("literal_swish_ext_") for name in built)  # one folder per source hash
        objects = _built_objects(cache)
        ev = judge.evaluate(good, "literal")
        broken = judge.evaluate(bad, "broken")
    assert ev.status is Status.CORRECT, (ev.summary(), ev.log[-1500:])
    assert objects and _built_objects(cache) == objects  # loaded from the cache the parallel build filled, not rebuilt
    assert broken.status is Status.COMPILE_ERROR
    assert "Error building extension" in broken.reasons[0].message, broken.summary()
    assert "error" in broken.log.lower() and "ninja" in broken.log.lower()  # the compiler's own words
    assert "not built again" in broken.reasons[0].message  # the batch's verdict, no second build

    # A build that timed out, or whose worker died, proves nothing: its sandbox builds it (here
    # from the cache the first build left), and judges it on its merits.
    monkeypatch.setattr(backends, "precompile", lambda sources, *a, **k: [
        backends.Build(False, "no build after 1s; left to the sandbox"),
        backends.Build(False, "build worker failed (BrokenProcessPool); left to the sandbox")])
    with LocalJudge(load_problem(str(SWISH)), cfg, device="cpu", spares=0) as judge:
        assert judge.precompile([good, bad]) == 2
        again = judge.evaluate(good, "literal-again")
    assert again.status is Status.CORRECT, (again.summary(), again.log[-1500:])


def test_judge_builds_a_batch_of_native_candidates_at_once_and_only_those(cache, monkeypatch):
    """Only load_inline candidates go to the parallel build (a Triton one compiles in its sandbox),
    and only when there are two or more of them to overlap."""
    cpp = (HERE / "candidates" / "cpp_swish.py").read_text()
    triton = (HERE / "candidates" / "triton_relu.py").read_text()
    builds = []

    def precompile(sources, extensions_dir, arch, timeout_s):
        builds.append((sources, Path(extensions_dir).parent == cache))
        return [backends.Build(True, "built")] * len(sources)

    monkeypatch.setattr(backends, "precompile", precompile)
    with LocalJudge(load_problem(str(SWISH)), EvalConfig(energy=False), device="cpu", spares=0) as judge:
        assert judge.precompile([cpp, triton]) == 0
        other = cpp.replace("swish", "swish_b")
        assert judge.precompile([triton, cpp, other]) == 2
    assert builds == [([cpp, other], True)]  # into the cache the sandboxes load from


def test_the_search_builds_each_batch_before_judging_it_one_by_one(tmp_path):
    """A judge on this machine gets a batch's sources to build at once before the first of them is
    judged; the time it took is in the run's record."""
    from loopwise.config import load_config
    from loopwise.kernels.evaluate.result import Evaluation
    from loopwise.kernels.optimize import OptimizeRun, Settings

    example = HERE.parents[1] / "loopwise" / "kernels" / "examples" / "scaled_gelu_problem.py"
    calls = []

    class BuildingJudge(StandInJudge):
        def precompile(self, sources):
            calls.append(("build", len(sources)))
            return len(sources)

        def evaluate(self, source, name):
            calls.append(("judge", name))
            return Evaluation(status=Status.CORRECT, problem="p", candidate=name, candidate_key=name, speedup=1.0)

    settings = Settings(problem=str(example), search="greedy", budget=4, profiling="none")
    run = OptimizeRun.start(settings, load_config(None, []), str(tmp_path / "runs"), BuildingJudge(),
                            load_problem(str(example)))
    run.run()
    run.store.close()
    first = calls.index(("judge", "node-1"))
    assert calls[first - 1][0] == "build" and calls[first - 1][1] >= 2, calls
    assert sum(1 for c in calls if c[0] == "judge") == 4
    db = sqlite3.connect(next((tmp_path / "runs").glob("*/run.sqlite")))
    rows = [json.loads(r[0]) for r in db.execute("SELECT payload FROM events WHERE kind = 'precompile'")]
    db.close()
    assert [r["nodes"] for r in rows] == [[1, 2], [3, 4]] and all(r["seconds"] >= 0 for r in rows), rows


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


def _undo_prepare_environment(monkeypatch) -> None:
    """What prepare_environment changes in this process, put back after the test (a variable set
    first is recorded by monkeypatch even where it was absent, so the test's own writes go too)."""
    from torch.utils import cpp_extension

    for name in ("TRITON_LIBDEVICE_PATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setattr(cpp_extension, "load_inline", cpp_extension.load_inline)
    monkeypatch.setattr(cpp_extension, "load", cpp_extension.load)


def _toolkit(root: Path, version: int, libdevice: bool = True) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "cuda.h").write_text(f"#ifndef CUDA_H\n#define CUDA_VERSION {version}\n#endif\n")
    if libdevice:
        (root / "nvvm" / "libdevice").mkdir(parents=True)
        (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC\xc0\xde")
    return root


@pytest.mark.parametrize("built_with, version, libdevice, linked", [
    ("13.0", 13000, True, True),     # the toolkit is torch's release: its libdevice
    ("13.0", 13010, True, False),    # 13.1 is another release
    ("12.8", 12080, True, True),
    ("12.8", 13000, True, False),
    ("13.0", 13000, False, False),   # no libdevice in the toolkit
    (None, 13000, True, False),      # a CPU build of torch
])
def test_triton_links_the_libdevice_of_torchs_own_cuda_release_and_only_that(
        tmp_path, monkeypatch, built_with, version, libdevice, linked):
    """PyTorch's kernels link the libdevice of the CUDA release torch was built with; Triton's bundled
    copy can be older (other erff coefficients), so the judge points Triton at the toolkit's where
    that toolkit is torch's release, and leaves a path the user set alone."""
    import torch
    from torch.utils import cpp_extension

    home = _toolkit(tmp_path / "cuda", version, libdevice)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    monkeypatch.setattr(torch.version, "cuda", built_with)
    want = str(home / "nvvm" / "libdevice" / "libdevice.10.bc") if linked else None
    assert backends.pytorchs_libdevice() == want
    _undo_prepare_environment(monkeypatch)
    backends.prepare_environment({"arch": "9.0"}, "cuda:0")
    assert os.environ.get("TRITON_LIBDEVICE_PATH") == want
    monkeypatch.setenv("TRITON_LIBDEVICE_PATH", "/the/users/libdevice.10.bc")
    backends.prepare_environment({"arch": "9.0"}, "cuda:0")
    assert os.environ["TRITON_LIBDEVICE_PATH"] == "/the/users/libdevice.10.bc"


def test_without_a_toolkit_or_on_the_cpu_triton_keeps_its_own_libdevice(tmp_path, monkeypatch):
    import torch
    from torch.utils import cpp_extension

    _undo_prepare_environment(monkeypatch)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    assert backends.pytorchs_libdevice() is None
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(tmp_path / "nowhere"))
    assert backends.pytorchs_libdevice() is None
    home = _toolkit(tmp_path / "cuda", 13000)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", str(home))
    assert backends.pytorchs_libdevice() is not None
    backends.prepare_environment({}, "cpu")  # no GPU: nothing for Triton to link
    assert "TRITON_LIBDEVICE_PATH" not in os.environ
    monkeypatch.setattr(torch.version, "cuda", "13.0a")  # a version torch never gives: no match, no error
    assert backends.pytorchs_libdevice() is None
