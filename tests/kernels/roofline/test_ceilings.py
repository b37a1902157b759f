"""Measured ceilings: the CPU path at tiny sizes, the JSON cache, and (on a GPU) plausible numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loopwise.kernels.roofline import ceilings as ceilings_module
from loopwise.kernels.roofline.ceilings import CACHE_ENV, Ceilings, cache_path, load_or_measure, measure_ceilings

TINY = {"copy_bytes": 1 << 20, "gemm_n": 64, "bf16_n": 64, "trials": 3, "warmup": 1}


def test_cpu_measurement_is_positive_and_restores_tf32() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    measured = measure_ceilings("cpu", **TINY)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert min(measured.bandwidth_gbs, measured.fp32_tflops, measured.tf32_tflops, measured.bf16_tflops) > 0
    assert measured.method == "host_clock"
    assert measured.sizes == {"copy_bytes": 1 << 20, "gemm_n": 64, "bf16_n": 64}
    assert measured.versions["torch"] == torch.__version__


def test_cache_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    first = load_or_measure("cpu", **TINY)
    path = cache_path("cpu")
    assert path.parent == tmp_path / "ceilings" and path.exists()
    assert torch.__version__.split("+")[0] in path.name

    def must_not_measure(*args: object, **kwargs: object) -> Ceilings:
        raise AssertionError("measured despite a cache hit")

    monkeypatch.setattr(ceilings_module, "measure_ceilings", must_not_measure)
    assert load_or_measure("cpu") == first


def test_unreadable_cache_is_measured_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = cache_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    measured = load_or_measure("cpu", **TINY)
    assert Ceilings.model_validate_json(path.read_text(encoding="utf-8")) == measured


def test_a_cache_file_that_is_not_utf8_is_measured_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A torn or foreign file whose bytes are not UTF-8 is unreadable like one that is not JSON:
    the one reader gives None and the judge measures over it."""
    from loopwise.kernels.roofline.ceilings import read_ceilings

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = cache_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x80\x81 not utf-8")
    assert read_ceilings(path) is None
    measured = load_or_measure("cpu", **TINY)
    assert Ceilings.model_validate_json(path.read_text(encoding="utf-8")) == measured


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_ceilings_are_plausible() -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    measured = measure_ceilings("cuda", copy_bytes=256 << 20, gemm_n=2048, bf16_n=4096, trials=5)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert measured.method == "cuda_event" and measured.l2_bytes > 0
    assert measured.bandwidth_gbs > 100
    assert measured.tf32_tflops > measured.fp32_tflops
    assert measured.bf16_tflops > measured.fp32_tflops


def test_a_rate_is_timed_by_its_fastest_trial() -> None:
    # Work from another process slows some trials; it never speeds one up, so the fastest trial is
    # the closest to the device's peak (the median of a contended run read bf16 at a third of it).
    import time

    delays = iter([0.05, 0.05, 0.05, 0.001, 0.05])
    ms = ceilings_module._best_ms(lambda: time.sleep(next(delays)), torch.device("cpu"), trials=5, warmup=0)
    assert 0.9 <= ms < 20


def _ceilings_json(**changes: object) -> str:
    import json

    data = json.loads(Ceilings(device="NVIDIA H200", bandwidth_gbs=4247.0, fp32_tflops=51.3, tf32_tflops=415.0,
                               bf16_tflops=840.0, l2_bytes=62914560, measured_at="t").model_dump_json())
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not None})


def test_a_ceilings_file_of_another_schema_is_refused_by_the_one_reader(tmp_path: Path) -> None:
    """Schema 1 timed each ceiling by the median of its trials (contended values); a file without a
    schema is older still: neither is read as the current schema's."""
    from loopwise.kernels.roofline.ceilings import read_ceilings

    path = tmp_path / "ceilings.json"
    path.write_text(_ceilings_json())
    assert read_ceilings(path) is not None and read_ceilings(path).bandwidth_gbs == 4247.0
    for text in (_ceilings_json(schema_version=1), _ceilings_json(schema_version=None), "{not json", "[]"):
        path.write_text(text)
        assert read_ceilings(path) is None, text
    assert read_ceilings(tmp_path / "absent.json") is None


def test_the_judges_cache_of_another_schema_is_measured_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    path = cache_path("cpu")
    path.parent.mkdir(parents=True)
    path.write_text(_ceilings_json(schema_version=None), encoding="utf-8")
    measured = load_or_measure("cpu", **TINY)
    assert measured.device != "NVIDIA H200" and measured.schema_version == ceilings_module.SCHEMA_VERSION


def test_a_profile_folder_with_ceilings_of_another_schema_does_not_use_them(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile folder's ceilings.json goes through the same reader: one of another schema is
    measured again on this machine's GPU where there is one (here: none, so none is used)."""
    from loopwise.kernels.profile.folder import folder_ceilings

    (tmp_path / "ceilings.json").write_text(_ceilings_json())
    assert folder_ceilings(tmp_path, "cuda").bandwidth_gbs == 4247.0
    (tmp_path / "ceilings.json").write_text(_ceilings_json(schema_version=1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert folder_ceilings(tmp_path, "cuda") is None
