"""A standalone ``ModelNew`` from Inductor's module for a problem (an :class:`InductorRecord`).

The file holds Inductor's ``call(args)`` and what it reads, unchanged but for three things:

- each Triton kernel is the record's ``@triton.jit`` function, renamed ``seed_*`` (it is the
  candidate's own kernel now) and launched through :class:`_Launch` as any Triton kernel is
  (``kernel[grid](...)``), with the grid from Inductor's rule for it and the block sizes and warps
  of the configuration: the autotuner's choice, or another one (the moves);
- the compiler's asynchronous-compile machinery and its benchmark harness are left out;
- device helpers (``empty_strided_cuda``, the device guard, the raw stream) allocate on the
  device of the inputs, so the same file runs on CPU under ``TRITON_INTERPRET=1``.

``ModelNew`` runs the reference's ``__init__`` (copied, see
:func:`~loopwise.kernels.expert.reference_init.reference_init`) and passes ``call`` its own
parameters and buffers and the forward's arguments in the graph's order. Library calls
(``extern_kernels.mm``, ``aten.*`` fallbacks) stay library calls, and the file's note says which.

Moves (:data:`SPACE`): ``block`` shifts every kernel's X/Y block sizes (and a looped reduction's
R0 block) by a power of two, ``warps`` its warps, ``cudagraph`` replays the whole forward from a
CUDA graph, ``gemm`` launches the library GEMMs as Triton GEMMs of the expert's form and ``conv``
the library convolutions as implicit-GEMM Triton convolutions (1) or as CUTLASS's implicit-GEMM
convolutions read back by a Triton kernel (2: every one CUTLASS runs, :func:`gemm.cutlass_unfit`;
3: those where it is likely faster, :func:`gemm.cutlass_site_pays`; the others stay the
library's), each with the pointwise kernel that alone reads its output fused as its epilogue (or
its read-back) where there is one
(:mod:`~loopwise.kernels.expert.inductor.gemm`; each offered only where the record has such a call),
and ``gemm_tile`` picks their tile and stages (:data:`gemm.TILE_VARIANTS`; with one of the two only).
Where Inductor's code launches no Triton kernel of its own (a lone product or convolution: cuBLAS or
cuDNN only), the seed is written with those moves only (:func:`library_moves`).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import re

from loopwise.kernels.expert import cutlass_conv
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.inductor import calls, gemm
from loopwise.kernels.expert.inductor.extract import InductorRecord, KernelRecord, library_calls

SPACE = {"block": [-1, 0, 1], "warps": [-1, 0, 1], "cudagraph": [0, 1], "gemm": [0, 1], "gemm_tile": list(gemm.TILE_VARIANTS),
         "conv": [0, 1, 2, 3]}
DEFAULTS = {"block": 0, "warps": 0, "cudagraph": 0, "gemm": 0, "gemm_tile": 0, "conv": 0}
_SHIFTED = ("XBLOCK", "YBLOCK", "ZBLOCK")
_MAX_BLOCK = 4096
_PERSISTENT = "PERSISTENT_REDUCTION"
# A kernel's scratch memory (a split scan's look-back partials), allocated by call() for the
# number of programs the autotuner's R0 block gives: a smaller R0 block would overrun it.
_WORKSPACE = "ws_ptr"
# Module-level statements of Inductor's module that belong to its compile machinery or harness.
_DROPPED_CALLS = ("async_compile", "AsyncCompile")
# Names the file defines itself (on the inputs' device); Inductor's imports of them are left out.
_PROVIDED = ("get_raw_stream", "empty_strided_cuda")
# Device calls in call() that the file answers with helpers of its own.
_DEVICE_CALLS = {("torch", "cuda", "_DeviceGuard"): "_device_guard", ("torch", "cuda", "set_device"): "_set_device"}


def seeded_name(name: str) -> str:
    return re.sub(r"^triton_", "seed_", name)


def module_body(record: InductorRecord) -> str:
    """Inductor's module without its compile machinery, its kernels' definitions, its harness and
    the imports nothing left reads (``ctypes``, ``tempfile``); device calls in ``call`` replaced by
    the file's helpers.

    Raises:
        Unsupported: a kernel the record does not hold (a C++ kernel, a kernel not launched).
    """
    tree = ast.parse(record.module)
    kept, known = [], {k.name for k in record.kernels}
    for stmt in tree.body:
        if _is_machinery(stmt):
            continue
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and _is_async_compile(stmt.value.func):
            names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
            missing = [n for n in names if n not in known]
            if missing:
                raise Unsupported(f"Inductor's kernel {missing[0]} is not a launched Triton kernel")
            continue
        kept.append(_DeviceCalls().visit(stmt))
    used = {n.id for s in kept if not isinstance(s, (ast.Import, ast.ImportFrom)) for n in ast.walk(s)
            if isinstance(n, ast.Name)}
    kept = [s for s in kept if not isinstance(s, (ast.Import, ast.ImportFrom))
            or any((a.asname or a.name).split(".")[0] in used for a in s.names)]  # imports nothing reads go
    return "\n".join(ast.unparse(s) for s in kept) + "\n"


def launch_config(kernel: KernelRecord, moves: dict) -> tuple[dict, int]:
    """The kernel's block sizes and warps under ``moves`` (the autotuner's where the grid rule is
    not symbolic, or the kernel is a persistent reduction for its R0 block)."""
    config, warps = dict(kernel.config), kernel.num_warps
    if not kernel.grid_symbolic:
        return config, warps
    shift = moves.get("block", 0)
    for name in _SHIFTED + (() if kernel.kind == _PERSISTENT else ("R0_BLOCK",)):
        if name == "R0_BLOCK" and shift < 0 and _WORKSPACE in kernel.arg_names:
            continue  # more programs along the row than call() sized the kernel's workspace for
        if name in config and shift:
            config[name] = max(1, min(_MAX_BLOCK, config[name] * 2 ** shift if shift > 0 else config[name] >> -shift))
    if moves.get("warps", 0):
        shift = moves["warps"]
        warps = max(1, min(32, warps * 2 ** shift if shift > 0 else warps >> -shift))
    return config, warps


def grid_function(kernel: KernelRecord) -> str:
    """``def _grid_<name>(...)``: the kernel's grid from the names its expressions read."""
    exprs = [kernel.grid.get(axis, "1") for axis in ("x", "y", "z")]
    read: list[str] = []
    for text in [*kernel.grid.get("prefix", []), *exprs]:
        for node in ast.walk(ast.parse(str(text))):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in read:
                read.append(node.id)
    assigned = {t.id for line in kernel.grid.get("prefix", []) for s in ast.parse(line).body
                if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}
    params = [n for n in read if n not in assigned and not hasattr(builtins, n)]
    allowed = set(kernel.arg_names) | set(kernel.config) | set(kernel.constants)
    unknown = [n for n in params if n not in allowed]
    if unknown:
        raise Unsupported(f"the grid of {kernel.name} reads {unknown[0]!r}, which is no argument of the kernel")
    lines = [f"def _grid_{seeded_name(kernel.name)}({', '.join(params + ['**_'])}):"]
    lines += [f"    {line}" for line in kernel.grid.get("prefix", [])]
    lines.append(f"    return ({exprs[0]}, {exprs[1]}, {exprs[2]})")
    return "\n".join(lines) + "\n"


def kernel_source(kernel: KernelRecord, helpers: dict[str, str] | None = None) -> str:
    """The kernel's ``@triton.jit`` function renamed ``seed_*``, after the helper functions its
    source string defines beside it (a scan's combine function), renamed ``seed_*__<helper>`` so
    that two kernels' helpers of one name stay apart."""
    src = kernel.src.strip("\n")
    if not re.match(rf"def\s+{re.escape(kernel.name)}\s*\(", src):
        raise Unsupported(f"the source recorded for {kernel.name} is not its function")
    own = seeded_name(kernel.name)
    texts = [*(helpers or {}).values(), src]
    for helper in helpers or {}:
        texts = [re.sub(rf"\b{re.escape(helper)}\b", f"{own}__{helper.lstrip('_')}", t) for t in texts]
    texts[-1] = re.sub(rf"^def\s+{re.escape(kernel.name)}\b", f"def {own}", texts[-1])
    return "\n\n".join("@triton.jit\n" + t.strip("\n") for t in texts) + "\n"


def kernel_helpers(record: InductorRecord) -> dict[str, dict[str, str]]:
    """Per kernel, the other functions its source string in Inductor's module defines (name ->
    source without decorators), in their order."""
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(record.module)):
        if not (isinstance(node, ast.Call) and _is_async_compile(node.func) and len(node.args) >= 2
                and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args[:2])):
            continue
        name, text = node.args[0].value, node.args[1].value
        try:
            defs = [d for d in ast.parse(text).body if isinstance(d, ast.FunctionDef) and d.name != name]
        except SyntaxError:
            continue
        helpers = {}
        for d in defs:
            d.decorator_list = []
            helpers[d.name] = ast.unparse(d)
        out[name] = helpers
    return out


_HELD = re.compile(r"self\.get_(parameter|buffer)\('([^']*)'\)")


def argument_expressions(record: InductorRecord) -> tuple[list[str], list[str]]:
    """What ``ModelNew.forward`` passes ``call`` for each of its arguments, and the paths of the
    submodules that hold its parameters and buffers (``holders``, found once by the forward): a
    parameter is read as ``holders[i]._parameters[name]`` on every call, not through
    ``get_parameter``, whose walk of the path costs microseconds per argument and a network's
    forward passes hundreds."""
    out, holders = [], []
    for path in record.inputs:
        held = _HELD.fullmatch(path)
        if held:
            owner, _, name = held.group(2).rpartition(".")
            if owner not in holders:
                holders.append(owner)
            out.append(f"holders[{holders.index(owner)}]._{held.group(1)}s[{name!r}]")
        elif path.startswith("self"):
            out.append(path)
        elif path.startswith("arg:"):
            out.append(path[4:])
        else:
            raise Unsupported(f"cannot pass {path!r} to Inductor's call")
    return out, holders


def _is_async_compile(func) -> bool:
    return isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "async_compile"


def _is_machinery(stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return any(a.name in _DROPPED_CALLS or (a.asname or a.name) in _PROVIDED for a in stmt.names)
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        return isinstance(f, ast.Name) and f.id in _DROPPED_CALLS
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        return _is_async_compile(stmt.value.func)
    if isinstance(stmt, ast.Delete):
        return all(isinstance(t, ast.Name) and t.id in _DROPPED_CALLS for t in stmt.targets)
    if isinstance(stmt, ast.FunctionDef):
        return stmt.name in ("benchmark_compiled_module", "get_args")
    if isinstance(stmt, ast.If):
        test = ast.unparse(stmt.test)
        return "__name__" in test and "__main__" in test
    return False


class _DeviceCalls(ast.NodeTransformer):
    def visit_Attribute(self, node):
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name):
            chain.append(value.id)
            replacement = _DEVICE_CALLS.get(tuple(reversed(chain)))
            if replacement:
                return ast.copy_location(ast.Name(id=replacement, ctx=ast.Load()), node)
        return self.generic_visit(node)


def forward_params(source: str) -> tuple[str, str]:
    """``Model.forward``'s parameter list (without self) as written, and the same names as a call."""
    tree = ast.parse(source)
    models = [s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model"]
    forwards = [s for s in (models[-1].body if models else []) if isinstance(s, ast.FunctionDef) and s.name == "forward"]
    if not forwards:
        raise Unsupported("Model has no forward written in its class body")
    args = forwards[-1].args
    if args.kwonlyargs or args.kwarg:
        raise Unsupported("Model.forward takes keyword-only arguments")
    args = ast.arguments(posonlyargs=[], args=(args.posonlyargs + args.args)[1:], vararg=args.vararg,
                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=args.defaults)
    names = [a.arg for a in args.args] + ([f"*{args.vararg.arg}"] if args.vararg else [])
    return ast.unparse(args), ", ".join(names)


def written_positions(record: InductorRecord, call_params: str) -> list[int]:
    """The positions, among the forward's arguments as ModelNew passes them on (``call_params``:
    ``x, y, *args``), of those a Triton kernel of Inductor's ``call`` stores into."""
    named = [n.strip() for n in call_params.split(",") if n.strip() and not n.strip().startswith("*")]
    vararg = next((n.strip()[1:] for n in call_params.split(",") if n.strip().startswith("*")), None)
    out = []
    for path in calls.written_inputs(record):
        name = path[4:] if path.startswith("arg:") else None
        if name in named:
            out.append(named.index(name))
        elif vararg and name and (found := re.fullmatch(rf"{re.escape(vararg)}\[(\d+)\]", name)):
            out.append(len(named) + int(found.group(1)))
    return sorted(out)


def render_seed(record: InductorRecord, problem, moves: dict | None = None, precision: str = "fp32") -> str:
    """The ``ModelNew`` file for ``problem`` from Inductor's ``record`` under ``moves`` (SPACE).

    Raises:
        Unsupported: the record or the problem cannot be written out (the reason says why).
    """
    from loopwise.kernels.expert.generate import _templates
    from loopwise.kernels.expert.reference_init import reference_init

    moves = {**DEFAULTS, **{k: v for k, v in (moves or {}).items() if k != "template"}}
    sites = chosen_sites(record, moves, precision)
    if moves["gemm_tile"] and not (moves["gemm"] or moves["conv"]):
        raise Unsupported("the gemm_tile move picks the tile of the gemm or conv move's kernels; it needs the gemm or conv move")
    if moves["gemm"] and not any(s.op != gemm.CONVOLUTION for s in sites):
        raise Unsupported("the gemm move has no library GEMM to replace in Inductor's code for this problem"
                          + (" (its half-precision products feed an argmin, a top-k or a sort, which another "
                             "summation order would flip at near-ties)" if gemm.held_back(record) else ""))
    if moves["conv"] and not any(s.op == gemm.CONVOLUTION for s in sites):
        raise Unsupported("the conv move has no library convolution to replace in Inductor's code for this problem"
                          + {2: " that CUTLASS runs", 3: f" that CUTLASS likely runs faster under the {precision} policy"}
                          .get(moves["conv"], ""))
    if not record.kernels and not sites:
        raise Unsupported("Inductor's code for this problem launches no Triton kernel of its own "
                          f"(library calls only: {', '.join(library_calls(record.module)) or 'none'})")
    arguments, holders = argument_expressions(record)
    init = reference_init(problem.source, problem.load_module())
    params, call_params = forward_params(problem.source)
    kernels, helpers = [], kernel_helpers(record)
    fused = {s.fused.name for s in sites if s.fused is not None}
    written = dataclasses.replace(record, module=gemm.rewrite(record, sites)) if sites else record
    for k in record.kernels:
        if k.name in fused:
            continue
        config, warps = launch_config(k, moves)
        kernels.append({"name": k.name, "seeded": seeded_name(k.name), "source": kernel_source(k, helpers.get(k.name)),
                        "grid": grid_function(k), "arg_names": k.arg_names, "config": config,
                        "constants": k.constants, "num_warps": warps, "num_stages": k.num_stages})
    note = (f"inductor: block {moves['block']}, warps {moves['warps']}, cudagraph {moves['cudagraph']}, "
            f"gemm {moves['gemm']}" + (f", gemm tile {moves['gemm_tile']}" if moves["gemm_tile"] else "")
            + (f", conv {moves['conv']}" if moves["conv"] else ""))
    return _templates().get_template("inductor.py.j2").render(
        note=note, torch_version=record.torch, device_name=record.device_name or "this device",
        library_only=library_only(record),
        kernels=kernels, extern=library_calls(written.module), relaxed=precision == "relaxed", block=moves["block"],
        gemms=[{"source": gemm.kernel_source(s, precision, moves["gemm_tile"]),
                "summary": s.summary(precision, moves["gemm_tile"]),
                # the fp32 GEMMs copy operands that are not K-major and aligned (_aligned_k_major)
                "aligns": s.dtype == "float32" and s.op != gemm.CONVOLUTION} for s in sites],
        cutlass_sources=_cutlass_sources(sites, precision, moves["gemm_tile"]),
        cutlass_glue=cutlass_conv.GLUE, cutlass_declaration=cutlass_conv.DECLARATION,
        warps=moves["warps"], cudagraph=moves["cudagraph"], body=module_body(written),
        constants=init.constants, helpers=init.helpers, init=init.text, params=params, call_params=call_params,
        arguments=arguments, holders=holders, outputs=record.outputs, writes=written_positions(written, call_params))


def _cutlass_sources(sites: list[gemm.Site], precision: str, variant: int) -> dict[str, str]:
    """Extension name -> CUDA source of the CUTLASS convolutions among ``sites``, each rendered once
    however many sites share it."""
    sources: dict[str, str] = {}
    for s in sites:
        name = gemm.cutlass_extension(s, precision, variant) if s.cutlass else None
        if name and name not in sources:
            sources[name] = gemm.cutlass_source(s, precision, variant)
    return sources


def parse_note(source: str) -> dict | None:
    """The moves of a file :func:`render_seed` wrote, from its first line; None for any other file."""
    found = re.match(r'\s*"""inductor: block (-?\d+), warps (-?\d+), cudagraph (\d)(?:, gemm (\d))?(?:, gemm tile (\d))?'
                     r'(?:, conv (\d))?', source or "")
    if not found:
        return None
    return {"template": "inductor", "block": int(found.group(1)), "warps": int(found.group(2)),
            "cudagraph": int(found.group(3)), "gemm": int(found.group(4) or 0), "gemm_tile": int(found.group(5) or 0),
            "conv": int(found.group(6) or 0)}


def library_only(record: InductorRecord) -> bool:
    """Whether Inductor's code launches no Triton kernel of its own: written out as it is, it would
    only re-call PyTorch's libraries; only the ``gemm`` move makes it a candidate (where its calls
    are GEMMs the move replaces)."""
    return not record.kernels


def chosen_sites(record: InductorRecord, moves: dict, precision: str = "fp32") -> list[gemm.Site]:
    """The library calls ``moves`` replace: the GEMMs under ``gemm``, the convolutions under
    ``conv`` (under 2 and 3 those of CUTLASS's form, see the module's note), in call() order and
    numbered so."""
    if not (moves.get("gemm") or moves.get("conv")):
        return []  # (no walk of call() for a seed without them)
    picked = []
    for s in gemm.find_sites(record):
        if s.op != gemm.CONVOLUTION:
            if moves.get("gemm"):
                picked.append(s)
        elif moves.get("conv") in (2, 3):  # CUTLASS's where it runs them (and pays, 3), the library's elsewhere
            if not gemm.cutlass_unfit(s) and (moves["conv"] == 2 or gemm.cutlass_site_pays(s, precision)):
                picked.append(dataclasses.replace(s, cutlass=True))
        elif moves.get("conv") and gemm.triton_runs(s):
            picked.append(s)
    return [dataclasses.replace(s, index=i) for i, s in enumerate(picked)]


def library_moves(record: InductorRecord, precision: str = "fp32") -> dict:
    """The ``gemm`` / ``conv`` moves a seed of ``record`` takes by default: none, unless Inductor's
    code is library calls only (then each that has calls to replace, the seed's only form; the
    convolutions in CUTLASS's form where :func:`gemm.cutlass_pays`)."""
    if not library_only(record):
        return {"gemm": 0, "conv": 0}
    sites = gemm.find_sites(record)
    convolutions = [s.op == gemm.CONVOLUTION for s in sites]
    # the CUTLASS form where it pays (the rest stay the library's), else the Triton convolution
    conv = 3 if gemm.cutlass_pays(sites, precision) else int(any(map(gemm.triton_runs, sites)))
    return {"gemm": int(not all(convolutions)), "conv": conv}


def move_summary(record: InductorRecord, moves: dict, precision: str = "fp32") -> str:
    """What the ``gemm`` and ``conv`` moves of ``moves`` do to ``record``'s library calls ("" where
    they replace none), with the tile of its ``gemm_tile``."""
    return "; ".join(s.summary(precision, moves.get("gemm_tile", 0)) for s in chosen_sites(record, moves, precision))
