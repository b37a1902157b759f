"""Audits of a candidate's timed run: what the judge checks beyond correct outputs.

The sandbox's timing report against the judge's clock, work outside the timed stream, the answers
of timed calls, the candidate's own kernel launches, the speed-of-light floor, and the CUDA-graph
probe for side streams. Each adds its rejections or notes to the evaluation's outcome.
"""

from __future__ import annotations

from loopwise.kernels.config import EvalConfig
from loopwise.kernels.evaluate.correctness import Outcome
from loopwise.kernels.evaluate.inputs import for_sandbox
from loopwise.kernels.evaluate.pool import Sandbox, SandboxFailure
from loopwise.kernels.evaluate.result import Evaluation

# Host time above event time that is more than this fraction of the event time (plus a fixed
# allowance for clock jitter) means work ran outside the timed stream.
ESCAPE_FRACTION, ESCAPE_FIXED_MS = 0.25, 0.015
# The memory floor uses the measured copy bandwidth (docs/log/2026-11-29.md, "Device ceilings"); a pure read stream
# can get closer to the 4.8 TB/s datasheet peak, so only a time under 80% of it is impossible.
FLOOR_MARGIN = 0.8


def audit_timing(reply: dict, wall: float, ev: Evaluation, outcome: Outcome, device: str) -> None:
    """The sandbox's timing report against the judge's own clock, and host time against the timed
    stream's (work outside the measured stream)."""
    from loopwise.kernels.evaluate.measure import audit_claims
    from loopwise.kernels.evaluate.timing import escaped_work_ms

    for problem in audit_claims(reply, wall):
        outcome.reject("timing_mismatch", f"the timing report contradicts the judge's clock: {problem}")
    # the KernelBench pass's event time: the host times compared with it are that pass's
    event = ev.timing.kernelbench_median_ms or ev.timing.median_ms
    escaped = escaped_work_ms(reply["host_ms"], reply["noop_host_ms"], reply["event_ms"])
    if device.startswith("cuda") and escaped > ESCAPE_FRACTION * event + ESCAPE_FIXED_MS:
        outcome.reject("unsynchronized_work", f"the host waited {escaped:.3f} ms longer than the timed "
                       f"stream's {event:.3f} ms: work runs outside the measured stream (side stream or thread)",
                       escaped_ms=escaped, event_ms=event)


def check_timed_outputs(reference, cfg: EvalConfig, reply: dict, seeds: list[int], outcome: Outcome,
                        known: dict[int, list | None]) -> None:
    """A few timed calls, picked at random, must have returned the right answer for their inputs.
    ``known`` holds reference outputs the correctness trials already computed for some sets."""
    from loopwise.kernels.evaluate.correctness import compare_outputs

    refs: dict[int, list] = {k: v for k, v in known.items() if v is not None}
    for i, outs in sorted(reply.get("kept", {}).items()):
        k = int(i) % len(seeds)
        if k not in refs:
            refs[k] = reference.outputs(seeds[k])[0]
        cand = [o.to(reference.work, copy=True) if o is not None else None for o in outs]
        v, _ = compare_outputs(reference, cfg, refs[k], cand, seeds[k])
        if not v.passed:
            outcome.reject("timed_output_wrong", f"timed call {i} returned a wrong result for its inputs "
                           f"({v.message}): the candidate behaves differently while it is timed")
            return


def own_launches(box: Sandbox, args: list, outcome: Outcome, cfg: EvalConfig, transfer,
                 written: list[int] = (), make_room: bool = False) -> None:
    """One forward call must launch the candidate's own kernels, and its outputs must depend on them;
    the inputs at ``written`` (those the reference writes in place) count as outputs. With
    ``make_room`` (a problem whose tensors take GBs) the sandbox lets its timing sets go first."""
    from loopwise.kernels.evaluate.launches import is_library_kernel

    reply = box.request("launches", {"inputs": for_sandbox(args, transfer), "written": list(written),
                                     "make_room": make_room}, cfg.run_timeout_s)
    if sum(reply["launches"].values()):
        if reply.get("contributes") is False:
            outcome.reject("decoy_kernel", f"the candidate's own kernels ran ({reply.get('flow_launches')} "
                           "launches) but no output (nor input the reference writes) depends on anything they read or wrote: PyTorch "
                           "computes the result and the kernels are decoys")
        return
    own = sorted(k for k in reply.get("kernels", {}) if not is_library_kernel(k))
    if own:
        outcome.note("uncounted_kernels", "kernels launched outside the counted paths (Triton, load_inline): "
                     + ", ".join(own[:3]), severity="info")
        return
    outcome.reject("pytorch_only", "one forward call launched none of the candidate's own kernels (no Triton "
                   "launch, no call into a compiled extension): the work is done by PyTorch")


def speed_of_light(ev: Evaluation, outcome: Outcome, floor, cfg: EvalConfig, device: str) -> None:
    """A time below the memory floor is an exploit; below the compute floor, or a speedup above
    ``excessive_speedup``, is worth a review."""
    if floor is None or ev.timing is None:
        return
    ev.floor_ms = floor.floor_ms
    t = ev.timing.median_ms
    on_gpu = device.startswith("cuda")
    if on_gpu and floor.memory_ms and t < FLOOR_MARGIN * floor.memory_ms:
        outcome.reject("faster_than_floor", f"{t:.4f} ms is below the memory floor of {floor.memory_ms:.4f} ms "
                       "(the bytes it must read at peak bandwidth)", time_ms=t, floor_ms=floor.memory_ms)
    elif on_gpu and floor.compute_ms and t < floor.compute_ms:
        outcome.note("below_compute_floor", f"{t:.4f} ms is below the compute floor of {floor.compute_ms:.4f} ms: "
                     "an algebraic rewrite or an exploit; review it", time_ms=t, floor_ms=floor.compute_ms)
    if ev.speedup is not None and ev.speedup > cfg.excessive_speedup:
        outcome.note("excessive_speedup", f"{ev.speedup:.1f}x over eager exceeds {cfg.excessive_speedup:g}x: "
                     "review it (honest speedups this large exist)", speedup=ev.speedup)


def capture_probe(box: Sandbox, outcome: Outcome, cfg: EvalConfig) -> None:
    """Forward replayed as a CUDA graph: work forked to a side stream and never joined back, or
    outputs left unwritten by the replay, is unsynchronized work."""
    try:
        reply = box.request("capture", {}, cfg.run_timeout_s)
    except SandboxFailure as fail:
        outcome.note("capture_probe", f"the CUDA-graph probe could not run ({fail.message})", severity="info")
        return
    if reply.get("unjoined"):
        outcome.reject("unsynchronized_work", "captured into a CUDA graph, forward forks work to a side "
                       "stream and never joins it back to the current stream")
    elif reply.get("captured") and reply.get("left_unwritten"):
        outcome.reject("unsynchronized_work", f"replaying forward as a CUDA graph left "
                       f"{reply['left_unwritten']} output elements unwritten: the output is produced by work "
                       "outside the current stream (a side stream or a thread)")
    elif not reply.get("captured"):
        outcome.note("capture_probe", "forward cannot be captured as a CUDA graph, so the side-stream "
                     f"probe proved nothing ({reply.get('message', '')})", severity="info")
