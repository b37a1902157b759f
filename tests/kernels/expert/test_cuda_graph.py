"""Whether the cudagraph move can pay: the launches it removes against the input copies it adds."""

import pytest

from loopwise.kernels.expert.cuda_graph import graph_pays
from loopwise.kernels.profile.tools.launch_bound import LAUNCH_COST_S

H200_COPY_GBS = 4247.0  # the copy rate recorded with the profile fixtures (bytes read plus written)


def test_a_small_problem_of_a_few_launches_pays_and_a_large_memory_bound_one_does_not():
    # a Linear + SiLU on an 80 x 40 fp32 input: two launches, 12.8 kB copied
    assert graph_pays(2, 80 * 40 * 4, H200_COPY_GBS)
    # an RMSNorm over 256 MiB: one launch, its input copied at 4.2 TB/s is over 100 us
    assert not graph_pays(1, 256 << 20, H200_COPY_GBS)


def test_the_balance_moves_with_the_launches_and_the_bandwidth():
    nbytes = 16 << 20  # 16 MiB: about 7.9 us of copies at 4247 GB/s (read and written)
    copy_s = 2 * nbytes / (H200_COPY_GBS * 1e9)
    needed = int(copy_s / LAUNCH_COST_S) + 1
    assert graph_pays(needed, nbytes, H200_COPY_GBS) and not graph_pays(needed - 1, nbytes, H200_COPY_GBS)
    assert graph_pays(needed - 1, nbytes, 2 * H200_COPY_GBS)  # a faster copy pays sooner
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        graph_pays(3, nbytes, 0.0)


def test_the_proposer_reads_the_bandwidth_from_the_judges_cache_of_this_schema_only(tmp_path, monkeypatch):
    """The proposer measures nothing: it reads the copy bandwidth the judge cached, none where the
    cache is absent or of another schema (then it proposes the graph as before)."""
    import json

    from loopwise.kernels.expert.proposer import _cached_bandwidth
    from loopwise.kernels.roofline.ceilings import CACHE_ENV, Ceilings, cache_path

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert _cached_bandwidth("cpu") is None
    path = cache_path("cpu")
    path.parent.mkdir(parents=True)
    data = json.loads(Ceilings(device="cpu", bandwidth_gbs=20.0, fp32_tflops=1.0, tf32_tflops=1.0, bf16_tflops=1.0,
                               l2_bytes=0, measured_at="t").model_dump_json())
    path.write_text(json.dumps(data))
    assert _cached_bandwidth("cpu") == 20.0
    path.write_text(json.dumps({**data, "schema_version": 1}))
    assert _cached_bandwidth("cpu") is None
