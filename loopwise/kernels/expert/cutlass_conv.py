"""Convolutions as CUTLASS 2's implicit-GEMM forward convolution under 3xTF32: the CUDA source of
the extension (``templates/_cutlass_conv.j2``) for a tile, and the Python around it that a candidate
runs (:data:`GLUE`): the input and weight made channels-last with their channel counts padded to a
multiple of 4 (zeros: CUTLASS's optimized iterators read 16-byte rows), the batch cut so that no
tensor of one launch reaches 2**31 bytes (CUTLASS's limit), the output left channels-last for the
caller to read at its strides. A 1-d convolution runs as a 2-d one of height 1."""

from __future__ import annotations

# tile name -> (threadblock tile M x N x K, warp tile, stages). Under 3xTF32 each compiles for
# sm_90a without spilling (a 64 x 64 warp tile spills). A 128 x 128 tile of 8 warps (248 registers a
# thread: one block an SM) was slower than 128 x 64 on every convolution timed on an H100.
CONFIGS = {
    "128x64": ((128, 64, 16), (64, 32, 16), 4),
    "256x64": ((256, 64, 16), (64, 32, 16), 3),
    "64x64": ((64, 64, 16), (32, 32, 16), 6),
}
# The data gradient's tiles (a transposed convolution of any stride): its strided iterators hold more
# registers, so its warps take 32 x 32 outputs (with 64 x 32 ones the 128 x 64 and 256 x 64 tiles
# spill under 3xTF32); its second tile is wider along the output channels instead of longer.
DGRAD_CONFIGS = {
    "128x64": ((128, 64, 16), (32, 32, 16), 4),
    "64x128": ((64, 128, 16), (32, 32, 16), 4),
    "64x64": ((64, 64, 16), (32, 32, 16), 6),
}
OPERATORS = {"fp32": "OpMultiplyAddFastF32", "relaxed": "OpMultiplyAdd"}
DECLARATION = ("void lw_conv(torch::Tensor x, torch::Tensor w, torch::Tensor y, std::vector<int64_t> pad, "
               "std::vector<int64_t> stride, std::vector<int64_t> dilation);")

# The candidate's side, rendered into it as it is (one source for the candidate and for
# bench/conv_cutlass_check.py).
GLUE = '''
def _lw_channels_last(run, x, w, stride, padding, dilation, transposed=None, output_padding=None):
    """The convolution of x by w (one group; bias left to the caller) through ``run`` (CUTLASS's
    lw_conv): returns the output channels-last, (N, [Z,] P, Q, K padded to a multiple of 4). A
    transposed convolution's w is (input channels, output channels, window...): with ``transposed``
    "flip" (stride 1, no output padding) it runs as the forward convolution it equals, w's window
    flipped and its channels swapped (``padding`` is that convolution's); with "dgrad" ``run`` is
    CUTLASS's data gradient (2-d), and ``padding`` and ``output_padding`` are the transposed one's;
    with "phases" (dilation 1) ``run`` is the forward convolution, once per stride phase (the outputs
    whose index is r modulo the stride): each phase is a forward convolution of stride 1 by the taps
    that reach it, written into the output at that phase's positions."""
    if transposed == "flip":
        w = w.transpose(0, 1).flip(list(range(2, w.dim())))
    if transposed == "phases":
        return _lw_phases(run, x, w, stride, padding, output_padding)
    if x.dim() == 3:  # 1-d as 2-d of height 1
        x, w = x.unsqueeze(2), w.unsqueeze(2)
        stride, padding, dilation = (1, *stride), (0, *padding), (1, *dilation)
        output_padding = output_padding and (0, *output_padding)
    n, c = x.shape[0], x.shape[1]
    k = w.shape[1] if transposed == "dgrad" else w.shape[0]
    cp, kp = -(-c // 4) * 4, -(-k // 4) * 4
    spatial, window = x.shape[2:], w.shape[2:]
    if transposed == "dgrad":
        sizes = [(s - 1) * st - 2 * p + d * (r - 1) + o + 1
                 for s, p, d, r, st, o in zip(spatial, padding, dilation, window, stride, output_padding)]
    else:
        sizes = [(s + 2 * p - d * (r - 1) - 1) // st + 1
                 for s, p, d, r, st in zip(spatial, padding, dilation, window, stride)]
    xl = _lw_last(x, cp)
    if transposed == "dgrad":  # (input channels, window..., output channels), the gradient's weight
        wl = w.new_zeros((cp, *window, kp))
        wl[:c, ..., :k] = w.movedim(1, -1)
    else:
        wl = w.new_zeros((kp, *window, cp))
        wl[:k, ..., :c] = w.movedim(1, -1)
    # CUTLASS's strided data gradient writes every output pixel, those no window position reaches
    # included (their stride phase's tiles run with an empty reduction), so y needs no zeroing
    y = x.new_empty((n, *sizes, kp))
    _lw_launch(run, xl, wl, y, padding, stride, dilation)
    return y


def _lw_last(t, channels):
    """t (N, C, ...) channels-last, (N, ..., channels), its channels padded with zeros."""
    out = t.new_empty((t.shape[0], *t.shape[2:], channels)) if channels == t.shape[1] else \
        t.new_zeros((t.shape[0], *t.shape[2:], channels))
    out[..., :t.shape[1]] = t.movedim(1, -1)
    return out


def _lw_launch(run, xl, wl, y, padding, stride, dilation):
    """``run`` over the batch in cuts of which no tensor reaches 2**31 bytes (CUTLASS's limit)."""
    per = max(1, (2**31 - 1) // (4 * max(xl[0].numel(), y[0].numel(), 1)))
    for i in range(0, xl.shape[0], per):
        run(xl[i:i + per], wl, y[i:i + per], list(padding), list(stride), list(dilation))


def _lw_phase(r, s, p, window):
    """Along a side of stride s, padding p and ``window`` taps, stride phase r's first tap k0, its
    number of taps, and the padding before of its forward convolution (see ``_lw_phases``)."""
    k0 = (r + p) % s
    taps = -(-(window - k0) // s)
    return k0, taps, taps - 1 - (r + p - k0) // s


def _lw_phases(run, x, w, stride, padding, output_padding):
    """The transposed convolution of x by w (input channels, output channels, window...; dilation 1)
    as one forward convolution per stride phase, channels-last as ``_lw_channels_last`` returns it.
    Along a dimension, output o = s q + r gathers the taps k = k0 + s j (k0 = (r + p) mod s) from
    inputs q + e - j (e = (r + p - k0) / s): a forward convolution of stride 1 by those taps in
    reverse order, padded by (taps - 1 - e) before, whose output is every s-th output from r."""
    n, c, k = x.shape[0], x.shape[1], w.shape[1]
    cp, kp = -(-c // 4) * 4, -(-k // 4) * 4
    spatial, window = x.shape[2:], w.shape[2:]
    sizes = [(i - 1) * s - 2 * p + r + o for i, s, p, r, o in zip(spatial, stride, padding, window, output_padding)]
    xl = _lw_last(x, cp)
    y = x.new_empty((n, *sizes, kp))
    phases = [()]
    for s in stride:
        phases = [ph + (r,) for ph in phases for r in range(s)]
    for phase in phases:
        first, taps, pad = zip(*(_lw_phase(r, s, p, big) for r, s, p, big in zip(phase, stride, padding, window)))
        if min(taps) < 1 or min(pad) < 0:
            raise ValueError(f"stride phase {phase} of this transposed convolution is not a forward one")
        wr = w[(slice(None), slice(None), *(slice(k0, None, s) for k0, s in zip(first, stride)))]
        wr = wr.flip(list(range(2, w.dim()))).transpose(0, 1)  # (output channels, input channels, taps...)
        wl = w.new_zeros((kp, *taps, cp))
        wl[:k, ..., :c] = wr.movedim(1, -1)
        yr = x.new_empty((n, *[len(range(r, o, s)) for r, o, s in zip(phase, sizes, stride)], kp))
        if not yr.numel():
            continue
        _lw_launch(run, xl, wl, yr, pad, [1] * len(stride), [1] * len(stride))
        y[(slice(None), *(slice(r, None, s) for r, s in zip(phase, stride)))] = yr
    return y
'''
_glue: dict = {}
exec(compile(GLUE, "<loopwise cutlass conv glue>", "exec"), _glue)  # noqa: S102 - our own source, above
_channels_last, _phase = _glue["_lw_channels_last"], _glue["_lw_phase"]


def extension_source(dims: int, config: str, precision: str = "fp32", dgrad: bool = False, few: bool = False) -> str:
    """The CUDA source of ``lw_conv`` for ``dims``-d convolutions (1-d ones run as 2-d) with the
    tile ``config`` of :data:`CONFIGS` under ``precision``; with ``dgrad`` the data gradient of a
    1-d or 2-d one (a transposed convolution of any stride); with ``few`` a 1-d or 2-d forward one
    through CUTLASS's few-channel iterators (:func:`few_channels`)."""
    from loopwise.kernels.expert.generate import _templates

    if dgrad and dims == 3:
        raise ValueError("CUTLASS's strided data gradient is built for 1-d and 2-d convolutions")
    if few and (dgrad or dims == 3):
        raise ValueError("CUTLASS's few-channel iterators are built for 1-d and 2-d forward convolutions")
    tile, warp, stages = (DGRAD_CONFIGS if dgrad else CONFIGS)[config]
    macro = _templates().get_template("_cutlass_conv.j2").module.conv_source
    return str(macro(3 if dims == 3 else 2, tile, warp, stages, OPERATORS[precision], dgrad, few))


# Below this many input channels (padded to a multiple of 4) a 1-d or 2-d forward convolution runs
# through CUTLASS's few-channel iterators: the optimized ones take one window position's channels
# per reduction step of 16, so with 4 or 8 channels 75 or 50% of each step is zeros (with 12, a
# quarter: left to the optimized ones, whose addressing is cheaper).
FEW_CHANNELS_BELOW = 12


def few_channels(dims: int, channels: int, dgrad: bool = False) -> bool:
    """Whether a forward convolution of ``dims`` spatial dimensions with ``channels`` input
    channels (a group's) runs through the few-channel iterators (:data:`FEW_CHANNELS_BELOW`): never
    a data gradient nor a 3-d one (so never a transposed one run by stride phases)."""
    return not dgrad and dims <= 2 and -(-channels // 4) * 4 < FEW_CHANNELS_BELOW


def transposed_mode(stride, padding, dilation, window, output_padding) -> str:
    """How CUTLASS's form runs a transposed convolution: "flip" (the forward convolution it equals:
    stride 1, no output padding, padding at most dilation x (window - 1)), "dgrad" (the strided data
    gradient, dilation 1, 1-d or 2-d), "phases" (3-d, dilation 1: one forward convolution per stride
    phase, where every phase has a tap along each side and none is padded less than nothing,
    :func:`phases_fit`), or "" where none can."""
    if all(s == 1 for s in stride) and not any(output_padding) \
            and all(p <= d * (r - 1) for p, d, r in zip(padding, dilation, window)):
        return "flip"
    if all(d == 1 for d in dilation) and len(window) <= 2:
        return "dgrad"
    if all(d == 1 for d in dilation) and phases_fit(stride, padding, window):
        return "phases"
    return ""


def phases_fit(stride, padding, window) -> bool:
    """Whether each stride phase of a transposed convolution (dilation 1) is a forward convolution
    CUTLASS runs: along every side at least one tap reaches each phase (window >= stride) and the
    phase's padding before, taps - 1 - (r + p - k0) / s, is not negative."""
    for s, p, big in zip(stride, padding, window):
        for r in range(s):
            _, taps, pad = _phase(r, s, p, big)
            if taps < 1 or pad < 0:
                return False
    return True


def flipped_padding(padding, dilation, window) -> tuple[int, ...]:
    """The padding of the forward convolution a transposed one of stride 1 equals."""
    return tuple(d * (r - 1) - p for p, d, r in zip(padding, dilation, window))


def channels_last_conv(run, x, w, bias, stride, padding, dilation, transposed=None, output_padding=None):
    """``F.convNd(x, w, bias, ...)`` (``F.conv_transposeNd`` with ``transposed``, "flip", "dgrad" or
    "phases" as :func:`transposed_mode` says; ``run`` the data gradient's extension for "dgrad") through
    CUTLASS (``run``), in the input's layout: the channels-last output sliced to its channels,
    moved back and the bias added (torch's copy; a candidate does this in its own kernel with the
    epilogue)."""
    if transposed == "flip":
        padding = flipped_padding(padding, dilation, w.shape[2:])
    output_padding = tuple(output_padding or (0,) * len(stride))
    y = _channels_last(run, x, w, tuple(stride), tuple(padding), tuple(dilation), transposed, output_padding)
    k = w.shape[1] if transposed else w.shape[0]
    out = y[..., :k].movedim(-1, 1)
    if x.dim() == 3:
        out = out.squeeze(2)
    if bias is not None:
        return out + bias.view(1, k, *([1] * (x.dim() - 2)))
    return out.contiguous()
