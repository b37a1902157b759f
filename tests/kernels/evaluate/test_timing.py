"""The timing loop's protocol, on the CPU clock: what is called, in which order, and what is kept."""

from __future__ import annotations

import gc

from loopwise.kernels.evaluate import timing


def test_first_pass_is_run_and_dropped_and_hooks_see_kept_trials_only():
    calls, befores, afters = [], [], []

    def fn():
        calls.append(len(calls))
        return len(calls)

    samples = timing.Clock("cpu").run(fn, trials=5, warmup=2, before=befores.append,
                                      after=lambda i, r: afters.append((i, r)))
    assert len(samples.event_ms) == len(samples.host_ms) == 5
    assert len(calls) == 2 + timing.DISCARD_FIRST + 5
    # The dropped pass refills like the first kept trial; every kept trial gets its own index.
    assert befores == [0] * timing.DISCARD_FIRST + [0, 1, 2, 3, 4]
    # after() sees the kept trials' results, not the warm-up's nor the dropped pass's.
    assert [i for i, _ in afters] == [0, 1, 2, 3, 4]
    assert [r for _, r in afters] == list(range(3 + timing.DISCARD_FIRST, 8 + timing.DISCARD_FIRST))


def test_every_timed_call_runs_while_the_previous_result_is_held():
    """The loop holds one result while the next call runs; the warm-up holds it the same way, so the
    first timed call does not meet a new allocator state (one more live output block)."""
    import weakref

    live, seen = weakref.WeakSet(), []

    class Out:
        pass

    def fn():
        seen.append(len(live))
        out = Out()
        live.add(out)
        return out

    timing.Clock("cpu").run(fn, trials=4, warmup=1)
    assert seen[0] == 0 and set(seen[1:]) == {1}  # from the second warm-up call on
    assert len(seen) == 2 + timing.DISCARD_FIRST + 4  # one warm-up call asked for: two made


def test_gc_is_off_during_trials_and_restored(monkeypatch):
    seen = []
    timing.Clock("cpu").run(lambda: seen.append(gc.isenabled()), trials=3, warmup=1)
    assert seen and not any(seen)
    assert gc.isenabled()
    monkeypatch.setenv("LOOPWISE_TIMING_GC", "on")
    seen.clear()
    timing.Clock("cpu").run(lambda: seen.append(gc.isenabled()), trials=3, warmup=1)
    assert all(seen)


def test_kept_output_buffers_are_made_only_for_dense_layouts():
    """Kept outputs are copied into buffers made before the timed loop (so no trial allocates);
    a layout a plain buffer cannot mirror exactly falls back to a fresh copy."""
    import torch

    from loopwise.kernels.evaluate.sandbox import _dense

    x = torch.zeros(4, 6)
    assert _dense(x) and _dense(x.t()) and _dense(x.unsqueeze(1))
    assert _dense(torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last))
    assert not _dense(x[:, ::2]) and not _dense(x.expand(3, 4, 6)) and not _dense(x[:, :5])


class _HostEvent:
    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0


class _QueueingClock(timing.Clock):
    """The CUDA clock's protocol with host stand-ins for its events and its device sleep."""

    def __init__(self) -> None:
        import time

        super().__init__("cpu")
        self.cuda, self.slept = True, []
        self._event_cls = _HostEvent
        self._record = lambda event: setattr(event, "t", time.perf_counter())
        self._elapsed = lambda a, b: (b.t - a.t) * 1e3
        self._sleep = self.slept.append


def test_measure_adds_a_queued_pass_with_its_own_refills():
    befores, clock = [], _QueueingClock()
    reply = timing.measure(clock, lambda: None, trials=40, warmup=1, before=befores.append)
    assert len(reply["event_ms"]) == 40 and reply["method"] == "cuda_event"
    assert len(reply["gpu_ms"]) == len(reply["launch_ms"]) == timing.QUEUED_TRIALS
    assert befores[-timing.QUEUED_TRIALS:] == list(range(timing.QUEUED_TRIALS))
    assert reply["uncovered"] == 0
    assert len(clock.slept) == timing.QUEUED_TRIALS + 1  # one sleep per queued trial, after one calibration


def test_on_the_cpu_there_is_no_queued_pass():
    """No queue to hide a launch behind: the CPU's reply is the timed loop's alone, and each clock
    reads it as the KernelBench figure (no call beyond the protocol's)."""
    from loopwise.kernels.evaluate.measure import timing_from

    calls = []
    reply = timing.measure(timing.Clock("cpu"), lambda: calls.append(1), trials=40, warmup=1)
    assert "gpu_ms" not in reply and "launch_ms" not in reply
    assert len(calls) == 2 + timing.DISCARD_FIRST + 40
    assert timing_from(reply, "gpu").clock == "kernelbench"


def test_each_clock_computes_its_speedup_from_its_own_figure():
    from loopwise.kernels.evaluate.measure import timing_from

    # A launch-bound call: 0.1 ms of GPU work behind 0.3 ms of host launch; the KernelBench
    # protocol saw it at 0.2 ms (part of the launch hidden behind the flush).
    reply = {"event_ms": [0.2] * 5, "host_ms": [0.4] * 5, "gpu_ms": [0.1, 0.1, 0.12, 0.1, 0.1],
             "launch_ms": [0.3, 0.05, 0.3, 0.3, 0.3], "uncovered": 0, "method": "cuda_event"}
    kb, gpu, steady = (timing_from(reply, c) for c in timing.CLOCKS)
    assert kb.median_ms == 0.2 and gpu.median_ms == 0.1 and steady.median_ms == 0.3
    assert steady.min_ms == 0.1  # per trial the larger of the two: trial 1 was GPU-bound
    for t in (kb, gpu, steady):
        assert (t.kernelbench_median_ms, t.gpu_median_ms, t.launch_median_ms) == (0.2, 0.1, 0.3)
    assert steady.clock == "steady"


def test_a_reply_without_the_queued_pass_reads_as_the_kernelbench_figure():
    from loopwise.kernels.evaluate.measure import timing_from

    old = {"event_ms": [0.2] * 3, "host_ms": [0.4] * 3, "method": "cuda_event"}
    t = timing_from(old, "steady")
    assert t.median_ms == 0.2 and t.clock == "kernelbench" and t.gpu_median_ms is None


def test_the_reference_cache_tells_clocks_apart(tmp_path):
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.measure import ReferenceTimes

    keys = {ReferenceTimes(None, EvalConfig(clock=c), "gpu0", use_disk=False)._key("ab" * 20, "compile")
            for c in timing.CLOCKS}
    assert len(keys) == 3
