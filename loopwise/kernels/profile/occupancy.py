"""Theoretical occupancy and waves of a launch, by the CUDA occupancy calculator's rules.

Shared by the occupancy tool (how many warps an SM holds, and what stops it holding more) and the
tail-effect tool (how many blocks the whole GPU holds at once, hence how many waves a grid takes).
Static arithmetic on the device facts and the kernel's resources: no GPU needed.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from loopwise.kernels.profile.findings import DeviceFacts

Limiter = Literal["registers", "shared", "warps", "blocks"]
# When two resources allow the same number of blocks, the one named first is reported: registers and
# shared memory are what a kernel change can free, the per-SM warp and block caps are not.
_LIMITER_ORDER: tuple[Limiter, ...] = ("registers", "shared", "warps", "blocks")


class Occupancy(BaseModel):
    """Resident blocks and warps per SM, and which resource caps them.

    Attributes:
        blocks_per_sm: resident blocks on one SM (0: the block does not fit at all).
        warps_per_sm: ``blocks_per_sm`` times the warps of one block.
        occupancy: ``warps_per_sm`` over the SM's maximum warps.
        limiter: the resource allowing the fewest blocks.
        limits: blocks per SM each resource allows (``None`` where the resource is unknown).
        registers_per_thread / shared_bytes_per_block / warps_per_block: the inputs used.
    """

    model_config = ConfigDict(frozen=True)

    blocks_per_sm: int
    warps_per_sm: int
    occupancy: float
    limiter: Limiter
    limits: dict[str, int | None]
    registers_per_thread: int | None
    shared_bytes_per_block: int | None
    warps_per_block: int


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def theoretical_occupancy(device: DeviceFacts, warps_per_block: int, registers_per_thread: int | None,
                          shared_bytes_per_block: int | None) -> Occupancy:
    """Blocks per SM allowed by registers, shared memory, the warp cap and the block cap.

    Registers are allocated per warp in units of ``register_allocation_unit``; shared memory per
    block in units of ``shared_allocation_unit`` plus the runtime's reserved kilobyte. Unknown
    resources (``None``) do not limit.
    """
    if warps_per_block < 1:
        raise ValueError(f"a block has at least one warp, not {warps_per_block}")
    limits: dict[str, int | None] = {
        "warps": device.max_warps_per_sm // warps_per_block,
        "blocks": device.max_blocks_per_sm,
        "registers": None,
        "shared": None,
    }
    if registers_per_thread:
        per_warp = _round_up(registers_per_thread * device.warp_size, device.register_allocation_unit)
        limits["registers"] = (device.registers_per_sm // per_warp) // warps_per_block
    if shared_bytes_per_block is not None:
        if shared_bytes_per_block > device.max_shared_bytes_per_block:
            limits["shared"] = 0
        else:
            per_block = _round_up(shared_bytes_per_block, device.shared_allocation_unit) \
                + device.reserved_shared_bytes_per_block
            limits["shared"] = device.shared_bytes_per_sm // per_block
    known = {k: v for k, v in limits.items() if v is not None}
    blocks = min(known.values())
    limiter = next(name for name in _LIMITER_ORDER if known.get(name) == blocks)
    warps = blocks * warps_per_block
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=warps, occupancy=warps / device.max_warps_per_sm,
                     limiter=limiter, limits=limits, registers_per_thread=registers_per_thread,
                     shared_bytes_per_block=shared_bytes_per_block, warps_per_block=warps_per_block)


class Waves(BaseModel):
    """How a grid fills the GPU.

    Attributes:
        grid_blocks: blocks launched.
        slots: blocks resident on the whole GPU at once (SMs times blocks per SM).
        waves: ``grid_blocks / slots``.
        full_waves: whole waves.
        last_wave_fraction: how full the last wave is (1.0 when the grid is a whole number of waves).
        busy_sms: SMs that get a block when the grid fits in one wave.
        efficiency: the fraction of the GPU's time the grid keeps busy. Over several waves, the
            work over ``ceil(waves)`` full waves; within one wave, the fraction of SMs with work
            (a single wave that reaches every SM is not a tail: extra resident blocks per SM hide
            latency, they are not extra throughput).
    """

    model_config = ConfigDict(frozen=True)

    grid_blocks: int
    slots: int
    waves: float
    full_waves: int
    last_wave_fraction: float
    busy_sms: int
    efficiency: float


def waves(device: DeviceFacts, grid_blocks: int, blocks_per_sm: int) -> Waves:
    """The wave structure of ``grid_blocks`` blocks at ``blocks_per_sm`` resident blocks per SM."""
    if grid_blocks < 1 or blocks_per_sm < 1:
        raise ValueError(f"waves need a grid ({grid_blocks}) and room for a block ({blocks_per_sm} per SM)")
    slots = device.sm_count * blocks_per_sm
    count = grid_blocks / slots
    full, rest = divmod(grid_blocks, slots)
    last = rest / slots if rest else 1.0
    busy = min(grid_blocks, device.sm_count)
    if grid_blocks <= slots:
        efficiency = busy / device.sm_count
    else:
        efficiency = count / math.ceil(count)
    return Waves(grid_blocks=grid_blocks, slots=slots, waves=count, full_waves=full, last_wave_fraction=last,
                 busy_sms=busy, efficiency=efficiency)
