"""The MoE benchmark's problems: the reference loop over experts is the MoE block a dense
formulation computes, for every routing pattern, duplicate routes counted twice, forward and
backward; the files load as KernelBench problems."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from loopwise.kernels.problem import load_problem

MOE = Path(__file__).parents[2] / "loopwise" / "kernels" / "examples" / "moe"
PATTERNS = ("uniform", "skewed", "duplicate", "single")


def _module(name):
    if name.endswith("_triton"):  # a candidate, not a problem
        import importlib.util

        spec = importlib.util.spec_from_file_location(name, MOE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load_problem(str(MOE / f"{name}.py")).load_module()


def _dense(model, x, ids, weights):
    """Every expert on every token, then each token's k outputs weighted: no gather, no loop."""
    gu, down = model.gate_up.float(), model.down.float()
    gate, up = torch.einsum("th,ehf->etf", x.float(), gu).chunk(2, dim=-1)
    y = torch.einsum("etf,efh->eth", F.silu(gate) * up, down)          # [E, T, H]
    picked = y[ids, torch.arange(x.shape[0])[:, None]]                  # [T, k, H]
    return (picked * weights[..., None]).sum(dim=1)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_routes_have_the_shape_and_structure_of_their_pattern(pattern):
    m = _module("moe_forward")
    torch.manual_seed(3)
    ids, weights = m.routes(tokens=64, experts=16, top_k=4, pattern=pattern)
    assert ids.shape == weights.shape == (64, 4) and ids.dtype == torch.int64
    assert torch.allclose(weights.sum(dim=1), torch.ones(64)) and int(ids.min()) >= 0 and int(ids.max()) < 16
    if pattern == "duplicate":
        assert torch.equal(ids[:, 0], ids[:, 1])
    if pattern == "single":
        assert ids.unique().numel() == 1
    if pattern == "skewed":
        assert ids.unique().numel() <= max(4, 16 // 8)  # the hot experts only
    if pattern == "uniform":
        assert all(row.unique().numel() == 4 for row in ids)  # k distinct experts per token


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_reference_loop_is_the_dense_moe_block(pattern):
    m = _module("moe_forward")
    torch.manual_seed(5)
    model = m.Model(hidden=32, intermediate=16, experts=8)
    ids, weights = m.routes(tokens=48, experts=8, top_k=3, pattern=pattern)
    x = torch.randn(48, 32).to(torch.bfloat16)
    out = model(x, ids, weights)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    torch.testing.assert_close(out.float(), _dense(model, x, ids, weights), atol=3e-2, rtol=3e-2)


def test_forward_backward_gives_the_dense_blocks_gradients():
    m = _module("moe_forward_backward")
    torch.manual_seed(7)
    model = m.Model(hidden=32, intermediate=16, experts=8)
    ids, weights = m.routes(tokens=40, experts=8, top_k=3, pattern="duplicate")
    x, g = torch.randn(40, 32).to(torch.bfloat16), torch.randn(40, 32).to(torch.bfloat16)
    out, dx, dgu, dd = model(x, ids, weights, g)
    xr = x.float().requires_grad_(True)
    gu = model.gate_up.detach().float().requires_grad_(True)
    down = model.down.detach().float().requires_grad_(True)
    ref = _dense(type("W", (), {"gate_up": gu, "down": down})(), xr, ids, weights)
    rdx, rdgu, rdd = torch.autograd.grad(ref, (xr, gu, down), g.float())
    torch.testing.assert_close(out.float(), ref.detach(), atol=3e-2, rtol=3e-2)
    for got, want in ((dx, rdx), (dgu, rdgu), (dd, rdd)):
        assert got.dtype == torch.bfloat16
        torch.testing.assert_close(got.float(), want, atol=5e-2, rtol=5e-2)
    assert model.gate_up.grad is None  # gradients are returned, not left on the parameters


@pytest.mark.parametrize("name", ["moe_forward", "moe_forward_backward"])
def test_the_problems_load_as_kernelbench_problems(name):
    problem = load_problem(str(MOE / f"{name}.py"))
    assert problem.name == name
    sig = problem.signature
    assert sig.input_shapes[:3] == ((4096, 2048), (4096, 8), (4096, 8))
    assert sig.input_dtypes[:3] == ("bfloat16", "int64", "float32")


INTERPRETED = """
import importlib.util, json, sys, torch
def load(name):
    spec = importlib.util.spec_from_file_location(name, sys.argv[1] + "/" + name + ".py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
m, cand = load("moe_forward"), load("moe_forward_triton")
errors = {}
for pattern in ("uniform", "skewed", "duplicate", "single"):
    torch.manual_seed(11)
    ids, weights = m.routes(tokens=96, experts=8, top_k=3, pattern=pattern)
    model, new = m.Model(hidden=128, intermediate=64, experts=8), cand.ModelNew(hidden=128, intermediate=64, experts=8)
    assert torch.equal(model.gate_up, new.gate_up) and torch.equal(model.down, new.down)
    model.float(), new.float()
    x = torch.randn(96, 128)
    want = model(x, ids, weights)
    errors[pattern] = float((new(x, ids, weights) - want).abs().max() / want.abs().max())
mb, candb = load("moe_forward_backward"), load("moe_forward_backward_triton")
for pattern in ("uniform", "skewed", "duplicate", "single"):
    torch.manual_seed(11)
    ids, weights = mb.routes(tokens=96, experts=8, top_k=3, pattern=pattern)
    model, new = mb.Model(hidden=128, intermediate=64, experts=8), candb.ModelNew(hidden=128, intermediate=64, experts=8)
    model.float(), new.float()
    x, g = torch.randn(96, 128), torch.randn(96, 128)
    for i, (got, want) in enumerate(zip(new(x, ids, weights, g), model(x, ids, weights, g))):
        errors[f"{pattern} backward {i}"] = float((got - want).abs().max() / want.abs().max())
print(json.dumps(errors))
"""


@pytest.mark.slow
def test_the_triton_candidates_match_the_references_on_every_routing_pattern(tmp_path):
    """The Triton candidates' sorted-route grouped GEMMs (forward; forward and backward), run by Triton's interpreter on CPU in fp32
    (its own process: TRITON_INTERPRET must be set before triton is imported; the interpreter's bf16
    is not faithful, the GPU judges the bf16 problem itself): every route pattern, duplicate routes
    counting twice."""
    import json
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", INTERPRETED, str(MOE)], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(errors) == 5 * len(PATTERNS) and max(errors.values()) < 1e-5, errors  # forward; out, dx, dW, dD


def _proxy():
    from bench_modules import bench_module

    return bench_module("moe_backward_rounding_proxy")


def test_the_proxys_hooked_reference_is_the_problems_model():
    """bench/moe_backward_rounding_proxy.py's copy of the reference loop (hooks on each gather, one
    weight leaf per expert) gives the problem's Model's four outputs bit for bit."""
    proxy, m = _proxy(), _module("moe_forward_backward")
    torch.manual_seed(4)
    model = m.Model(hidden=64, intermediate=32, experts=8)
    ids, weights = m.routes(tokens=40, experts=8, top_k=4, pattern="duplicate")
    x, g = torch.randn(40, 64).to(torch.bfloat16), torch.randn(40, 64).to(torch.bfloat16)
    ref = proxy.reference(model, x, ids, weights, g)
    with torch.no_grad():
        for name, want in zip(("out", "dx", "d_gate_up", "d_down"), model(x, ids, weights, g)):
            assert torch.equal(ref[name], want), name


@pytest.mark.parametrize("pattern", PATTERNS)
def test_the_reference_sums_dx_in_bf16_experts_descending(pattern):
    """The order the reference's autograd adds d x in: given its own per-route pieces, adding a
    token's routes one by one in bf16, experts descending (a token's routes to one expert first,
    slots ascending), reproduces its d x bit for bit; one fp32 sum rounded once (the candidate
    before) and experts ascending do not (with several experts per token)."""
    proxy, m = _proxy(), _module("moe_forward_backward")
    torch.manual_seed(6)
    model = m.Model(hidden=64, intermediate=32, experts=8)
    ids, weights = m.routes(tokens=64, experts=8, top_k=6, pattern=pattern)
    x, g = torch.randn(64, 64).to(torch.bfloat16), torch.randn(64, 64).to(torch.bfloat16)
    ref = proxy.reference(model, x, ids, weights, g)
    assert torch.equal(proxy.sum_routes(ref["pieces"], ids, "desc"), ref["dx"])
    assert not torch.equal(proxy.sum_routes(ref["pieces"], ids, "fp32"), ref["dx"])
    if pattern != "single":
        assert not torch.equal(proxy.sum_routes(ref["pieces"], ids, "asc"), ref["dx"])


def test_the_backward_candidate_orders_a_tokens_routes_as_autograd_does():
    cand = _module("moe_forward_backward_triton")
    ids = torch.tensor([[3, 7, 3, 0], [5, 5, 5, 5], [0, 1, 2, 3]])
    order, expert = cand.autograd_order(ids, 8)
    assert order.tolist() == [[1, 0, 2, 3], [0, 1, 2, 3], [3, 2, 1, 0]]
    assert expert.tolist() == [[7, 3, 3, 0], [5, 5, 5, 5], [3, 2, 1, 0]]
    assert order.dtype == expert.dtype == torch.int32


SUM_ROUTES = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])
from bench_modules import bench_module
proxy = bench_module("moe_backward_rounding_proxy")
m, cand = proxy.load("moe_forward_backward"), proxy.load("moe_forward_backward_triton")
differ = {}
for pattern in ("uniform", "skewed", "duplicate", "single"):
    torch.manual_seed(3)
    model = m.Model(hidden=128, intermediate=64, experts=8)
    ids, weights = m.routes(tokens=48, experts=8, top_k=6, pattern=pattern)
    x, g = torch.randn(48, 128).to(torch.bfloat16), torch.randn(48, 128).to(torch.bfloat16)
    ref = proxy.reference(model, x, ids, weights, g)
    got = cand.sum_routes(ref["pieces"], ids, 8)
    old = ref["pieces"].float().view(48, 6, 128).sum(dim=1).to(torch.bfloat16)
    differ[pattern] = [int((got != ref["dx"]).sum()), int((old != ref["dx"]).sum()), str(got.dtype)]
print(json.dumps(differ))
"""


def test_the_backward_candidate_sums_dx_bit_for_bit_as_the_reference(tmp_path):
    """The forward+backward candidate's d x step (``_sum_routes``, run by Triton's interpreter in
    bf16: it only loads, adds and rounds, which it rounds to nearest even on the bits, so the
    interpreter's truncating casts do not enter) turns the reference's own per-route pieces into
    the reference's d x exactly, on every routing pattern; the fp32 sum the candidate made before
    (the H200's 8 failing elements) differs from it in thousands of bits."""
    import json
    import os
    import subprocess
    import sys

    tests = Path(__file__).parent
    done = subprocess.run([sys.executable, "-c", SUM_ROUTES, str(MOE), str(tests)], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    differ = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(differ) == set(PATTERNS)
    for pattern, (new, old, dtype) in differ.items():
        assert dtype == "torch.bfloat16" and new == 0 and old > 100, (pattern, new, old)


def test_route_blocks_cover_every_route_once():
    cand = _module("moe_forward_triton")
    torch.manual_seed(2)
    ids = torch.randint(0, 16, (200, 4))
    pair, token, expert, row, rows, n_blocks, upper = cand.route_blocks(ids, 16, 32)
    used = int(n_blocks)
    assert used <= upper and int(rows[used:].sum()) == 0 or used == upper
    covered = torch.cat([torch.arange(int(r), int(r) + int(n)) for r, n in zip(row[:used], rows[:used])])
    assert torch.equal(covered, torch.arange(ids.numel()))  # each sorted row in exactly one block
    flat = ids.reshape(-1)
    for r, n, e in zip(row[:used], rows[:used], expert[:used]):
        assert bool((flat[pair[int(r):int(r) + int(n)].long()] == e).all())  # one expert per block
    assert torch.equal(token.long(), pair.long() // 4)


def test_the_triton_candidates_kernels_compile_for_hopper_in_bf16_on_the_tensor_cores(tmp_path):
    """Ahead of time, for sm_90 (no GPU needed): both grouped GEMMs compile in bf16 with the Qwen3
    sizes, and their SASS multiplies on the tensor cores with bf16 operands."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from loopwise.kernels.profile.sass_tools import ToolNotFoundError, profile_cubin

    cand = _module("moe_forward_triton")
    blocks = {"block_expert_ptr": "*i32", "block_row_ptr": "*i32", "block_rows_ptr": "*i32", "n_blocks_ptr": "*i32"}
    consts = {"H": 2048, "F": 768, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    signatures = {
        "_gate_up": {"x_ptr": "*bf16", "w_ptr": "*bf16", "act_ptr": "*bf16", "token_ptr": "*i32", **blocks},
        "_down": {"act_ptr": "*bf16", "w_ptr": "*bf16", "out_ptr": "*fp32", "pair_ptr": "*i32", "weight_ptr": "*fp32",
                  **blocks},
    }
    for name, signature in signatures.items():
        compiled = triton.compile(ASTSource(getattr(cand, name), {**signature, **{k: "constexpr" for k in consts}},
                                            consts), target=GPUTarget("cuda", 90, 32))
        cubin = tmp_path / f"{name}.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        try:
            (kernel,) = profile_cubin(cubin).kernels
        except ToolNotFoundError:
            continue
        assert kernel.tensor_core_inputs.get("BF16", 0) > 0, kernel.tensor_core


def test_the_backward_candidates_kernels_compile_for_hopper_in_bf16(tmp_path):
    """Every flavour of the forward+backward candidate's two kernels compiles ahead of time for sm_90 in bf16."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cand = _module("moe_forward_backward_triton")
    blocks = {"block_expert_ptr": "*i32", "block_row_ptr": "*i32", "block_rows_ptr": "*i32", "n_blocks_ptr": "*i32"}
    tiles = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    rows = [  # (c dtype, K, N, strides, gather, scatter, scale A, scale C, round): gate_up, down, d act, d x
        ("bf16", 2048, 1536, (2048 * 1536, 1536, 1), True, False, False, False, False),
        ("fp32", 768, 2048, (768 * 2048, 2048, 1), False, True, False, True, True),
        ("bf16", 2048, 768, (768 * 2048, 1, 2048), True, False, True, False, False),
        ("bf16", 1536, 2048, (2048 * 1536, 1, 1536), False, True, False, False, False),
    ]
    for c, k, n, (sbe, sbk, sbn), gather, scatter, scale_a, scale_c, round_acc in rows:
        consts = {"K": k, "N": n, "SBE": sbe, "SBK": sbk, "SBN": sbn, "GATHER_A": gather, "SCATTER_C": scatter,
                  "SCALE_A": scale_a, "SCALE_C": scale_c, "ROUND": round_acc, **tiles}
        sig = {"a_ptr": "*bf16", "a_index_ptr": "*i32", "b_ptr": "*bf16", "c_ptr": f"*{c}", "c_index_ptr": "*i32",
               "scale_ptr": "*fp32", "pair_ptr": "*i32", **blocks, **{key: "constexpr" for key in consts}}
        compiled = triton.compile(ASTSource(cand._rows_mm, sig, consts), target=GPUTarget("cuda", 90, 32))
        assert len(compiled.asm["cubin"]) > 1000
    for m, n, gather_a, gather_b, scale in ((768, 2048, False, True, True), (2048, 1536, True, False, False)):
        consts = {"M": m, "N": n, "GATHER_A": gather_a, "GATHER_B": gather_b, "SCALE_B": scale, **tiles}
        sig = {"a_ptr": "*bf16", "a_index_ptr": "*i32", "b_ptr": "*bf16", "b_index_ptr": "*i32", "scale_ptr": "*fp32",
               "pair_ptr": "*i32", "c_ptr": "*bf16", "starts_ptr": "*i32", "counts_ptr": "*i32",
               **{key: "constexpr" for key in consts}}
        compiled = triton.compile(ASTSource(cand._expert_outer, sig, consts), target=GPUTarget("cuda", 90, 32))
        assert len(compiled.asm["cubin"]) > 1000
    consts = {"H": 2048, "K": 8, "BLOCK_H": 1024}
    sig = {"piece_ptr": "*bf16", "order_ptr": "*i32", "expert_ptr": "*i32", "out_ptr": "*bf16",
           **{key: "constexpr" for key in consts}}
    compiled = triton.compile(ASTSource(cand._sum_routes, sig, consts), target=GPUTarget("cuda", 90, 32))
    assert len(compiled.asm["cubin"]) > 1000


def test_the_moe_table_script_makes_its_variants_and_pinned_problems(tmp_path):
    """bench/moe_table.py's pieces that need no GPU: every tile variant of both candidates and the
    VeOmni candidates parse, and each routing pattern's pinned problem loads and draws that pattern."""
    import ast

    from bench_modules import bench_module

    table = bench_module("moe_table")
    for _, candidate in table.PROBLEMS.values():
        source = (MOE / candidate).read_text()
        variants = {table.with_tiles(source, tiles) for tiles in table.TILES}
        assert len(variants) == len(table.TILES)
        for variant in variants:
            ast.parse(variant)
    for contender, (module, function) in table.VEOMNI_FUNCTIONS.items():
        for backward in (False, True):
            text = table.veomni_source(contender, backward)
            ast.parse(text)
            assert f'"veomni.ops.kernels.moe.{module}"' in text and f").{function}" in text
            assert ("grad_out" in text) == backward
    source = (MOE / "moe_forward.py").read_text()
    for pattern in table.PATTERNS:
        path = tmp_path / f"moe_{pattern}.py"
        path.write_text(table.pinned(source, pattern))
        module = load_problem(str(path)).load_module()
        torch.manual_seed(0)
        _, ids, _ = module.get_inputs()
        if pattern == "duplicate":
            assert torch.equal(ids[:, 0], ids[:, 1])
        if pattern == "single":
            assert ids.unique().numel() == 1


def test_the_moe_table_puts_each_pattern_on_its_own_row_and_compares_where_both_are_correct():
    """bench/moe_table.py's arithmetic on made-up rows: the pinned rows give the random-pattern rows
    their correct patterns, ours over VeOmni is VeOmni's ms over ours on each pattern both got
    right (none where one is wrong), and the markdown has both tables."""
    from types import SimpleNamespace

    from bench_modules import bench_module

    table = bench_module("moe_table")
    source = (MOE / "moe_forward_backward_triton.py").read_text()

    def ev(status, ms=None, eager=None):
        correct = status == "correct"
        return SimpleNamespace(status=SimpleNamespace(value=status), correct=correct,
                               timing=SimpleNamespace(median_ms=ms) if ms else None,
                               reference_timing=SimpleNamespace(median_ms=eager) if correct and eager else None,
                               speedup=eager / ms if correct and eager and ms else None,
                               rejections=[] if correct else [SimpleNamespace(code="wrong_output", message="output 2")])

    rows = [{"problem": "fb", "contender": "torch.compile", "variant": "default", "pattern": "random",
             "status": "ok", "ms": 200.0, "speedup_vs_eager": 0.98, "compile_ms": 200.0}]
    rows += [table.row("fb", "ours", "64x64x64", ev("wrong_output"), 5, 1.0),
             table.row("fb", "ours", "64x128x32", ev("wrong_output"), 5, 1.0),
             table.row("fb", "veomni", "TritonFusedMoeExpertFunction", ev("correct", 8.0, 196.0), 0, 1.0)]
    variant, text = table.pattern_variant(rows, "fb", source)
    assert variant == "64x64x64 (as written)" and text == source  # no tile shape correct: as written
    rows[2].update(status="correct", speedup_vs_eager=40.0)
    variant, text = table.pattern_variant(rows, "fb", source)
    assert variant == "64x128x32" and "BLOCK_M, BLOCK_N, BLOCK_K = 64, 128, 32" in text
    for pattern, ours, theirs in (("uniform", 4.0, 8.0), ("single", 2.0, None), ("skewed", None, 6.0)):
        rows.append(table.row("fb", "ours", variant, ev("correct", ours, 190.0) if ours else ev("wrong_output"),
                              5, 1.0, pattern, eager_ms=190.0))
        rows.append(table.row("fb", "veomni", "TritonFusedMoeExpertFunction",
                              ev("correct", theirs, 190.0) if theirs else ev("wrong_output"), 0, 1.0, pattern, 190.0))
    for r in rows:
        r.setdefault("compile_ms", 200.0)
    table.annotate(rows)
    by = {(r["contender"], r["pattern"]): r for r in rows if r["pattern"] != "random"}
    assert by["ours", "uniform"]["vs_veomni"] == 2.0
    assert "vs_veomni" not in by["ours", "single"] and "vs_veomni" not in by["ours", "skewed"]
    assert by["ours", "skewed"]["ms"] is None and by["ours", "skewed"]["eager_ms"] == 190.0
    assert rows[2]["patterns_correct"] == "uniform,single" and rows[3]["patterns_correct"] == "uniform,skewed"
    assert "patterns_correct" not in rows[1]
    md = table.summary(rows)
    assert md.count("\n| fb | ") == 4 + 6 and "| fb | uniform | ours | 64x128x32 | correct | 4.000 | 190.000 | 47.50x | 50.00x | 2.00x | - |" in md
    assert "| fb | single | veomni | TritonFusedMoeExpertFunction | wrong_output (wrong_output: output 2) | - |" in md


def test_the_moe_table_says_why_veomnis_cute_dsl_path_did_not_run_and_compares_with_it_where_it_did(monkeypatch):
    """Where quack-kernels / nvidia-cutlass-dsl do not import, the contender is a row saying so (not a
    crash, not a silent gap); where it ran, ours over it is its ms over ours per pattern, in a column
    of its own beside ours over VeOmni's Triton path."""
    import importlib.util
    from types import SimpleNamespace

    from bench_modules import bench_module

    table = bench_module("moe_table")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("quack", "cutlass") else real(name, *a))
    why = table.unavailable("veomni-quack")
    assert "quack-kernels" in why and "nvidia-cutlass-dsl" in why and "split_wheels.sh quack" in why
    assert table.unavailable("veomni") is None

    def ev(ms):
        return SimpleNamespace(status=SimpleNamespace(value="correct"), correct=True,
                               timing=SimpleNamespace(median_ms=ms), reference_timing=SimpleNamespace(median_ms=20.0),
                               speedup=20.0 / ms, rejections=[])

    rows = [{"problem": "f", "contender": "veomni-quack", "variant": "QuackFusedMoeExpertFunction", "pattern": "random",
             "status": "unavailable", "reason": why, "budget": 0, "seconds": 0.0}]
    rows += [table.row("f", "ours", "64x128x32", ev(1.5), 5, 1.0, "uniform"),
             table.row("f", "veomni", "TritonFusedMoeExpertFunction", ev(2.0), 0, 1.0, "uniform"),
             table.row("f", "veomni-quack", "QuackFusedMoeExpertFunction", ev(1.2), 0, 1.0, "uniform")]
    for r in rows:
        r["compile_ms"] = 30.0
    table.annotate(rows)
    assert abs(rows[1]["vs_veomni"] - 2.0 / 1.5) < 1e-9 and abs(rows[1]["vs_veomni_quack"] - 0.8) < 1e-9
    md = table.summary(rows)
    assert f"| f | veomni-quack | QuackFusedMoeExpertFunction | unavailable ({why[:120]}) | - |" in md
    assert "| ours vs VeOmni | ours vs VeOmni quack |" in md and "| 1.33x | 0.80x |" in md
