"""Whether replaying a forward from a CUDA graph (the ``cudagraph`` move) can pay for itself.

A replay removes the host's work of launching each of the forward's kernels one by one, and adds
device work: each call copies its inputs into the graph's own buffers (a full extra read and write
of every input). On a small problem the launches dominate and the graph wins; on a large
memory-bound one the copies cost about as much as the work.
"""

from __future__ import annotations

from loopwise.kernels.profile.tools.launch_bound import LAUNCH_COST_S


def graph_pays(launches: int, input_bytes: int, bandwidth_gbs: float, launch_cost_s: float = LAUNCH_COST_S) -> bool:
    """Whether the host time a replay removes (``launches`` x ``launch_cost_s``, the host's cost of
    one launch) exceeds the device time its input copies add (``input_bytes`` read and written
    once more at the device's copy bandwidth, ``bandwidth_gbs``, which counts the bytes read plus
    the bytes written per second as :class:`~loopwise.kernels.roofline.ceilings.Ceilings` does)."""
    if bandwidth_gbs <= 0:
        raise ValueError(f"a copy bandwidth must be positive, not {bandwidth_gbs} GB/s")
    copies_s = 2 * input_bytes / (bandwidth_gbs * 1e9)
    return launches * launch_cost_s > copies_s
