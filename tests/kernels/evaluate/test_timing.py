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
