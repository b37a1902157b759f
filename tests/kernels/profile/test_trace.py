"""The system-level trace reader: a Kineto Chrome trace into kernels, gaps, copies, launches and
syncs, and on into the cross-kernel tools."""

import gzip
import json
from pathlib import Path

import pytest

from loopwise.kernels.profile.trace import TraceError, parse, read_trace, record

FIXTURE = Path(__file__).parents[1] / "profile_fixtures" / "trace_two_streams.json"


def test_kernels_gaps_copies_launches_and_syncs():
    t = read_trace(FIXTURE)
    assert [k.name for k in t.kernels] == ["vectorized_elementwise_kernel", "triton_poi_fused_0", "side_kernel"]
    assert [k.gap_before_us for k in t.kernels] == [None, 15.0, 25.0]  # the copy ends at 1065, side starts 1090
    assert t.kernels[1].grid_blocks == 128 and t.kernels[1].block_threads == 256
    assert (t.memcpy_count, t.memcpy_bytes, t.memset_count) == (1, 4096, 1)
    assert t.launch_calls == 3  # two runtime launches and one driver launch (Triton's path)
    # cudaMemcpyAsync does not block; the device sync after the annotated call is the recorder's own
    assert (t.sync_calls, t.sync_names) == (1, ("cudaStreamSynchronize",))
    assert t.gpu_span_us == pytest.approx(111.0) and t.gpu_busy_us == pytest.approx(66.0)
    assert t.gap_us == pytest.approx(45.0) and t.streams == 2 and t.host_span_us == pytest.approx(200.0)
    assert "3 kernels" in t.headline() and "2 stream(s)" in t.headline()


def test_summaries_feed_the_cross_kernel_tools():
    from loopwise.kernels.profile.findings import ToolInput
    from loopwise.kernels.profile.registry import load_tools

    kernels = read_trace(FIXTURE).summaries()
    assert [round(k.duration_s * 1e6) for k in kernels] == [10, 20, 30]
    assert kernels[0].gap_before_s is None and kernels[2].gap_before_s == pytest.approx(25e-6)
    tools = {t.name: t for t in load_tools()}
    # three kernels of median 20 us: not short enough to call launch-bound
    assert tools["launch_bound"].inspect(ToolInput(kernels=kernels)) == []


def test_gzip_and_bad_files(tmp_path):
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    assert len(read_trace(gz).kernels) == 3
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="not a JSON trace"):
        read_trace(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"rows": []}))
    with pytest.raises(TraceError, match="not a Chrome trace"):
        read_trace(other)


def test_empty_trace_is_all_zero():
    t = parse({"traceEvents": []})
    assert t.kernels == () and t.gpu_span_us == 0.0 and t.streams == 0 and t.summaries() == ()


def test_record_writes_a_trace_torch_profiler_can_produce(tmp_path):
    import torch

    x = torch.randn(256, 256)
    t = record(lambda: torch.relu(x @ x), tmp_path / "call.json")
    assert (tmp_path / "call.json").exists()
    data = json.loads((tmp_path / "call.json").read_text())
    assert any(e.get("name") == "loopwise.call" for e in data["traceEvents"])
    assert t.host_span_us > 0
    if not torch.cuda.is_available():
        assert t.kernels == () and t.launch_calls == 0


def test_a_launch_bound_call_is_diagnosed_from_its_trace():
    from loopwise.kernels.profile.findings import ToolInput
    from loopwise.kernels.profile.registry import load_tools

    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": 100.0 + 9.0 * i, "dur": 3.0,
               "args": {"stream": 7, "grid": [4, 1, 1], "block": [128, 1, 1]}} for i in range(12)]
    t = parse({"traceEvents": events})
    assert all(k.gap_before_us == pytest.approx(6.0) for k in t.kernels[1:])
    tools = {tool.name: tool for tool in load_tools()}
    found = tools["launch_bound"].inspect(ToolInput(kernels=t.summaries()))
    assert found and found[0].evidence["gap_share"] == pytest.approx(66 / 102, abs=1e-3)
