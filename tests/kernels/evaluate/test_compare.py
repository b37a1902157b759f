"""Output comparison rules, from the judge's point of view."""

import torch

from loopwise.kernels.evaluate.compare import (compare_allclose, compare_stress, count_poisoned, normwise_error,
                                               poison)


def test_poisoned_elements_are_counted_exactly():
    t = torch.empty(10, 7)
    assert poison(t)
    t[:3] = 1.0
    assert count_poisoned(t) == 49
    v = compare_allclose([torch.ones(10, 7)], [t], 1e-4, 1e-4)
    assert not v.passed and v.code == "unwritten_output" and "49 of 70" in v.message


def test_half_precision_outputs_get_kernelbench_half_tolerance():
    ref = torch.linspace(-1, 1, 101).half()
    cand = (ref.float() + 5e-3).half()
    assert compare_allclose([ref], [cand], 1e-4, 1e-4).passed
    assert not compare_allclose([ref.float()], [cand.float()], 1e-4, 1e-4).passed


def test_plain_number_outputs_are_compared_by_value():
    assert compare_allclose([1.0, torch.ones(3)], [1.00001, torch.ones(3)], 1e-4, 1e-4).passed
    bad = compare_allclose([1.0], [1.5], 1e-4, 1e-4)
    assert not bad.passed and bad.code == "wrong_output"
    assert compare_allclose([1.0], [torch.tensor(1.0)], 1e-4, 1e-4).code == "wrong_output"


def test_structure_mismatches_have_their_own_codes():
    r = torch.zeros(4, 4)
    assert compare_allclose([r], [torch.zeros(4, 3)], 1e-4, 1e-4).code == "shape_mismatch"
    assert compare_allclose([r], [torch.zeros(4, 4, dtype=torch.float64)], 1e-4, 1e-4).code == "dtype_mismatch"
    assert compare_allclose([r], [r, r], 1e-4, 1e-4).code == "wrong_output"


def test_stress_rule_scales_with_the_fp32_references_own_error():
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 512, generator=g), torch.randn(512, 128, generator=g)
    ref64 = a.double() @ b.double()
    ref32 = a @ b
    fp16 = (a.half().float() @ b.half().float())
    assert compare_stress([ref32], [ref64], [ref32.clone()], 20.0, 2e-6).passed
    v = compare_stress([ref32], [ref64], [fp16], 20.0, 2e-6)
    assert not v.passed and v.code == "stress_error"
    assert normwise_error(fp16, ref64) > 20 * normwise_error(ref32, ref64)


def test_chunked_comparison_matches_whole_tensor(monkeypatch):
    """Outputs larger than one comparison slice (multi-GiB on the GPU) get the same verdict, counts
    and errors as when compared whole: errors, NaNs and unwritten elements in a late slice count."""
    import loopwise.kernels.evaluate.compare as cmp

    torch.manual_seed(0)
    ref = torch.randn(3, 1000)
    whole_norm = cmp.normwise_error(ref + 1e-3, ref.double())
    monkeypatch.setattr(cmp, "CHUNK", 128)
    assert cmp.compare_allclose([ref], [ref.clone()], 1e-4, 1e-4).passed
    bad = ref.clone()
    bad[2, 990:995] += 1.0
    v = cmp.compare_allclose([ref], [bad], 1e-4, 1e-4)
    assert not v.passed and v.evidence["mismatched"] == 5 and abs(v.max_abs_err - 1.0) < 1e-5
    nan = ref.clone()
    nan[2, 999] = float("nan")
    assert cmp.compare_allclose([ref], [nan], 1e-4, 1e-4).code == "nan_output"
    inf_ref = ref.clone()
    inf_ref[1, 500] = float("inf")
    flipped = inf_ref.clone()
    flipped[1, 500] = float("-inf")
    assert cmp.compare_allclose([inf_ref], [flipped], 1e-4, 1e-4).code == "nan_output" or \
        not cmp.compare_allclose([inf_ref], [flipped], 1e-4, 1e-4).passed
    unwritten = ref.clone()
    cmp.poison(unwritten[2, 900:])
    assert cmp.count_poisoned(unwritten) == 100
    assert abs(cmp.normwise_error(ref + 1e-3, ref.double()) - whole_norm) < 1e-12


def test_half_outputs_more_accurate_than_the_half_reference_pass_the_float64_bound():
    """A bf16 reference that sums in bf16 is itself off where its sum nearly cancels; a candidate
    that sums in fp32 and rounds once fails allclose against it there, yet is nearer the truth.
    The bound (FlashAttention's test rule): max |cand - float64| <= factor x max |ref - float64|."""
    from loopwise.kernels.evaluate.compare import compare_float64_bound

    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, 64, generator=g).bfloat16()
    ref = x[:, 0]
    for j in range(1, 64):
        ref = ref + x[:, j]  # rounded to bf16 at every addition
    ref64 = x.double().sum(1)
    fp32_once = x.float().sum(1).bfloat16()
    assert not compare_allclose([ref], [fp32_once], 1e-4, 1e-4).passed  # the premise
    v = compare_float64_bound([ref], [ref64], [fp32_once], 2.0)
    assert v.passed, v.message
    assert v.evidence["error"] < v.evidence["reference_error"]
    # a candidate further from the truth than twice the reference's own error fails, with both numbers
    dropped = x[:, :63].float().sum(1).bfloat16()
    bad = compare_float64_bound([ref], [ref64], [dropped], 2.0)
    assert not bad.passed and bad.code == "wrong_output"
    assert "float64" in bad.message and "reference's own" in bad.message
    # the largest error allowed where values are large cannot be spent on the small ones: a weight
    # gradient whose reference is off only by its final rounding, with the small entries zeroed
    w = torch.randn(256, 512, generator=g, dtype=torch.float64) * 100
    w64, w_ref = w, w.bfloat16()
    allowed = 2 * float((w_ref.double() - w64).abs().max())
    zeroed = torch.where(w64.abs() < allowed / 2, 0.0, w64).bfloat16()
    assert float((zeroed.double() - w64).abs().max()) <= allowed  # within the max-error bound alone
    cheat = compare_float64_bound([w_ref], [w64], [zeroed], 2.0)
    assert not cheat.passed and "elements outside atol=rtol=0.01 of float64" in cheat.message
    assert compare_float64_bound([w_ref], [w64], [w64.float().bfloat16()], 2.0).passed
    # fp32 outputs beside the half one are still judged by allclose
    other = torch.randn(8)
    assert not compare_float64_bound([ref, other], [ref64, other.double()], [fp32_once, other + 1.0], 2.0).passed
    assert compare_float64_bound([ref, other], [ref64, other.double()], [fp32_once, other.clone()], 2.0).passed
    # NaN where the reference is finite, and elements never written, fail as before
    nan = fp32_once.clone()
    nan[5] = float("nan")
    assert compare_float64_bound([ref], [ref64], [nan], 2.0).code == "nan_output"
    unwritten = torch.empty_like(fp32_once)
    poison(unwritten)
    assert compare_float64_bound([ref], [ref64], [unwritten], 2.0).code == "unwritten_output"


def _large_k(seed: int):
    """Zero-mean operands and a long odd reduction: the blocked fp32 product (the reference), the
    float64 truth, and a correct fp32 product summed in another order (one multiply-add per k)."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(4095, 192, generator=g), torch.randn(160, 4095, generator=g)
    ref = a.T @ b.T
    ref64 = a.double().T @ b.double().T
    seq = torch.zeros_like(ref)
    for k in range(a.shape[0]):
        seq.addcmul_(a[k].unsqueeze(1), b[:, k].unsqueeze(0))
    return a, b, ref, ref64, seq


def _truncated(t, keep_bits: int):
    """``t`` with only ``keep_bits`` of float32's 23 mantissa bits (10: TF32, 7: bfloat16)."""
    return (t.contiguous().view(torch.int32) & -(1 << (23 - keep_bits))).view(torch.float32)


def test_fp32_outputs_of_another_correct_summation_order_pass_the_float64_bound():
    """Two correct fp32 summation orders of a long zero-mean reduction differ by more than 1e-4 on
    outputs near zero: allclose alone rejects an honest kernel. Judged against float64, relative to
    the fp32 reference's own error, it passes; TF32 and bf16x3 products (reduced precision under
    the fp32 policy) and a wrong result still fail."""
    from loopwise.kernels.evaluate.compare import compare_float64_bound

    a, b, ref, ref64, seq = _large_k(0)
    assert not compare_allclose([ref], [seq], 1e-4, 1e-4).passed  # the premise
    v = compare_float64_bound([ref], [ref64], [seq], half_factor=2.0, fp32_factor=8.0)
    assert v.passed, v.message
    assert v.evidence["rule"] == "fp32" and v.evidence["norm_error"] < 8 * v.evidence["reference_norm_error"]
    # the other way round too: the reference summed in order, the candidate blocked
    assert compare_float64_bound([seq], [ref64], [ref], 2.0, 8.0).passed
    tf32 = _truncated(a, 10).T @ _truncated(b, 10).T
    hi_a, hi_b = _truncated(a, 7), _truncated(b, 7)
    lo_a, lo_b = _truncated(a - hi_a, 7), _truncated(b - hi_b, 7)
    mm = lambda x, y: (x.double().T @ y.double().T).float()  # noqa: E731 - exact products, fp32 sums
    bf16x3 = mm(hi_a, hi_b) + (mm(hi_a, lo_b) + mm(lo_a, hi_b))
    for reduced in (tf32, bf16x3):
        bad = compare_float64_bound([ref], [ref64], [reduced], 2.0, 8.0)
        assert not bad.passed and bad.code == "wrong_output", bad.message
        assert "fp32 reference's own" in bad.message
    wrong = seq.clone()
    wrong.view(-1)[int(ref64.abs().argmin())] += 0.01  # one output near zero off by 1e-2
    assert not compare_float64_bound([ref], [ref64], [wrong], 2.0, 8.0).passed
    # a candidate may not spend the largest error allowed on every element (the normwise bound)
    budget = float((ref.double() - ref64).abs().max())
    smeared = (ref64 + 4 * budget * torch.sign(torch.randn_like(ref64))).float()
    spent = compare_float64_bound([ref], [ref64], [smeared], 2.0, 8.0)
    assert not spent.passed and "normwise" in spent.message
    # without an fp32 factor, fp32 outputs keep allclose alone
    assert not compare_float64_bound([ref], [ref64], [seq], 2.0, None).passed


def test_a_number_where_the_float64_reference_is_nan_or_infinite_fails():
    """Where the float64 reference is NaN the candidate must be NaN, and where it is an infinity
    the same infinity (a max that skips NaN, an overflow clipped): by the float64 bound and by the
    stress rule alike; the same non-finite values pass."""
    from loopwise.kernels.evaluate.compare import compare_float64_bound

    torch.manual_seed(0)
    ref = torch.randn(64)
    ref[3], ref[7] = float("nan"), float("inf")
    ref64 = ref.double()
    assert compare_float64_bound([ref], [ref64], [ref.clone()], 2.0, fp32_factor=4.0).passed
    assert compare_stress([ref], [ref64], [ref.clone()], 4.0, 1e-6).passed
    for where, value in ((3, 1.5), (7, 6.0e4), (7, float("-inf")), (7, float("nan"))):
        wrong = ref.clone()
        wrong[where] = value
        for v in (compare_float64_bound([ref], [ref64], [wrong], 2.0, fp32_factor=4.0),
                  compare_float64_bound([ref.half()], [ref64], [wrong.half()], 2.0),
                  compare_stress([ref], [ref64], [wrong], 4.0, 1e-6)):
            assert not v.passed and v.code == "nan_output", (where, value, v)


def _overflowing(dtype):
    """(the reference in ``dtype``, float64's, the inputs) of ``x * 60000``: in fp16 it overflows
    to +-inf for |x| above about 1.09, in float64 it does not."""
    torch.manual_seed(0)
    x = torch.randn(256).to(dtype)
    ref, ref64 = x * 60000.0, x.double() * 60000.0
    assert ref.isinf().any() and ref64.isfinite().all()
    return ref, ref64


def test_an_output_that_overflows_in_its_own_dtype_is_judged_by_that_dtype_there():
    """fp16 ``x * 60000``: the reference itself is +-inf where float64 is finite. A candidate that
    computes exactly the reference passes the float64 bound and the stress rule; where the fp16
    reference is infinite the candidate must be the same infinity (a finite number, the other sign or
    NaN fails), and its other entries are still held to float64 (the overflow widens no bound)."""
    from loopwise.kernels.evaluate.compare import compare_float64_bound

    ref, ref64 = _overflowing(torch.float16)
    assert compare_float64_bound([ref], [ref64], [ref.clone()], 2.0).passed
    assert compare_stress([ref], [ref64], [ref.clone()], 4.0, 1e-3).passed
    at = int(ref.isinf().nonzero()[0])
    for value in (65504.0, -float(ref[at]), float("nan")):
        wrong = ref.clone()
        wrong[at] = value
        for v in (compare_float64_bound([ref], [ref64], [wrong], 2.0), compare_stress([ref], [ref64], [wrong], 4.0, 1e-3)):
            assert not v.passed and v.code == "nan_output", (value, v)
    off = ref.clone()
    off[ref.isfinite()] *= 1.05
    assert not compare_float64_bound([ref], [ref64], [off], 2.0).passed
    assert not compare_stress([ref], [ref64], [off], 4.0, 1e-3).passed


def test_where_only_the_float64_reference_is_non_finite_the_output_is_finite_as_its_own_dtypes():
    """A pole that rounding in the problem's dtype stepped around (float64 infinite or NaN, the fp32
    reference finite): the candidate must be finite there, as the reference is (and as the allclose
    trial against it requires); an infinity or a NaN there fails. Its other entries are judged as before."""
    from loopwise.kernels.evaluate.compare import compare_float64_bound

    torch.manual_seed(0)
    ref = torch.randn(64)
    ref64 = ref.double()
    ref64[3], ref64[9] = float("inf"), float("nan")
    ref[3], ref[9] = 3.0e30, -2.0
    near = ref.clone()
    near[3] = 2.9e30
    for cand in (ref.clone(), near):
        assert compare_float64_bound([ref], [ref64], [cand], 2.0, fp32_factor=4.0).passed
        assert compare_stress([ref], [ref64], [cand], 4.0, 1e-6).passed
    for where, value in ((3, float("inf")), (9, float("nan")), (3, float("nan"))):
        wrong = ref.clone()
        wrong[where] = value
        for v in (compare_float64_bound([ref], [ref64], [wrong], 2.0, fp32_factor=4.0),
                  compare_stress([ref], [ref64], [wrong], 4.0, 1e-6)):
            assert not v.passed and v.code == "nan_output", (where, value, v)


def test_stress_integer_outputs_must_match_the_fp32_or_the_float64_reference():
    """An index or mask output on stress inputs: equal to the fp32 reference's, or to the float64
    run's where rounding moved a near tie (both are answers the Model gives), passes; another
    index fails as a wrong output, naming how many elements differ."""
    r32 = torch.tensor([[3, 1, 4], [1, 5, 9]])
    r64 = torch.tensor([[3, 2, 4], [1, 5, 9]])
    assert compare_stress([r32], [r64], [r32.clone()], 20.0, 2e-6).passed
    assert compare_stress([r32], [r64], [r64.clone()], 20.0, 2e-6).passed
    other = torch.tensor([[3, 1, 4], [0, 5, 9]])
    v = compare_stress([r32], [r64], [other], 20.0, 2e-6)
    assert not v.passed and v.code == "wrong_output" and "1 of 6" in v.message, v
    mask = torch.tensor([True, False, True])
    assert not compare_stress([mask], [mask], [~mask], 20.0, 2e-6).passed


def test_stress_index_rows_mixed_from_both_references_must_stay_distinct():
    """Argsort or top-k rows where rounding swapped a near tie: the fp32 row or the float64 row
    passes, and so does a row of another near-tie order; a row that takes some entries from one
    and some from the other and so names one index twice is no answer the Model gives."""
    r32 = torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]])
    r64 = torch.tensor([[1, 0, 2, 3], [3, 2, 0, 1]])
    assert compare_stress([r32], [r64], [r64.clone()], 20.0, 2e-6).passed
    assert compare_stress([r32], [r64], [torch.tensor([[0, 1, 2, 3], [3, 2, 0, 1]])], 20.0, 2e-6).passed
    v = compare_stress([r32], [r64], [torch.tensor([[0, 0, 2, 3], [3, 2, 1, 0]])], 20.0, 2e-6)
    assert not v.passed and v.code == "wrong_output" and "1 of 2 rows" in v.message, v
    # independent indices (an argmin per row) may repeat: the rule holds only where the references' rows are distinct
    argmin32, argmin64 = torch.tensor([[2, 2, 0]]), torch.tensor([[2, 1, 0]])
    assert compare_stress([argmin32], [argmin64], [torch.tensor([[2, 2, 0]])], 20.0, 2e-6).passed


def test_dtypes_without_a_poison_value_get_a_fill_that_differs_between_a_call_and_its_repeat():
    """A mask or an 8/16-bit integer has no value that computation never produces: freed blocks
    get one fill before a call and another before its repeat (False then True for a mask), so an
    element the candidate never writes is wrong in one of the two calls."""
    for dtype in (torch.bool, torch.int8, torch.uint8, torch.int16):
        a, b = torch.empty(5, 3, dtype=dtype), torch.empty(5, 3, dtype=dtype)
        assert not poison(a) and not poison(b, phase=1)
        assert a.unique().numel() == 1 and b.unique().numel() == 1 and not torch.equal(a, b), dtype
        assert count_poisoned(a) == 0
    mask = torch.empty(4, dtype=torch.bool)
    poison(mask)
    assert not mask.any()
    poison(mask, phase=1)
    assert mask.all()


def test_complex_outputs_are_judged_on_both_parts_and_their_unwritten_elements_found():
    """A complex output (an FFT's) is compared on its real and imaginary parts alike, under both
    rules; an element whose real or imaginary part the candidate never wrote is found."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g)
    ref64 = torch.fft.rfft(x.double())
    ref32 = torch.fft.rfft(x)
    wrong = ref32.clone()
    wrong.imag[3, 4] += 1.0  # the real parts all right
    assert compare_allclose([ref32], [ref32.clone()], 1e-4, 1e-4).passed
    v = compare_allclose([ref32], [wrong], 1e-4, 1e-4)
    assert not v.passed and v.code == "wrong_output"
    assert compare_stress([ref32], [ref64], [ref32.clone()], 20.0, 2e-6).passed
    v = compare_stress([ref32], [ref64], [wrong], 20.0, 2e-6)
    assert not v.passed and v.code == "stress_error", v
    for dtype in (torch.complex64, torch.complex128):
        out = torch.empty(5, 3, dtype=dtype)
        assert poison(out)
        out[:2] = 1 + 2j
        out.real[4, 0] = 0.5  # its imaginary part never written
        assert count_poisoned(out) == 9
        v = compare_stress([out.clone().zero_()], [out.clone().zero_()], [out], 20.0, 2e-6)
        assert not v.passed and v.code == "unwritten_output" and "9 elements" in v.message
        # a conjugate view: its memory is what was written (poisoned and counted there, not in a copy)
        stored = torch.empty(4, dtype=dtype)
        view = stored.conj()
        assert poison(view) and count_poisoned(view) == 4
        stored.real[:] = 1.0
        assert count_poisoned(view) == 4 and count_poisoned(stored) == 4
        stored.imag[:] = 2.0
        assert count_poisoned(view) == 0
    # a negated view of a real part (a candidate returning y.conj().imag; contiguous where y holds one
    # element): read in its memory, not refused by .view (which raised before)
    stored = torch.empty(1, dtype=torch.complex64)
    negated = stored.conj().imag
    assert negated.is_neg() and negated.is_contiguous()
    assert poison(negated) and count_poisoned(negated) == 1
    assert compare_allclose([torch.zeros(1)], [negated], 1e-4, 1e-4).code == "unwritten_output"
    stored.imag[:] = 1.0
    assert count_poisoned(negated) == 0


def test_complex_outputs_get_kernelbench_tolerance_on_their_modulus():
    """allclose reads a complex difference by its modulus: an answer off by half the tolerance of
    each entry's modulus, all of it in the imaginary part (where that part is near zero and the
    real one large, far beyond the tolerance of the part itself), passes at 1e-4."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=g) * 100
    exact = torch.fft.rfft(x.double())
    ref = exact.to(torch.complex64)
    off = (exact + 1j * 0.5e-4 * exact.abs()).to(torch.complex64)
    near_zero = (exact.imag.abs() < 1e-3 * exact.real.abs()) & (exact.abs() > 10)
    assert bool(near_zero.any())  # entries whose imaginary part alone would fail at 1e-4
    assert compare_allclose([ref], [off], 1e-4, 1e-4).passed
    v = compare_allclose([ref], [ref * (1 + 1e-3)], 1e-4, 1e-4)
    assert not v.passed and v.max_abs_err > 0


def test_float64_errors_skip_the_references_overflow_slice_by_slice_as_a_masked_copy_would(monkeypatch):
    """The error bounds skip entries where the reference in its own dtype is not finite. They mask
    slice by slice (no float64 copy of a whole multi-GiB output): the errors, counts and verdicts
    equal those of the whole reference masked to NaN there first."""
    import loopwise.kernels.evaluate.compare as cmp

    g = torch.Generator().manual_seed(1)
    ref64 = torch.randn(5, 300, generator=g, dtype=torch.float64)
    ref = ref64.float()
    ref[1, 17] = float("inf")
    ref[4, 299] = float("nan")
    cand = ref + 1e-3 * torch.randn(5, 300, generator=g)
    masked = torch.where(torch.isfinite(ref), ref64, torch.full((), float("nan"), dtype=torch.float64))
    for chunk in (cmp.CHUNK, 128):  # (the same slices both ways: the sums are then bit for bit the same)
        monkeypatch.setattr(cmp, "CHUNK", chunk)
        whole = (cmp.normwise_error(cand, masked), cmp._errors(cand, masked, 1e-4),
                 cmp._fp32_errors(cand, masked, 1e-4, 1e-3))
        assert cmp.normwise_error(cand, ref64, ref) == whole[0]
        assert cmp._errors(cand, ref64, 1e-4, ref) == whole[1]
        assert cmp._fp32_errors(cand, ref64, 1e-4, 1e-3, ref) == whole[2]


def test_the_largest_difference_of_two_outputs_is_found_slice_by_slice(monkeypatch):
    """Two calls' outputs compared for the determinism note: the largest difference, NaN where a
    difference is NaN, as over the whole tensors in float64."""
    import loopwise.kernels.evaluate.compare as cmp

    monkeypatch.setattr(cmp, "CHUNK", 64)
    a = torch.randn(7, 100)
    b = a.clone()
    b[6, 99] += 0.25
    assert cmp.largest_difference(a, b) == float((a.double() - b.double()).abs().max())
    b[0, 0] = float("nan")
    assert cmp.largest_difference(a, b) != cmp.largest_difference(a, b)  # NaN, as torch's max gives
