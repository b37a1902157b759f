"""One fused group of a real model's plan carried out on a GPU, read off the plan's emitted
schedule: the hierarchy check of the memory engine on a model (``bench/memory_gpu_group.py``
measures its DRAM bytes with Nsight Compute against the schedule's DMA transfers).

The group is a transformer's or ConvNeXt's MLP block, as the planner groups it::

    layer_norm -> linear -> gelu | relu -> linear [-> mul by a per-channel scale] [-> add a residual]

:func:`block_from_plan` finds such a group in a plan's JSON (``loopwise memory plan --out``),
checks it against the model's graph (operator by operator; the parameters are those the graph
says each operator reads) and takes from the schedule's loop nest what one pass of its slab loop
covers: a tile of tokens (the first linear's loops other than its output and reduction
dimensions), every channel, both weight matrices resident. :func:`fused` runs the group as one
Triton kernel, one program per slab: it loads the slab's tokens once, normalizes them, computes
the hidden activations a block of ``block_h`` units at a time in registers (they never reach
DRAM, as the schedule says), applies the scale and the residual and stores the slab once.
:func:`layer_by_layer` runs the same operators one PyTorch call each, the planner's baseline.

Tensors are token-major: an activation is ``[tokens, channels]``, its tokens in the order of the
first linear's token dimensions (a ``[n, h, w, c]`` feature map in channels-last order). The plan
counts elements, not layouts; this layout makes a slab's tokens whole rows of the tensor. On a GPU
an L2 cache sits between the SMs and DRAM: the resident weights, which every program reads again,
stay in it after their first read, and a kernel's last stores may still be dirty in it when the
kernel ends (the bench script evicts them with a read-only kernel and counts what it writes back).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from loopwise.errors import UserError
from loopwise.memory.graph import Graph
from loopwise.memory.ir import Operator
from loopwise.memory.softmax_chains import name_kind

ACTIVATIONS = ("gelu", "relu")


@dataclass(frozen=True)
class Block:
    """What the kernel takes from the plan: the group's tensors by role, the token tiling of one
    slab, the channel widths, and the DRAM bytes the schedule moves for the group."""

    group: int
    operators: tuple[str, ...]
    x: str  # the layer norm's input
    ln_weight: str
    ln_bias: str
    w1: str  # linear weights as the graph has them: [out, in]
    b1: str | None
    activation: str
    w2: str
    b2: str | None
    scale: str | None
    residual: str | None
    out: str
    token_extents: tuple[int, ...]  # the token dimensions, outermost first
    token_tiles: tuple[int, ...]  # one slab's tile of each
    channels: int
    hidden: int
    out_channels: int
    elem_bytes: int
    planned_bytes: int  # the sum of the group's DMA transfers
    layer_by_layer_bytes: int | None  # the group's operators run alone (the plan's baseline)

    @classmethod
    def from_json(cls, data: dict) -> Block:
        """A block back from ``dataclasses.asdict`` written as JSON."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})

    @property
    def tokens(self) -> int:
        return prod(self.token_extents)

    @property
    def slab_tokens(self) -> int:
        return prod(self.token_tiles)

    @property
    def slabs(self) -> int:
        return prod(-(-e // t) for e, t in zip(self.token_extents, self.token_tiles))


def _pattern(names: list[str]) -> bool:
    kinds = [name_kind(n) for n in names]
    if len(kinds) < 4 or kinds[:2] != ["layer_norm", "linear"] or kinds[2] not in ACTIVATIONS or kinds[3] != "linear":
        return False
    rest = kinds[4:]
    return rest in ([], ["mul"], ["add"], ["mul", "add"])


def _groups(plan: dict) -> list[dict]:
    try:
        return plan["schedule"]["groups"]
    except (KeyError, TypeError):
        raise UserError("the plan has no schedule: write it with `loopwise memory plan ... --out PLAN.json`") from None


def find_group(plan: dict) -> int:
    """The index of the plan's first group that is an MLP block."""
    for i, grp in enumerate(_groups(plan)):
        if _pattern(list(grp["operators"])):
            return i
    raise UserError("no group of this plan is an MLP block (layer_norm -> linear -> gelu|relu -> linear "
                    "[-> mul] [-> add]); the GPU kernel implements only that group")


def block_from_plan(plan: dict, graph: Graph, group: int | None = None) -> Block:
    """The MLP block of ``plan``'s group ``group`` (default: the first one), read off the emitted
    schedule and checked against ``graph``, the model the plan was made for.

    Raises:
        UserError: the group is not an MLP block, does not match the graph, or its schedule does
            not keep both weights resident and every channel of a slab on chip.
    """
    groups = _groups(plan)
    index = find_group(plan) if group is None else group
    if not 0 <= index < len(groups):
        raise UserError(f"group {index}: the plan has groups 0-{len(groups) - 1}")
    grp = groups[index]
    names = list(grp["operators"])
    if not _pattern(names):
        raise UserError(f"group {index} ({', '.join(names)}) is not an MLP block "
                        "(layer_norm -> linear -> gelu|relu -> linear [-> mul] [-> add])")
    by_name = {op.name: op for op in graph.operators}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise UserError(f"the graph has no operator {missing[0]}: the plan was made for another model")
    ops = [by_name[n] for n in names]
    roles = _roles(ops, graph)
    extents, tiles = _token_tiling(grp, ops)
    lbl = {r["operator"]: r["layer_by_layer_bytes"] for r in plan.get("operators", [])}
    return Block(group=index, operators=tuple(names), **roles, token_extents=extents, token_tiles=tiles,
                 channels=ops[1].dims["k"], hidden=ops[1].dims["n"], out_channels=ops[3].dims["n"],
                 elem_bytes=ops[0].tensor(roles["x"]).elem_bytes,
                 planned_bytes=sum(int(d["bytes"]) for d in grp["dma"]),
                 layer_by_layer_bytes=sum(lbl[n] for n in names) if all(n in lbl for n in names) else None)


def _roles(ops: list[Operator], graph: Graph) -> dict:
    """Each tensor's role, from what each operator reads (weights are the graph's parameters)."""
    ln, fc1, act, fc2, *rest = ops

    def read(op: Operator, weight: bool) -> list[str]:
        return [a.tensor for a in op.reads if (a.tensor in graph.weights) == weight]

    def chained(op: Operator, source: str) -> None:
        if source not in read(op, False):
            raise UserError(f"{op.name} does not read {source}: the group is not one chain")

    (x,), (ln_w, ln_b) = read(ln, False), read(ln, True)
    prev = ln.writes[0].tensor
    out: dict = {"x": x, "ln_weight": ln_w, "ln_bias": ln_b, "activation": name_kind(act.name), "scale": None,
                 "residual": None}
    for op, key in ((fc1, "1"), (act, None), (fc2, "2")):
        chained(op, prev)
        if key:
            params = read(op, True)
            out["w" + key], out["b" + key] = params[0], (params[1] if len(params) > 1 else None)
        prev = op.writes[0].tensor
    for op in rest:
        chained(op, prev)
        if name_kind(op.name) == "mul":
            (out["scale"],) = read(op, True) or [None]
            if out["scale"] is None or op.tensor(out["scale"]).shape != (fc2.dims["n"],):
                raise UserError(f"{op.name} is not a per-channel scale by a parameter")
        else:
            others = [t for t in read(op, False) if t != prev]
            if len(others) != 1:
                raise UserError(f"{op.name} does not add one residual to the chain")
            out["residual"] = others[0]
        prev = op.writes[0].tensor
    out["out"] = prev
    return out


def _token_tiling(grp: dict, ops: list[Operator]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The token dimensions' extents and one slab's tiles, from the first linear's loop nest; the
    output and reduction dimensions of both linears must be whole (weights resident)."""
    nests = {o["operator"]: o for o in grp["loop_nest"]["operators"]}
    extents, tiles = [], []
    for op in (ops[1], ops[3]):
        for loop in nests[op.name]["loops"]:
            if loop["dim"] in ("n", "k") and loop["tile"] != loop["extent"]:
                raise UserError(f"{op.name}: the schedule tiles {loop['dim']} ({loop['tile']} of {loop['extent']}); "
                                "the kernel keeps both weights whole on chip")
    token_dims = [a for a in ops[1].reads[0].index if a != "k"]
    loops = {loop["dim"]: loop for loop in nests[ops[1].name]["loops"]}
    for dim in token_dims:
        if int(loops[dim]["extent"]) != ops[1].dims[dim]:
            raise UserError(f"{ops[1].name}: the schedule's {dim} has {loops[dim]['extent']} units, the model's "
                            f"{ops[1].dims[dim]}: the plan was made for another batch or shape")
        extents.append(ops[1].dims[dim])
        tiles.append(int(loops[dim]["tile"]))
    return tuple(extents), tuple(tiles)


def dram_bytes(launches) -> dict:
    """A variant's DRAM bytes from Nsight Compute's launches in its range: an L2 eviction (a kernel
    named ``l2_flush``), the variant's kernels, the eviction again. The variant's bytes are its
    kernels' reads and writes and the second eviction's writes (the variant's lines still dirty in
    the L2 when it ended); the first eviction's writes (dirty from before) count for nothing.

    Raises:
        UserError: the range does not hold an eviction, kernels, an eviction.
    """
    names = [launch.name for launch in launches]
    flushes = [i for i, n in enumerate(names) if "l2_flush" in n]
    if len(names) < 3 or flushes != [0, len(names) - 1]:
        raise UserError(f"the profiled range holds {names}, not an eviction, the variant's kernels, an eviction")

    def total(group, metric: str) -> float:
        return sum(launch.value(metric) or 0.0 for launch in group)

    own = launches[1:-1]
    out = {"kernels": names[1:-1], "read": total(own, "dram__bytes_read.sum"),
           "write_in_kernels": total(own, "dram__bytes_write.sum"),
           "write_back_after": total(launches[-1:], "dram__bytes_write.sum"),
           "dirty_before": total(launches[:1], "dram__bytes_write.sum"),
           "ncu_ms": total(own, "gpu__time_duration.sum") * 1e3}
    out["write"] = out["write_in_kernels"] + out["write_back_after"]
    out["measured"] = out["read"] + out["write"]
    return out


# -- the kernel --------------------------------------------------------------------------------
def _pow2(n: int, low: int = 16) -> int:
    p = low
    while p < n:
        p *= 2
    return p


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def mlp_block(x_ptr, res_ptr, y_ptr, lnw_ptr, lnb_ptr, w1_ptr, b1_ptr, w2_ptr, b2_ptr, s_ptr, eps,
                  E0, E1, E2, T0: tl.constexpr, T1: tl.constexpr, T2: tl.constexpr,
                  C: tl.constexpr, H: tl.constexpr, O: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr,
                  BLOCK_H: tl.constexpr, BLOCK_O: tl.constexpr, GELU: tl.constexpr, HAS_B1: tl.constexpr,
                  HAS_B2: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_RES: tl.constexpr):
        # one program: one slab, i.e. a tile of T0 x T1 x T2 tokens (grid axes: dims 2, 1, 0)
        t = tl.arange(0, BLOCK_T)
        i0 = tl.program_id(2) * T0 + t // (T1 * T2)
        i1 = tl.program_id(1) * T1 + (t // T2) % T1
        i2 = tl.program_id(0) * T2 + t % T2
        live = (t < T0 * T1 * T2) & (i0 < E0) & (i1 < E1) & (i2 < E2)
        row = (i0 * E1 + i1) * E2 + i2
        cc = tl.arange(0, BLOCK_C)
        oo = tl.arange(0, BLOCK_O)
        cm, om = cc < C, oo < O
        x = tl.load(x_ptr + row[:, None] * C + cc[None, :], mask=live[:, None] & cm[None, :], other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / C
        xc = tl.where(cm[None, :], x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / C + eps)
        xn = xc * rstd[:, None] * tl.load(lnw_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]
        xn = (xn + tl.load(lnb_ptr + cc, mask=cm, other=0.0).to(tl.float32)[None, :]).to(w1_ptr.dtype.element_ty)
        acc = tl.zeros((BLOCK_T, BLOCK_O), dtype=tl.float32)
        for j in range(0, H, BLOCK_H):
            hh = j + tl.arange(0, BLOCK_H)
            hm = hh < H
            w1t = tl.load(w1_ptr + hh[None, :] * C + cc[:, None], mask=cm[:, None] & hm[None, :], other=0.0)
            h = tl.dot(xn, w1t)
            if HAS_B1:
                h += tl.load(b1_ptr + hh, mask=hm, other=0.0).to(tl.float32)[None, :]
            if GELU:
                h = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
            else:
                h = tl.maximum(h, 0.0)
            w2t = tl.load(w2_ptr + oo[None, :] * H + hh[:, None], mask=hm[:, None] & om[None, :], other=0.0)
            acc = tl.dot(h.to(w2t.dtype), w2t, acc)
        if HAS_B2:
            acc += tl.load(b2_ptr + oo, mask=om, other=0.0).to(tl.float32)[None, :]
        if HAS_SCALE:
            acc *= tl.load(s_ptr + oo, mask=om, other=0.0).to(tl.float32)[None, :]
        keep = live[:, None] & om[None, :]
        if HAS_RES:
            acc += tl.load(res_ptr + row[:, None] * O + oo[None, :], mask=keep, other=0.0).to(tl.float32)
        tl.store(y_ptr + row[:, None] * O + oo[None, :], acc.to(y_ptr.dtype.element_ty), mask=keep)

    return mlp_block


_KERNEL = None


def _padded(block: Block) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The token extents and tiles as three dimensions (leading ones of extent 1 added)."""
    if len(block.token_extents) > 3:
        raise UserError(f"{len(block.token_extents)} token dimensions: the kernel takes at most 3")
    pad = 3 - len(block.token_extents)
    return (1,) * pad + block.token_extents, (1,) * pad + block.token_tiles


def fused(block: Block, tensors: dict, eps: float, block_h: int = 64, num_warps: int = 4):
    """The group as one kernel, one program per slab of the schedule. ``tensors``: name -> tensor
    (activations ``[tokens, channels]``, parameters in the graph's shapes)."""
    import torch

    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _kernel()
    (e0, e1, e2), (t0, t1, t2) = _padded(block)
    x = tensors[block.x]
    y = torch.empty((block.tokens, block.out_channels), dtype=x.dtype, device=x.device)
    grid = (-(-e2 // t2), -(-e1 // t1), -(-e0 // t0))
    dummy = x
    _KERNEL[grid](x, tensors[block.residual] if block.residual else dummy, y, tensors[block.ln_weight],
                  tensors[block.ln_bias], tensors[block.w1], tensors[block.b1] if block.b1 else dummy,
                  tensors[block.w2], tensors[block.b2] if block.b2 else dummy,
                  tensors[block.scale] if block.scale else dummy, eps, e0, e1, e2, T0=t0, T1=t1, T2=t2,
                  C=block.channels, H=block.hidden, O=block.out_channels, BLOCK_T=_pow2(t0 * t1 * t2),
                  BLOCK_C=_pow2(block.channels), BLOCK_H=min(block_h, _pow2(block.hidden)),
                  BLOCK_O=_pow2(block.out_channels), GELU=block.activation == "gelu", HAS_B1=block.b1 is not None,
                  HAS_B2=block.b2 is not None, HAS_SCALE=block.scale is not None,
                  HAS_RES=block.residual is not None, num_warps=num_warps)
    return y


def layer_by_layer(block: Block, tensors: dict, eps: float, dtype=None):
    """The group's operators one PyTorch call each (the baseline); ``dtype`` casts every tensor
    first (float64 for a reference)."""
    import torch.nn.functional as F

    t = {k: (v.to(dtype) if dtype is not None else v) for k, v in tensors.items()}
    opt = lambda name: t[name] if name else None  # noqa: E731 - an optional parameter
    h = F.layer_norm(t[block.x], (block.channels,), t[block.ln_weight], t[block.ln_bias], eps)
    h = F.linear(h, t[block.w1], opt(block.b1))
    h = F.gelu(h) if block.activation == "gelu" else F.relu(h)
    h = F.linear(h, t[block.w2], opt(block.b2))
    if block.scale:
        h = h * t[block.scale]
    if block.residual:
        h = t[block.residual] + h
    return h


def make_tensors(block: Block, device: str, dtype, seed: int = 0) -> dict:
    """Random activations and parameters of the group's shapes (scales and norm weights near 1,
    so that every part of the block shows in its output)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)

    def rand(*shape, mean=0.0, std=1.0):
        return (mean + std * torch.randn(*shape, generator=gen, device=device)).to(dtype)

    out = {block.x: rand(block.tokens, block.channels)}
    if block.residual:
        out[block.residual] = rand(block.tokens, block.out_channels)
    out[block.ln_weight], out[block.ln_bias] = rand(block.channels, mean=1.0, std=0.1), rand(block.channels, std=0.1)
    out[block.w1] = rand(block.hidden, block.channels, std=block.channels ** -0.5)
    out[block.w2] = rand(block.out_channels, block.hidden, std=block.hidden ** -0.5)
    for name, width in ((block.b1, block.hidden), (block.b2, block.out_channels)):
        if name:
            out[name] = rand(width, std=0.1)
    if block.scale:
        out[block.scale] = rand(block.out_channels, mean=1.0, std=0.1)
    return out
