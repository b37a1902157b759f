"""Output comparison for the judge: allclose on the problem's distribution, normwise error
against float64 on stress inputs, and detection of output elements the candidate never wrote.

The sandbox fills freed allocator blocks of each output's size with a NaN bit pattern of our own
(``POISON``) right before the candidate runs; any element still holding that exact pattern
afterwards was never written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Signalling-NaN payloads: arithmetic never produces them (it yields quiet NaNs), so an element
# with this exact bit pattern was left untouched.
POISON_BITS = {
    "torch.float32": ("torch.int32", 0x7FBADBAD),
    "torch.float64": ("torch.int64", 0x7FF4BADBADBADBAD),
    "torch.float16": ("torch.int16", 0x7DAD),
    "torch.bfloat16": ("torch.int16", 0x7FAD),
    "torch.int64": ("torch.int64", -(2**63) + 7),
    "torch.int32": ("torch.int32", -(2**31) + 7),
}


# A complex dtype is poisoned and counted part by part, as its real dtype, and judged so under the
# stress rule; allclose reads a complex difference by its modulus, as torch.allclose does.
COMPLEX_PARTS = {"torch.complex64": "torch.float32", "torch.complex128": "torch.float64"}


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name.split(".", 1)[1])


# Dtypes with no value that computation never produces (masks, 8- and 16-bit integers, float8):
# one byte fill before a call, another before its repeat (False, then True for a mask), so that an
# element never written is wrong in one of the two calls wherever the reference is not that value.
FILL_BYTES = (0x00, 0x01)
FILL_BYTES_WIDE = (0x5A, 0xA5)


def poison(tensor, phase: int = 0) -> bool:
    """Fills ``tensor`` with the poison pattern of its dtype (True); where the dtype has none, with
    the fill of ``phase`` (0: a call, 1: its repeat) and False."""
    import torch

    if str(tensor.dtype) in COMPLEX_PARTS:
        return poison(_stored_parts(tensor), phase) if tensor.is_contiguous() else False
    tensor = _stored(tensor)
    spec = POISON_BITS.get(str(tensor.dtype))
    if spec is None:
        if tensor.numel() and tensor.is_contiguous():
            fill = FILL_BYTES if tensor.dtype == torch.bool else FILL_BYTES_WIDE
            tensor.reshape(-1).view(torch.uint8).fill_(fill[phase % 2])
        return False
    tensor.view(_torch_dtype(spec[0])).fill_(spec[1])
    return True


def count_poisoned(tensor) -> int:
    """Elements still holding the poison pattern (a complex one: in either part)."""
    complex_parts = str(tensor.dtype) in COMPLEX_PARTS
    tensor = _stored_parts(tensor) if complex_parts else _stored(tensor)
    spec = POISON_BITS.get(str(tensor.dtype))
    if spec is None or not tensor.is_contiguous():
        return 0
    bits = tensor.view(_torch_dtype(spec[0])).reshape(-1, 2 if complex_parts else 1)  # an element's parts in a row
    return sum(int((part == spec[1]).any(1).sum().item()) for part in bits.split(CHUNK))


def _parts(tensor):
    """A complex tensor's values as a real tensor (a trailing dimension of 2: real, imaginary);
    others as they are."""
    import torch

    return torch.view_as_real(tensor.resolve_conj()) if tensor.is_complex() else tensor


def _stored(tensor):
    """A real tensor's memory as stored: a negated view (``y.conj().imag``) without its negation."""
    import torch

    return torch._neg_view(tensor) if tensor.is_neg() else tensor


def _stored_parts(tensor):
    """A complex tensor's memory as a real view, what was written there (a conjugate view's
    imaginary parts as stored, not negated in a copy)."""
    import torch

    return torch.view_as_real(tensor.conj() if tensor.is_conj() else tensor)


def _wide(tensor):
    """``tensor`` in float64, or complex128 for a complex one (``.double()`` drops imaginary parts)."""
    import torch

    return tensor.to(torch.complex128) if tensor.is_complex() else tensor.double()


# Elements per slice when comparing: float64 temporaries of a whole multi-GiB output would need
# several times its size in device memory (KernelBench's level-1 tensors reach 6 GiB).
CHUNK = 1 << 24


# Comparisons of host-held tensors at least this large run slice by slice on the GPU when there is
# one (the judge keeps huge outputs on the host: a 1.6e9-element float64 comparison there takes
# seconds per pass, the copies of its slices to the GPU a fraction of that).
GPU_SLICES_MIN_NUMEL = 1 << 26


def _slice_device(tensors):
    """Where slices are compared: the device of a CUDA tensor among them; for large host tensors
    the current GPU when there is one; else where they are (None: leave them)."""
    for t in tensors:
        if t.is_cuda:
            return t.device
    if tensors and tensors[0].numel() >= GPU_SLICES_MIN_NUMEL:
        import torch

        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
    return None


def _slices(*tensors):
    """Matching flat slices of same-shaped tensors, CHUNK elements at a time (views when contiguous),
    moved to one device (see _slice_device)."""
    device = _slice_device(tensors)
    flat = [t.reshape(-1) for t in tensors]
    for parts in zip(*(f.split(CHUNK) for f in flat)):
        yield parts if device is None else tuple(p.to(device) for p in parts)


HALF_TOLERANCE = 1e-2


@dataclass
class Verdict:
    """Outcome of comparing one trial's outputs."""

    passed: bool
    code: str = ""
    message: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    norm_err: float | None = None
    evidence: dict = field(default_factory=dict)


def check_structure(ref: list, cand: list) -> Verdict | None:
    """Same number of outputs, plain tensors, same shapes and dtypes; None when all agree."""
    import torch

    if len(ref) != len(cand):
        return Verdict(False, "wrong_output", f"returns {len(cand)} outputs, the reference returns {len(ref)}")
    for i, (r, c) in enumerate(zip(ref, cand)):
        if not isinstance(r, torch.Tensor):
            if type(c) is not type(r):  # noqa: E721
                return Verdict(False, "wrong_output", f"output {i} is a {type(c).__name__}, the reference "
                               f"returns a {type(r).__name__}")
            continue
        if type(c) is not torch.Tensor:  # noqa: E721 - subclasses are exactly what we reject
            return Verdict(False, "lazy_eval", f"output {i} is a {type(c).__name__}, not a plain torch.Tensor")
        if tuple(r.shape) != tuple(c.shape):
            return Verdict(False, "shape_mismatch", f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        if r.dtype != c.dtype:
            return Verdict(False, "dtype_mismatch", f"output {i} has dtype {c.dtype}, expected {r.dtype}")
    return None


def compare_allclose(ref: list, cand: list, atol: float, rtol: float) -> Verdict:
    """KernelBench's rule (allclose with equal atol and rtol), plus unwritten and NaN checks."""
    import torch

    bad = check_structure(ref, cand)
    if bad is not None:
        return bad
    worst_abs = worst_rel = 0.0
    for i, (r, c) in enumerate(zip(ref, cand)):
        if not isinstance(r, torch.Tensor):
            if abs(float(c) - float(r)) > atol + rtol * abs(float(r)):
                return Verdict(False, "wrong_output", f"output {i}: {c!r} where the reference gives {r!r}")
            continue
        # Half-precision outputs carry ~3 significant digits: KernelBench's 1e-2 for fp16/bf16.
        atol_i = rtol_i = max(atol, HALF_TOLERANCE) if r.dtype in (torch.float16, torch.bfloat16) else atol
        unwritten = count_poisoned(c)
        if unwritten:
            return Verdict(False, "unwritten_output",
                           f"output {i}: {unwritten} of {c.numel()} elements were never written",
                           evidence={"unwritten": unwritten, "numel": c.numel()})
        if not (r.is_floating_point() or r.is_complex()):
            if not torch.equal(r, c):
                n = int((r != c).sum().item())
                return Verdict(False, "wrong_output", f"output {i}: {n} of {c.numel()} integer elements differ")
            continue
        nonfinite = over = 0
        failed = False
        for rs, cs in _slices(r, c):
            fin_r, fin_c = torch.isfinite(rs), torch.isfinite(cs)
            nonfinite += int((fin_r & ~fin_c).sum().item())
            if nonfinite:
                continue
            wide = _wide(rs)
            magnitude = wide.abs()
            diff = (_wide(cs) - wide).abs()  # complex: the modulus, as torch.allclose reads it
            diff = torch.where(fin_r & fin_c, diff, torch.zeros_like(diff))
            if diff.numel():
                worst_abs = max(worst_abs, float(diff.max()))
                rel = diff / magnitude.clamp_min(1e-12)
                worst_rel = max(worst_rel, float(torch.where(fin_r, rel, torch.zeros_like(rel)).max()))
            if not torch.allclose(cs, rs, atol=atol_i, rtol=rtol_i, equal_nan=True):
                failed = True  # also for NaN against a number, or an infinity of the other sign
                over += int((diff > atol_i + rtol_i * magnitude).sum().item())
        if nonfinite:
            return Verdict(False, "nan_output",
                           f"output {i}: {nonfinite} elements are NaN/Inf where the reference is finite")
        if failed:
            return Verdict(False, "wrong_output",
                           f"output {i}: {over} of {c.numel()} elements outside atol=rtol={atol_i:g} "
                           f"(max abs error {worst_abs:.3g})",
                           max_abs_err=worst_abs, max_rel_err=worst_rel,
                           evidence={"mismatched": over, "numel": c.numel()})
    return Verdict(True, max_abs_err=worst_abs, max_rel_err=worst_rel)


def largest_difference(a, b) -> float:
    """max |a - b| of two same-shaped tensors, in float64 (NaN where a difference is NaN), slice by
    slice: no float64 copy of either whole tensor."""
    import torch

    return float(torch.stack([(xs.double() - ys.double()).abs().max() for xs, ys in _slices(a, b)]).max())


def _also(where) -> tuple:
    return () if where is None else (where,)


def _judged(rs, where_slice: list):
    """Where a slice of a float64 reference is judged: its finite entries, and with the matching
    slice of the reference in the problem's own dtype (``where_slice``, empty for none) only those
    where that reference is finite too. The error bounds skip the others: an overflow of the
    problem's own arithmetic, which :func:`nonfinite_mismatch` judges, must not count as the
    reference's error. Decided slice by slice, so no masked float64 copy of a whole output is made."""
    import torch

    finite = torch.isfinite(rs)
    return finite & torch.isfinite(where_slice[0]) if where_slice else finite


def normwise_error(x, ref64, where=None) -> float:
    """||x - ref|| / ||ref|| in float64 over finite reference entries (with ``where``, the reference
    in the problem's own dtype, over entries finite in it too: see :func:`_judged`)."""
    import torch

    num2 = denom2 = 0.0
    for xs, rs, *ws in _slices(x, ref64, *_also(where)):
        mask = _judged(rs, ws)
        d = torch.where(mask, xs.double() - rs, torch.zeros_like(rs))
        n = torch.where(mask, rs, torch.zeros_like(rs))
        num2 += float(torch.linalg.vector_norm(d)) ** 2
        denom2 += float(torch.linalg.vector_norm(n)) ** 2
    denom, num = denom2 ** 0.5, num2 ** 0.5
    if denom == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / denom


# A normwise error this large is a different function, not a precision path: of a candidate on
# stress inputs, and of the reference against a float64 run of it.
WRONG_NOT_IMPRECISE = 0.05


def same_function(ref: list, ref64: list) -> bool:
    """Whether a float64 run computes the reference's function: every floating output of the
    reference within :data:`WRONG_NOT_IMPRECISE` normwise of it (over entries finite in both).
    A forward that reads the default dtype (``torch.finfo()``, ``torch.get_default_dtype()``)
    computes something else with float64 as the default, and an error of the reference that no
    rounding explains would become the allowance the fp32 rule scales."""
    import torch

    for r, r64 in zip(ref, ref64):
        if isinstance(r, torch.Tensor) and (r.is_floating_point() or r.is_complex()) \
                and isinstance(r64, torch.Tensor) and r.numel() \
                and normwise_error(_parts(r), _parts(r64), _parts(r)) > WRONG_NOT_IMPRECISE:
            return False
    return True


def nonfinite_mismatch(i: int, ref, cand) -> Verdict | None:
    """A failing verdict where output ``i`` is not finite where the reference in the problem's own
    dtype (``ref``) is finite, or where that reference is NaN and the output is not, or an infinity
    and the output is not the same infinity; None where they agree.

    The reference in its own dtype decides, not float64's: where the problem's arithmetic overflows
    (fp16 ``x * 60000``, an exp) its output is infinite, and a candidate computing the same thing must
    be too, although float64 is finite there. Where only float64 is infinite or NaN (a pole that the
    problem's rounding stepped around), the problem's output is finite and so must the candidate's be:
    the allclose trial against that reference requires it anyway, and float64 gives no error scale
    there. The error bounds then look only at entries where both references are finite
    (:func:`_judged`)."""
    import torch

    for rs, cs in _slices(ref, cand):
        finite = torch.isfinite(rs)
        if bool((finite & ~torch.isfinite(cs)).any()):
            return Verdict(False, "nan_output", f"output {i}: NaN/Inf where the {rs.dtype} reference is finite")
        same = torch.where(rs != rs, cs != cs, cs.double() == rs.double())
        if bool((~finite & ~same).any()):
            return Verdict(False, "nan_output", f"output {i}: {int((~finite & ~same).sum())} elements differ where "
                           f"the {rs.dtype} reference is NaN or infinite")
    return None


def compare_stress(ref32: list, ref64: list, cand: list, ratio: float, floor: float) -> Verdict:
    """Judges stress outputs by error against float64, relative to the fp32 reference's own error.

    A fixed allclose cannot judge mixed-sign inputs: even cuBLAS SGEMM fails 1e-4 there
    (FACTS §4.3b). The fp32 reference's error sets the scale; TF32 lands ~260x above it.
    """
    import torch

    bad = check_structure(ref32, cand)
    if bad is not None:
        return bad
    worst = Verdict(True, norm_err=0.0)
    for i, (r32, r64, c) in enumerate(zip(ref32, ref64, cand)):
        if not isinstance(r32, torch.Tensor):
            continue
        unwritten = count_poisoned(c)
        if unwritten:
            return Verdict(False, "unwritten_output", f"output {i}: {unwritten} elements were never written")
        r32, c = _parts(r32), _parts(c)
        r64 = _parts(r64) if isinstance(r64, torch.Tensor) else r64
        if not c.is_floating_point():
            bad = _integer_stress_mismatch(i, r32, r64, c)
            if bad is not None:
                return bad
            continue
        bad = nonfinite_mismatch(i, r32, c)
        if bad is not None:
            return bad
        ref_err = normwise_error(r32, r64, r32)
        err = normwise_error(c, r64, r32)
        allowed = max(ratio * ref_err, floor)
        ev = {"norm_err": err, "ref_norm_err": ref_err, "allowed": allowed}
        if err > allowed:
            return Verdict(False, "stress_error", f"output {i}: normwise error {err:.3g} vs float64 is "
                           f"{err / max(ref_err, 1e-300):.0f}x the fp32 reference's {ref_err:.3g} (allowed {allowed:.3g})",
                           norm_err=err, evidence=ev)
        if err >= (worst.norm_err or 0.0):
            worst = Verdict(True, norm_err=err, evidence=ev)
    return worst


def _integer_stress_mismatch(i: int, r32, r64, c) -> Verdict | None:
    """A failing verdict where integer or boolean output ``i`` (an index, a mask) differs from both
    the fp32 reference's and the float64 run's: where rounding moves a near tie, either answer is
    one the Model gives; any other value is wrong. None where every element matches one of them."""
    import torch

    alt = (r64 if isinstance(r64, torch.Tensor) and r64.shape == r32.shape else r32).to(r32.dtype)
    differ = 0
    for rs, r6, cs in _slices(r32, alt, c):
        differ += int(((cs != rs) & (cs != r6)).sum().item())
    if differ:
        return Verdict(False, "wrong_output", f"output {i}: {differ} of {c.numel()} integer elements differ from "
                       "both the fp32 reference and the float64 run")
    if c.dtype == torch.bool or c.dim() == 0 or c.shape[-1] < 2:
        return None
    # Rows of distinct indices (argsort, top-k) stay distinct: a row that took entries from both
    # references where they ordered a near tie differently names one index twice.
    n = c.shape[-1]
    step = max(1, CHUNK // n)
    rows = [t.reshape(-1, n) for t in (r32, alt, c)]
    mixed = 0
    for start in range(0, rows[0].shape[0], step):
        d32, d64, dc = (_distinct_rows(t[start:start + step].to(c.device)) for t in rows)
        mixed += int((d32 & d64 & ~dc).sum().item())
    if mixed:
        return Verdict(False, "wrong_output", f"output {i}: {mixed} of {rows[0].shape[0]} rows repeat an index where "
                       "the fp32 reference's and the float64 run's rows hold each once")
    return None


def _distinct_rows(rows):
    """Per row of a 2-D integer tensor: whether its entries are all different."""
    return (rows.sort(dim=-1).values.diff(dim=-1) != 0).all(dim=-1)


def is_half(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype in (torch.float16, torch.bfloat16)


def _is_fp32(t) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.dtype == torch.float32


def _errors(x, ref64, tol: float, where=None) -> tuple[float, int]:
    """Over the reference's finite entries (see :func:`_judged` for ``where``): max |x - ref64|, and
    how many elements of ``x`` lie outside atol = rtol = ``tol`` of ``ref64`` (one pass over the
    slices)."""
    import torch

    worst, misses = 0.0, 0
    for xs, rs, *ws in _slices(x, ref64, *_also(where)):
        finite = _judged(rs, ws)
        d = torch.where(finite, (xs.double() - rs).abs(), torch.zeros((), dtype=rs.dtype, device=rs.device))
        if d.numel():
            worst = max(worst, float(d.max()))
        misses += int((finite & (d > tol + tol * rs.abs())).sum())
    return worst, misses


def _fp32_errors(x, ref64, tol: float, slack: float, where=None) -> tuple[float, int]:
    """Over the reference's finite entries (see :func:`_judged` for ``where``): the normwise error of
    ``x`` against ``ref64``, and how many elements of ``x`` miss ``ref64`` by more than
    ``tol + tol*|ref64| + slack`` (one pass)."""
    import torch

    num2 = denom2 = 0.0
    misses = 0
    for xs, rs, *ws in _slices(x, ref64, *_also(where)):
        finite = _judged(rs, ws)
        zero = torch.zeros((), dtype=rs.dtype, device=rs.device)
        d = torch.where(finite, xs.double() - rs, zero)
        num2 += float(torch.linalg.vector_norm(d)) ** 2
        denom2 += float(torch.linalg.vector_norm(torch.where(finite, rs, zero))) ** 2
        misses += int((finite & (d.abs() > tol + tol * rs.abs() + slack)).sum())
    if denom2 == 0.0:
        return (0.0 if num2 == 0.0 else float("inf")), misses
    return (num2 / denom2) ** 0.5, misses


def _half_bound(i: int, r, r64, c, factor: float, tol: float) -> Verdict:
    """fp16 / bf16: max error against float64 at most ``factor`` times the half reference's own, and
    at most ``factor`` times as many elements outside ``tol`` of float64 as the reference has."""
    (mine, missed), (theirs, ref_missed) = _errors(c, r64, tol, r), _errors(r, r64, tol, r)
    here = {"rule": "half", "output": i, "error": mine, "reference_error": theirs, "allowed": factor * theirs,
            "missed": missed, "reference_missed": ref_missed}
    if mine > factor * theirs:
        return Verdict(False, "wrong_output",
                       f"output {i}: max abs error against float64 {mine:.3g}, more than {factor:g}x the "
                       f"{r.dtype} reference's own {theirs:.3g}", max_abs_err=mine, evidence=here)
    if missed > factor * ref_missed:
        return Verdict(False, "wrong_output",
                       f"output {i}: {missed} of {c.numel()} elements outside atol=rtol={tol:g} of float64, more "
                       f"than {factor:g}x the {r.dtype} reference's own {ref_missed}", max_abs_err=mine,
                       evidence=here)
    return Verdict(True, max_abs_err=mine, evidence=here)


def _fp32_bound(i: int, r, r64, c, factor: float, tol: float) -> Verdict:
    """fp32: every element within ``tol`` of float64 plus ``factor`` times the fp32 reference's own
    largest error, and a normwise error at most ``factor`` times the reference's (so the largest
    error allowed cannot be spent on every element)."""
    theirs, _ = _errors(r, r64, tol, r)
    slack = factor * theirs
    ref_norm, _ = _fp32_errors(r, r64, tol, slack, r)
    mine_norm, missed = _fp32_errors(c, r64, tol, slack, r)
    here = {"rule": "fp32", "output": i, "reference_error": theirs, "allowed": slack, "missed": missed,
            "norm_error": mine_norm, "reference_norm_error": ref_norm}
    if missed:
        return Verdict(False, "wrong_output",
                       f"output {i}: {missed} of {c.numel()} elements miss float64 by more than atol=rtol={tol:g} "
                       f"plus {factor:g}x the fp32 reference's own largest error {theirs:.3g}", norm_err=mine_norm,
                       evidence=here)
    if mine_norm > factor * ref_norm:
        return Verdict(False, "wrong_output",
                       f"output {i}: normwise error against float64 {mine_norm:.3g}, more than {factor:g}x the "
                       f"fp32 reference's own {ref_norm:.3g}", norm_err=mine_norm, evidence=here)
    return Verdict(True, norm_err=mine_norm, evidence=here)


def _margin(v: Verdict) -> float:
    """How much of its bound a passing output used (the worst one is reported)."""
    ev = v.evidence
    if ev.get("rule") == "fp32":
        return ev["norm_error"] / max(ev["reference_norm_error"], 1e-300)
    return ev.get("error", 0.0) / max(ev.get("reference_error", 0.0), 1e-300)


def _half_exact(i: int, r, r64, c, tol: float) -> Verdict:
    """fp16 / bf16 where the half reference is off float64 by more than the factor bound can judge
    (a running sum that rounds each addition to bf16 stalls once its step exceeds what it adds):
    every element within ``tol`` of float64, relative to the element and to the output's mean
    magnitude (``|c - r64| <= tol * (|r64| + mean |r64|)``: a scan over half-precision inputs carries
    their roundings into its small sums, but a wrong element is off by the output's own scale)."""
    import torch

    total = count = 0.0
    for s64, in _slices(r64):
        finite = torch.isfinite(s64)
        total += float(s64.abs().where(finite, 0.0).sum())
        count += int(finite.sum())
    scale = total / max(count, 1)
    over = worst = own = 0.0
    for s64, sr, sc in _slices(r64, r, c):
        finite = torch.isfinite(s64) & torch.isfinite(sr)
        err = (sc.double() - s64).abs().where(finite, 0.0)
        over += int((err > tol * (s64.abs() + scale)).sum())
        worst = max(worst, float(err.max())) if err.numel() else worst
        own = max(own, float((sr.double() - s64).abs().where(finite, 0.0).max())) if sr.numel() else own
    if over:
        return Verdict(False, "wrong_output", f"output {i}: {int(over)} of {c.numel()} elements farther from "
                       f"float64 than {tol:g} of their value plus {tol:g} of the output's mean magnitude "
                       f"{scale:.3g} (max error {worst:.3g})", max_abs_err=worst)
    return Verdict(True, max_abs_err=worst, evidence={"rule": "half_exact", "output": i, "error": worst,
                                                      "reference_error": own, "scale": scale})


def compare_float64_bound(ref: list, ref64: list, cand: list, half_factor: float | None,
                          fp32_factor: float | None = None,
                          atol: float = 1e-4, rtol: float = 1e-4, half_exact: bool = False) -> Verdict:
    """Judges floating outputs by their distance to float64 rather than to the reference, which is
    itself an approximation (its own summation order and roundings).

    fp16 / bf16 outputs pass when their largest error against float64 is at most ``half_factor``
    times the half reference's own (FlashAttention's test rule, ``max|out - ref| <= 2
    max|ref_half - ref|``) and they miss float64 by more than the half tolerance (1e-2) in at most
    ``half_factor`` times as many elements as the reference does (so a candidate cannot spend the
    largest error, made where values are large, on the small ones).

    fp32 outputs (when ``fp32_factor`` is given) pass when every element lies within atol / rtol of
    float64 plus ``fp32_factor`` times the fp32 reference's own largest error, and their normwise
    error is at most ``fp32_factor`` times the reference's: another correct fp32 summation order
    stays a small multiple of the reference's error (a sequential loop over K = 4095 is about 3x a
    blocked GEMM's, growing with the square root of K), while bf16x3 lands at 20-80x and TF32 at
    several hundred. Where a factor is None, and for other dtypes, :func:`compare_allclose`
    decides; structure, unwritten and NaN checks apply to all.

    With ``half_exact``, for a half reference too far off float64 for the factor to mean anything,
    fp16 / bf16 outputs are judged by the half tolerance against float64 itself (:func:`_half_exact`)."""
    import torch

    bad = check_structure(ref, cand)
    if bad is not None:
        return bad
    worst = Verdict(True)
    for i, (r, r64, c) in enumerate(zip(ref, ref64, cand)):
        rule = ("half" if is_half(r) and half_factor is not None
                else "fp32" if _is_fp32(r) and fp32_factor is not None else None)
        if rule is None or not isinstance(r64, torch.Tensor):
            v = compare_allclose([r], [c], atol, rtol)
            if not v.passed:
                return Verdict(False, v.code, v.message.replace("output 0", f"output {i}", 1),
                               max_abs_err=v.max_abs_err, max_rel_err=v.max_rel_err, evidence=v.evidence)
            continue
        unwritten = count_poisoned(c)
        if unwritten:
            return Verdict(False, "unwritten_output", f"output {i}: {unwritten} of {c.numel()} elements were never written",
                           evidence={"unwritten": unwritten, "numel": c.numel()})
        bad = nonfinite_mismatch(i, r, c)
        if bad is not None:
            return bad
        if rule == "half" and half_exact:
            v = _half_exact(i, r, r64, c, max(atol, rtol, HALF_TOLERANCE))
        elif rule == "half":
            v = _half_bound(i, r, r64, c, half_factor, max(atol, HALF_TOLERANCE))
        else:
            v = _fp32_bound(i, r, r64, c, fp32_factor, atol)
        if not v.passed:
            return v
        if not worst.evidence or _margin(v) > _margin(worst):
            worst = v
    return worst
