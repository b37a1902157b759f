"""The compiler seed's ``gemm`` and ``conv`` moves: Inductor's library GEMMs and convolutions as
the expert's Triton GEMM and implicit-GEMM convolution.

Inductor leaves a matrix product to the library (``extern_kernels.mm`` / ``addmm`` / ``bmm`` into
a buffer it allocated) and runs what follows in its own Triton kernels. Under this move each such
call whose operands and output it can read (an ``out=`` buffer allocated by ``empty_strided`` in
float32, float16 or bfloat16) is launched as a Triton GEMM of the expert's form instead: grouped
tiles, the products on the tensor cores under the precision policy (tf32x3 on fp32 operands under
``fp32``, TF32 under ``relaxed``, a half type's own products summed in fp32), addmm's bias added
to the tile. Where the product feeds exactly one pointwise kernel, and nothing else reads it, that
kernel's body becomes the GEMM's epilogue: its flat index over the product (``xindex``) is each
tile element's offset in the product's buffer, its loads of the product are the accumulator (cast
to the buffer's type, as the stored product would be), and its loads and stores are masked to the
tile's elements inside the product. The product is then never written, and the pointwise kernel
is not launched. A product read elsewhere too, a kernel after it of another kind (a reduction)
or a pointwise kernel this cannot map (another index into the product, its own program ids,
assertions) leaves the GEMM unfused: it writes the product, the kernels after it read it as they
did. A call this cannot read stays a library call.

Under the ``conv`` move, a library convolution (``bufN = extern_kernels.convolution(x, w, ...)``,
not transposed (in the Triton form), 1 to 3 spatial dimensions, any groups, its output's layout stated by the
``assert_size_stride`` after it) is the same kind of site: the output is allocated with those sizes and strides, and an
implicit-GEMM convolution (output pixels x a group's output channels, reduced over the group's
input channels x window positions, the window gathered from the input, zeros outside it) computes
it on the tensor cores under the same policy, the call's bias added to the tile; the pointwise
kernel after it is fused as for a product, its flat index being each element's offset in the
output's buffer whatever the layout. Its second form (``Site.cutlass``) runs a float32 convolution of
one group as CUTLASS's 3xTF32 implicit GEMM on channels-last copies
(:mod:`~loopwise.kernels.expert.cutlass_conv`), and a Triton kernel reads the channels-last output
back into the stated layout with the bias added and the pointwise kernel's work fused the same way.
A transposed convolution of stride 1 is the forward one with its window flipped and its input and
output channels swapped; the CUTLASS form runs it so, a strided 1-d or 2-d one as CUTLASS's data
gradient, and a strided 3-d one as one forward convolution per stride phase.
"""

from __future__ import annotations

import ast
import functools
import math
import re
import textwrap
from dataclasses import dataclass, field, replace

from loopwise.kernels.expert import cutlass_conv
from loopwise.kernels.expert.inductor.extract import InductorRecord, KernelRecord
from loopwise.kernels.expert.partition.plans import PICKS

# An operation of Inductor's code that picks an index or an order among values (its source
# comments name the ATen operations each kernel computes; a fallback calls them). Where one
# follows a half-precision product, a Triton GEMM summing in another order than cuBLAS rounds some
# sums to a neighbouring value and flips near-ties: such products are not replaced.
_PICKS = re.compile(r"\baten\.(" + "|".join(sorted(PICKS)) + r")\b")
_OPERANDS = {"mm": 2, "addmm": 3, "bmm": 2}  # tensor arguments of each library call
CONVOLUTION = "convolution"  # the op of a library convolution's site
_DTYPES = ("float32", "float16", "bfloat16")
# The pointwise kernel's own index and mask over its flat range: the GEMM defines them over its tile.
_INDEX_NAMES = ("xoffset", "xindex", "xmask")


class NotFusable(Exception):
    """The pointwise kernel after a product cannot be its epilogue (the message says why)."""


@dataclass
class Site:
    """One library GEMM or convolution of ``call()`` that the move replaces."""

    index: int  # its rank among the replaced calls: the kernel is seed_gemm_<index>
    op: str  # mm / addmm / bmm / convolution
    out: str  # the buffer the library call writes
    dtype: str
    shape: tuple[int, ...]
    k: int = 0  # the products' inner extent (0 where the record does not say)
    # a convolution's output strides, window (the weight's spatial sizes), stride, padding,
    # dilation (each as many as its spatial dimensions), groups and whether the call adds a bias;
    # empty for a product
    conv: dict = field(default_factory=dict)
    alpha: float = 1.0
    beta: float = 1.0
    fused: KernelRecord | None = None  # the pointwise kernel that becomes the epilogue
    param: str = ""  # the fused kernel's parameter that is the product
    epilogue: list[str] = field(default_factory=list)  # its statements, as the GEMM runs them
    reason: str = ""  # why a following kernel was not fused ("" when fused or none follows)
    cutlass: bool = False  # a convolution run by CUTLASS's implicit GEMM (the conv move's second form)

    @property
    def name(self) -> str:
        return f"seed_gemm_{self.index}"

    @property
    def extents(self) -> tuple[int, int, int]:
        """(M, N, batch) of the products: a convolution's output pixels, a group's output
        channels and its groups."""
        if self.op == CONVOLUTION:
            groups = self.conv["groups"]
            return math.prod(self.shape) // self.shape[1], self.shape[1] // groups, groups
        return self.shape[-2], self.shape[-1], self.shape[0] if self.op == "bmm" else 1

    def summary(self, precision: str, variant: int = 0) -> str:
        """``extern_kernels.mm -> Triton GEMM (tf32x3) with triton_poi_... as its epilogue`` (with
        the tile and stages where ``variant`` is not the rule's tile)."""
        how = dot_precision(self.dtype, precision)
        if self.cutlass:
            how = f"{cutlass_products(precision)}, {cutlass_config(self, variant)} tiles"
            how += ", few-channel iterators" if cutlass_few(self) else ""
            how += {"flip": ", transposed: the forward convolution it equals", "dgrad": ", transposed: the strided "
                    "data gradient", "phases": ", transposed: a forward convolution per stride phase"}.get(
                transposed_mode(self), "")
        elif variant:
            t = tiles(self, variant)
            how += f", {t['BM']}x{t['BN']}x{t['BK']} tiles, {t['stages']} stages"
        kind = "implicit-GEMM convolution" if self.op == CONVOLUTION else "GEMM"
        text = f"extern_kernels.{self.op} into {self.out} -> {'CUTLASS' if self.cutlass else 'Triton'} {kind} ({how})"
        if self.fused is not None:
            return f"{text} with {self.fused.name} as its epilogue"
        return text + (f", unfused: {self.reason}" if self.reason else "")


def dot_precision(dtype: str, precision: str) -> str:
    """How the products run: tf32x3 on fp32 operands under ``fp32``, TF32 under ``relaxed``, a
    half type natively."""
    if dtype != "float32":
        return f"{dtype} products, fp32 sums"
    return "tf32x3" if precision == "fp32" else "tf32"


# Where the move is among the first candidates from the reference: an fp32 product under the fp32
# policy (cuBLAS runs it on the CUDA cores, the move on the tensor cores as tf32x3) with about a wave
# of output tiles on an H100 / H200 (132 SMs) and enough steps along K for the pipeline to fill.
PAYING_TILES = 128
PAYING_K = 256


def pays(sites: list[Site], precision: str) -> bool:
    """Whether the move is worth one of the first candidates (:data:`PAYING_TILES`,
    :data:`PAYING_K`): some site is such a product. A half product runs on the tensor cores in
    cuBLAS too, and under the ``relaxed`` policy cuBLAS uses TF32 as the move does: there only the
    fused epilogue is left to gain, which the search finds among the seed's moves later on. A
    convolution's Triton form never pays first: its gather ran slower than cuDNN's fp32
    convolutions, so it is a move the search may try, not a default (the CUTLASS form has its own
    rule, :func:`cutlass_pays`)."""
    if precision != "fp32":
        return False
    for site in sites:
        if site.op == CONVOLUTION:
            continue
        t = tiles(site)
        m, n, batch = site.extents
        count = math.ceil(m / t["BM"]) * math.ceil(n / t["BN"]) * batch
        if site.dtype == "float32" and count >= PAYING_TILES and site.k >= PAYING_K:
            return True
    return False


def held_back(record: InductorRecord) -> bool:
    """Whether some library GEMM of ``record`` stays cuBLAS's because its code picks an index or
    an order among values (:data:`_PICKS`) and the product is half-precision."""
    return bool(_PICKS.search(record.module)) and any(s.dtype != "float32" for s in _every_site(record))


# The tiles the move's search may take (the ``gemm_tile`` knob): the rule's tile (0); it with a fourth
# stage (1); the tile halved along its longer side, for products with too few tiles to fill the
# GPU (2). With tf32x3 products and a recorded Linear's GELU as the epilogue, each compiles for sm_90
# inside a block's shared memory without spilling registers (a test compiles them ahead of time);
# there a 256-long tile, or 4 warps on a 128 x 128 tile, spill.
TILE_VARIANTS = (0, 1, 2)


def tiles(site: Site, variant: int = 0) -> dict:
    """The GEMM's launch: 128 x 128 output tiles (64 along a side of at most 64; a convolution's
    64 along its channels), 32 fp32 or 64 half elements along K per step, 8 warps (4 for 64 x 64),
    3 stages: the expert's matmul defaults, which fit Hopper's shared memory in both types;
    ``variant`` (:data:`TILE_VARIANTS`) takes 4 stages (1), or halves the tile's longer side of more
    than 64 with 4 stages (2)."""
    if variant not in TILE_VARIANTS:
        raise ValueError(f"gemm tile variant {variant!r} is not one of {TILE_VARIANTS}")
    m, n, _ = site.extents
    bm, bn = (64 if m <= 64 else 128), (64 if n <= 64 else 128)
    if site.op == CONVOLUTION:
        # The window's gather keeps more of the loop's state in registers than a product does: a
        # 128 x 128 tile spills at every K step and warp count tried (sm_90, tf32x3), 128 x 64 does not
        bn = 64
    if variant == 2:
        if bm >= bn and bm > 64:
            bm //= 2
        elif bn > 64:
            bn //= 2
    # (a half convolution's gather, as its 64-element K steps spill: 32 here too)
    return {"BM": bm, "BN": bn, "BK": 32 if site.dtype == "float32" or site.op == CONVOLUTION else 64,
            "warps": 4 if bm * bn <= 64 * 64 else 8, "stages": 3 if variant == 0 else 4}


def cutlass_unfit(site: Site) -> str:
    """Why CUTLASS's implicit-GEMM convolution (:mod:`~loopwise.kernels.expert.cutlass_conv`) cannot
    run ``site`` ("" where it can): it takes float32 convolutions of one group whose window is at
    most 32 long along each side (its optimized iterators' masks)."""
    if site.op != CONVOLUTION:
        return "not a convolution"
    if site.dtype != "float32":
        return f"a {site.dtype} convolution (the CUTLASS form is built for float32)"
    if site.conv["groups"] != 1:
        return f"a convolution of {site.conv['groups']} groups"
    if max(site.conv["window"]) > 32:
        return f"a window of {site.conv['window']} (at most 32 along a side)"
    if site.conv.get("transposed") and not transposed_mode(site):
        c = site.conv
        return (f"a transposed convolution of stride {c['stride']}, padding {c['padding']}, dilation {c['dilation']} "
                f"and output padding {c['output_padding']} (the CUTLASS form runs those of stride 1 whose padding "
                "is at most dilation x (window - 1) and without output padding, 1-d or 2-d ones of dilation 1, and "
                "3-d ones of dilation 1 whose every stride phase is a forward convolution: window at least the "
                "stride, padding at most what the window leaves)")
    return ""


def transposed_mode(site: Site) -> str:
    """How the CUTLASS form runs a transposed convolution ("" for a forward one):
    :func:`~loopwise.kernels.expert.cutlass_conv.transposed_mode`."""
    if not site.conv.get("transposed"):
        return ""
    c = site.conv
    return cutlass_conv.transposed_mode(c["stride"], c["padding"], c["dilation"], c["window"], c["output_padding"])


def triton_runs(site: Site) -> bool:
    """Whether the conv move's Triton form (the expert's implicit-GEMM gather) writes ``site``: a
    library convolution that is not transposed."""
    return site.op == CONVOLUTION and not site.conv.get("transposed")


def cutlass_products(precision: str) -> str:
    """How CUTLASS's convolution multiplies under ``precision``: 3xTF32 under ``fp32``, TF32 under
    ``relaxed`` (:data:`~loopwise.kernels.expert.cutlass_conv.OPERATORS`)."""
    return "3xTF32" if precision == "fp32" else "TF32"


def cutlass_config(site: Site, variant: int = 0) -> str:
    """The tile of :data:`~loopwise.kernels.expert.cutlass_conv.CONFIGS` a CUTLASS convolution runs
    with under ``variant`` (:data:`TILE_VARIANTS`): 128 x 64 (0), 256 x 64 (1), 64 x 64 (2); a
    data gradient (:data:`~loopwise.kernels.expert.cutlass_conv.DGRAD_CONFIGS`) takes 64 x 128 for 1."""
    if variant not in TILE_VARIANTS:
        raise ValueError(f"gemm tile variant {variant!r} is not one of {TILE_VARIANTS}")
    if transposed_mode(site) == "dgrad":
        return ("128x64", "64x128", "64x64")[variant]
    return ("128x64", "256x64", "64x64")[variant]


# Where the CUTLASS form is among the first candidates: a float32 convolution under the fp32 policy
# (cuDNN runs it on the CUDA cores, CUTLASS on the tensor cores as 3xTF32) with a long enough
# reduction (input channels x window) and enough work, and a 3-d one with at least 16 input
# channels a group. Below these, the channels-last copies and CUTLASS's small-K tiles cost more than
# the tensor cores gain (3-d convolutions of 3 and 8 input channels ran at 0.12-0.55x of cuDNN's,
# those of 16 to 64 at 1.25-2.9x). A strided 3-d transposed one (by stride phases) needs no long
# reduction: cuDNN's fp32 kernels for it ran 2.7-7x slower than the phases, at reductions of 54 to 500.
CUTLASS_PAYING_K = 128
CUTLASS_PAYING_FLOP = 4e9
CUTLASS_PAYING_3D_CHANNELS = 16


def cutlass_pays(sites: list[Site], precision: str) -> bool:
    """Whether the conv move's CUTLASS form is worth one of the first candidates: some site pays
    (:func:`cutlass_site_pays`)."""
    return any(cutlass_site_pays(site, precision) for site in sites)


def cutlass_site_pays(site: Site, precision: str) -> bool:
    """Whether CUTLASS's convolution is likely faster than the library's on ``site``: a float32
    convolution it runs (:func:`cutlass_unfit`) with a reduction of :data:`CUTLASS_PAYING_K` or
    more and :data:`CUTLASS_PAYING_FLOP` of work, under the fp32 policy (a transposed one's
    reduction is what each output element sums: its input channels x window over the product of its
    strides), a 3-d one also with :data:`CUTLASS_PAYING_3D_CHANNELS` input channels or more (a
    strided transposed one, run by stride phases, with any reduction). Under
    ``relaxed`` cuDNN's own TF32 kernels run on Hopper's warp-group MMAs, which CUTLASS 2's
    Ampere-tagged kernels do not use."""
    if precision != "fp32" or cutlass_unfit(site):
        return False
    if len(site.conv["window"]) == 3 and site.conv["channels"] < CUTLASS_PAYING_3D_CHANNELS:
        return False
    m, n, _ = site.extents
    long = site.k >= CUTLASS_PAYING_K or transposed_mode(site) == "phases"
    return long and 2 * m * n * site.k >= CUTLASS_PAYING_FLOP


def cutlass_few(site: Site) -> bool:
    """Whether ``site`` runs through CUTLASS's few-channels iterators
    (:func:`~loopwise.kernels.expert.cutlass_conv.few_channels`)."""
    return cutlass_conv.few_channels(len(site.conv["window"]), site.conv["channels"],
                                     dgrad=transposed_mode(site) == "dgrad")


def cutlass_extension(site: Site, precision: str, variant: int = 0) -> str:
    """The name of the extension a CUTLASS convolution of ``site`` is built as (one per spatial
    rank, kind, tile and precision: sites that share them share it)."""
    dims = 3 if len(site.conv["window"]) == 3 else 2
    kind = "dgrad" if transposed_mode(site) == "dgrad" else "conv"
    few = "_few" if cutlass_few(site) else ""
    return f"lw_{kind}{dims}d{few}_{cutlass_config(site, variant)}_{precision}"


def cutlass_source(site: Site, precision: str, variant: int = 0) -> str:
    """The CUDA source of the extension :func:`cutlass_extension` names."""
    return cutlass_conv.extension_source(len(site.conv["window"]), cutlass_config(site, variant), precision,
                                         dgrad=transposed_mode(site) == "dgrad", few=cutlass_few(site))


def find_sites(record: InductorRecord) -> list[Site]:
    """The library GEMMs of the record's ``call()`` this move replaces, each with the pointwise
    kernel fused into it where one can be (half products stay cuBLAS's where the code picks among
    values, :data:`_PICKS`)."""
    sites = _every_site(record)
    if _PICKS.search(record.module):
        sites = [replace(s, index=i) for i, s in enumerate(x for x in sites if x.dtype == "float32")]
    return sites


def _every_site(record: InductorRecord) -> list[Site]:
    """Every library GEMM of the record's ``call()`` the move could write, in call order."""
    tree = ast.parse(record.module)
    call = _call_function(tree)
    if call is None:
        return []
    allocations = _allocations(call)
    sizes = _stated_sizes(call, allocations)
    dtypes = _dtypes(tree, allocations)
    kernels = {k.name: k for k in record.kernels}
    sites: list[Site] = []
    for body in _statement_lists(call):
        for i, stmt in enumerate(body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in dtypes \
                    and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                dtypes[stmt.targets[0].id] = dtypes[stmt.value.id]  # a convolution's output reused
            site = _library_gemm(stmt, allocations, len(sites)) or _library_conv(body, i, sizes, dtypes, len(sites))
            if site is None:
                continue
            if site.op != CONVOLUTION:
                site.k = _inner_extent(stmt.value.args[-2], sizes)
            try:
                _fuse(site, body, i, call, kernels)
            except NotFusable as exc:
                site.reason = str(exc)
            sites.append(site)
    return sites


def rewrite(record: InductorRecord, sites: list[Site]) -> str:
    """Inductor's module with each site's library call replaced by its GEMM's launch (the fused
    kernel's launch replaced by it, the operands kept from the product's place until then)."""
    tree = ast.parse(record.module)
    call = _call_function(tree)
    pending = list(sites)  # in call()'s order; a library GEMM that is no site stays as it is
    for body in _statement_lists(call):
        i = 0
        while i < len(body):
            if not pending or _written_by_library(body[i]) != (pending[0].op, pending[0].out):
                i += 1
                continue
            site = pending.pop(0)
            call_node = body[i].value
            args = call_node.args
            if site.op == CONVOLUTION:
                bias = next((k.value for k in call_node.keywords if k.arg == "bias"), ast.Constant(None))
                a, b = args[0], args[1]
                # the library call returned its output; the kernel writes one allocated as it was laid out
                body[i:i] = [_statement(f"{site.out} = empty_strided_cuda({site.shape}, {site.conv['strides']}, "
                                        f"torch.{site.dtype})")]
                i += 1
            else:
                bias = args[0] if site.op == "addmm" else ast.Constant(None)
                a, b = args[-2], args[-1]
            if site.fused is None:
                body[i] = _statement(f"{site.name}_launch(a, b, bias, {site.out})", a=a, b=b, bias=bias)
                i += 1
                continue
            held = f"_{site.name}_operands"
            body[i] = _statement(f"{held} = (a, b, bias)", a=a, b=b, bias=bias)
            j = next(j for j in range(i + 1, len(body)) if _launched(body[j]) == site.fused.name)
            launch = body[j].value
            product = next(a for a, n in zip(launch.args, site.fused.arg_names) if n == site.param)
            body[j:j + 1] = [_statement(f"{site.name}_launch(*{held}, product, *args)", product=product,
                                        args=ast.Tuple(elts=list(launch.args), ctx=ast.Load())),
                             ast.parse(f"del {held}").body[0]]
            i = j + 2
    return ast.unparse(ast.fix_missing_locations(tree))


def _statement(text: str, **values) -> ast.stmt:
    """``text`` parsed, its names in ``values`` replaced by those expressions (a starred tuple
    spread into the call's arguments)."""
    stmt = ast.parse(text).body[0]

    class Fill(ast.NodeTransformer):
        def visit_Name(self, node):
            return values.get(node.id, node)

        def visit_Call(self, node):
            self.generic_visit(node)
            args = []
            for arg in node.args:
                spread = isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Tuple)
                args.extend(arg.value.elts if spread else [arg])
            node.args = args
            return node

    return Fill().visit(stmt)


def _call_function(tree) -> ast.FunctionDef | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "call"), None)


def _statement_lists(node) -> list[list[ast.stmt]]:
    """Every list of statements in ``node`` (its body, a ``with``'s body, ...), outermost first."""
    out = []
    for child in ast.walk(node):
        for name in ("body", "orelse", "finalbody"):
            value = getattr(child, name, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                out.append(value)
    return out


def _inner_extent(operand, shapes: dict) -> int:
    """The last extent of ``operand`` (a call's first product operand: a name whose sizes an
    ``assert_size_stride`` or an allocation states, or a ``reinterpret_tensor`` view), 0 if unknown."""
    if isinstance(operand, ast.Name) and operand.id in shapes:
        sizes = shapes[operand.id]
    elif isinstance(operand, ast.Call) and ast.unparse(operand.func) == "reinterpret_tensor" and len(operand.args) >= 2:
        try:
            sizes = ast.literal_eval(operand.args[1])
        except ValueError:
            return 0
    else:
        return 0
    return int(sizes[-1]) if sizes and isinstance(sizes[-1], int) else 0


def _stated_sizes(call, allocations: dict) -> dict[str, tuple]:
    """Name -> sizes of call()'s arguments (its ``assert_size_stride`` checks) and buffers."""
    found = {name: sizes for name, (sizes, _, _) in allocations.items()}
    for node in ast.walk(call):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "assert_size_stride" and len(node.args) >= 2 \
                and isinstance(node.args[0], ast.Name):
            try:
                found[node.args[0].id] = tuple(ast.literal_eval(node.args[1]))
            except ValueError:
                continue
    return found


def _allocations(call) -> dict[str, tuple]:
    """Buffer name -> (sizes, strides, dtype) of call()'s ``empty_strided_*`` allocations, also
    under the names a buffer is reused as (``buf4 = buf0``)."""
    found: dict[str, tuple] = {}
    for node in ast.walk(call):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        target, value = node.targets[0].id, node.value
        if isinstance(value, ast.Name) and value.id in found:
            found[target] = found[value.id]
        elif isinstance(value, ast.Call) and re.fullmatch(r"empty_strided(_\w+)?", ast.unparse(value.func)) \
                and len(value.args) == 3:
            try:
                sizes, strides = ast.literal_eval(value.args[0]), ast.literal_eval(value.args[1])
            except ValueError:
                continue
            found[target] = (tuple(sizes), tuple(strides), ast.unparse(value.args[2]).removeprefix("torch."))
    return found


def _library_gemm(stmt, allocations: dict, index: int) -> Site | None:
    """The site ``stmt`` is, if it is a library GEMM into a dense buffer this move can write."""
    found = _written_by_library(stmt)
    if found is None or found[0] == CONVOLUTION or len(stmt.value.args) != _OPERANDS[found[0]]:
        return None
    op, out = found
    keywords = {k.arg: k.value for k in stmt.value.keywords if k.arg != "out"}
    scalars = {}
    for name in ("alpha", "beta"):
        value = keywords.pop(name, ast.Constant(1))
        if not (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))):
            return None
        scalars[name] = float(value.value)
    if keywords or out not in allocations:
        return None
    sizes, strides, dtype = allocations[out]
    if dtype not in _DTYPES or len(sizes) != (3 if op == "bmm" else 2) or not _dense(sizes, strides):
        return None
    return Site(index=index, op=op, out=out, dtype=dtype, shape=tuple(sizes), **scalars)


def _written_by_library(stmt) -> tuple[str, str] | None:
    """(operation, buffer) of a library product or convolution ``stmt`` makes, if it is one."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name = ast.unparse(stmt.value.func)
        op, out = name.removeprefix("extern_kernels."), next((k.value for k in stmt.value.keywords if k.arg == "out"), None)
        if op != name and op in _OPERANDS and isinstance(out, ast.Name):
            return op, out.id
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.Call) and ast.unparse(stmt.value.func) == f"extern_kernels.{CONVOLUTION}":
        return CONVOLUTION, stmt.targets[0].id
    return None


def _library_conv(body: list, i: int, sizes: dict, dtypes: dict, index: int) -> Site | None:
    """The site ``body[i]`` is, if it is a library convolution this move can write: 1 to 3 spatial
    dimensions (a transposed one is a site the Triton form leaves, :func:`triton_runs`), literal
    stride / padding / dilation / groups, a weight whose sizes call() states, and an output in a
    type of :data:`_DTYPES` whose dense layout the next statements' ``assert_size_stride``
    states."""
    found = _written_by_library(body[i])
    if found is None or found[0] != CONVOLUTION:
        return None
    call, out = body[i].value, found[1]
    if len(call.args) != 2 or not all(isinstance(a, ast.Name) for a in call.args):
        return None
    try:
        options = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg != "bias"}
    except ValueError:
        return None
    weight = sizes.get(call.args[1].id)
    dtype = dtypes.get(call.args[0].id)
    transposed = options.get("transposed")
    if not isinstance(transposed, bool) or weight is None or dtype not in _DTYPES:
        return None
    dims = len(weight) - 2
    if not 1 <= dims <= 3 or not all(isinstance(options.get(k), (tuple, list)) and len(options[k]) == dims
                                     and all(isinstance(v, int) for v in options[k])
                                     for k in ("stride", "padding", "dilation", "output_padding")):
        return None
    groups = options.get("groups")
    if not isinstance(groups, int) or groups < 1 or weight[0] % groups or any(options["output_padding"]) and not transposed:
        return None
    stated = next((s for s in body[i + 1:i + 4] if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
                   and ast.unparse(s.value.func) == "assert_size_stride" and len(s.value.args) >= 3
                   and ast.unparse(s.value.args[0]) == out), None)
    if stated is None:
        return None
    try:
        shape, strides = tuple(ast.literal_eval(stated.value.args[1])), tuple(ast.literal_eval(stated.value.args[2]))
    except ValueError:
        return None
    # a transposed convolution's weight is (input channels, output channels / groups, window...), and
    # each output element sums over 1 / (product of strides) of its input channels x window
    channels = weight[1] * groups if transposed else weight[0]
    if len(shape) != dims + 2 or shape[1] != channels or not _dense(shape, strides):
        return None
    dtypes[out] = dtype
    bias = next((k.value for k in call.keywords if k.arg == "bias"), None)
    k = weight[0] // groups * math.prod(weight[2:]) // math.prod(options["stride"]) if transposed else math.prod(weight[1:])
    return Site(index=index, op=CONVOLUTION, out=out, dtype=dtype, shape=shape, k=max(k, 1),
                conv={"strides": strides, "window": tuple(weight[2:]), "stride": tuple(options["stride"]),
                      "padding": tuple(options["padding"]), "dilation": tuple(options["dilation"]), "groups": groups,
                      "bias": not (bias is None or isinstance(bias, ast.Constant) and bias.value is None),
                      "transposed": transposed, "output_padding": tuple(options["output_padding"]),
                      "channels": weight[0] // groups if transposed else weight[1]})


def _dtypes(tree: ast.Module, allocations: dict) -> dict[str, str]:
    """Name -> element type of call()'s arguments (the module's ``get_args``: ``rand_strided(...,
    dtype=torch.X)``) and buffers (:func:`_allocations`: also under the names they are reused as); a
    convolution's output, and the names it is reused as, are added as the walk meets them."""
    found = {name: dtype for name, (_, _, dtype) in allocations.items()}
    args = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_args"), None)
    for node in ast.walk(args) if args is not None else ():
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "rand_strided":
            dtype = next((k.value for k in node.value.keywords if k.arg == "dtype"), None)
            if dtype is not None:
                found[node.targets[0].id] = ast.unparse(dtype).removeprefix("torch.")
    return found


def _dense(sizes, strides) -> bool:
    """Whether a buffer of ``sizes`` and ``strides`` holds each element once, with no gap."""
    expected = 1
    for size, stride in sorted(zip(sizes, strides), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _launched(stmt) -> str | None:
    """The kernel ``stmt`` launches (``kernel.run(...)``), if it is a launch."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        func = stmt.value.func
        if isinstance(func, ast.Attribute) and func.attr == "run" and isinstance(func.value, ast.Name):
            return func.value.id
    return None


def _between(stmt, names: set[str]) -> bool:
    """Whether ``stmt`` may stand between a product and its epilogue: a ``del``, a size check, a
    stream handle, an allocation, or the product's buffer reused under another name (added to
    ``names``)."""
    if isinstance(stmt, ast.Delete):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) \
            and ast.unparse(stmt.value.func) == "assert_size_stride":
        return True  # a check of a buffer's layout
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        value = stmt.value
        if isinstance(value, ast.Name):
            if value.id in names:
                names.add(stmt.targets[0].id)
            return True
        if isinstance(value, ast.Call) and re.fullmatch(r"(empty_strided(_\w+)?|get_raw_stream)",
                                                        ast.unparse(value.func)):
            return not any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(value))
    return False


def _fuse(site: Site, body: list, i: int, call, kernels: dict[str, KernelRecord]) -> None:
    """Makes the pointwise kernel launched next after ``body[i]`` the site's epilogue.

    Raises:
        NotFusable: no such kernel, or it cannot be an epilogue (the reason says why).
    """
    names = {site.out}
    j = i + 1
    while j < len(body) and _between(body[j], names):
        j += 1
    name = _launched(body[j]) if j < len(body) else None
    if name is None:
        raise NotFusable("the product is not read by a Triton kernel launched right after it")
    kernel = kernels.get(name)
    if kernel is None or kernel.kind.upper() != "POINTWISE" or kernel.constants:
        raise NotFusable(f"{name} is not a pointwise kernel")
    launch = body[j].value
    params = [n for n in kernel.arg_names if n not in kernel.config]
    if len(launch.args) != len(params) or params[-1:] != ["xnumel"]:
        raise NotFusable(f"{name} is not launched over one flat index")
    passed = [p for a, p in zip(launch.args, params) if isinstance(a, ast.Name) and a.id in names]
    if len(passed) != 1:
        raise NotFusable(f"{name} takes the product {len(passed)} times")
    numel = launch.args[-1]
    if not (isinstance(numel, ast.Constant) and numel.value == math.prod(site.shape)):
        raise NotFusable(f"{name} does not run over the product's {math.prod(site.shape)} elements")
    site.param = passed[0]
    if not site.param.startswith("in_out_ptr") and _read_after(call, body[j], names):
        raise NotFusable("the product is read again after the pointwise kernel")
    site.epilogue = epilogue(kernel, site.param)
    site.fused = kernel


def _read_after(call, launch, names: set[str]) -> bool:
    """Whether call() reads a buffer of ``names`` after ``launch`` (``del`` is no read)."""
    deleted = {id(t) for n in ast.walk(call) if isinstance(n, ast.Delete) for t in n.targets}
    return any(isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load) and id(n) not in deleted
               and n.lineno > launch.end_lineno for n in ast.walk(call))


@functools.cache
def kernel_names() -> frozenset[str]:
    """The names the move's kernels define (their parameters and what they assign), read from the
    templates rendered without an epilogue: the GEMM (2-D, batched, 64-bit offsets), the Triton
    convolution and CUTLASS's read-back. A pointwise kernel that uses one cannot be their epilogue;
    the flat index and mask it drops are not among them (:data:`_INDEX_NAMES`)."""
    conv = {"strides": (64, 16, 4, 1, 1), "window": (3, 3, 3), "stride": (1, 1, 1), "padding": (1, 1, 1),
            "dilation": (1, 1, 1), "groups": 1, "bias": True, "transposed": False, "output_padding": (0, 0, 0),
            "channels": 8}
    sites = [Site(index=0, op="addmm", out="buf0", dtype="float32", shape=(64, 64), k=64),
             Site(index=0, op="mm", out="buf0", dtype="float32", shape=(2**16, 2**16), k=64),
             Site(index=0, op="bmm", out="buf0", dtype="float32", shape=(2, 64, 64), k=64),
             Site(index=0, op=CONVOLUTION, out="buf0", dtype="float32", shape=(1, 8, 4, 4, 4), k=216, conv=conv),
             Site(index=0, op=CONVOLUTION, out="buf0", dtype="float32", shape=(1, 8, 4, 4, 4), k=216, conv=conv,
                  cutlass=True)]
    names: set[str] = set()
    for site in sites:
        for fn in ast.walk(ast.parse(kernel_source(site, "fp32"))):
            if isinstance(fn, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in fn.decorator_list):
                names |= {a.arg for a in fn.args.args}
                names |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return frozenset(names - set(_INDEX_NAMES))


def epilogue(kernel: KernelRecord, param: str) -> list[str]:
    """The statements of pointwise ``kernel`` as a GEMM epilogue in which ``param`` is the product:
    without its own index and mask (the GEMM defines ``xindex`` and ``xmask`` over the tile), its
    loads of ``param`` at ``xindex`` as the accumulator, every load and store masked by ``xmask``,
    its ``[XBLOCK]`` shapes the tile's.

    Raises:
        NotFusable: the body does anything else with the product, its block or its program.
    """
    try:
        fn = ast.parse(textwrap.dedent(kernel.src)).body[0]
    except (SyntaxError, IndexError):
        raise NotFusable(f"the source recorded for {kernel.name} does not parse") from None
    if not isinstance(fn, ast.FunctionDef) or [a.arg for a in fn.args.args][-2:] != ["xnumel", "XBLOCK"]:
        raise NotFusable(f"{kernel.name} is not a kernel over one flat index with an XBLOCK")
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {a.arg for a in fn.args.args}
    if used & kernel_names():
        raise NotFusable(f"{kernel.name} uses a name the GEMM defines ({sorted(used & kernel_names())[0]})")
    rewriter = _Epilogue(param)
    out = []
    for stmt in fn.body:
        target = stmt.targets[0].id if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) else None
        if target in _INDEX_NAMES:
            continue
        if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Expr)):
            raise NotFusable(f"{kernel.name} has a {type(stmt).__name__} statement")
        if target and isinstance(stmt.value, ast.Name) and stmt.value.id in rewriter.index:
            rewriter.index.add(target)
        out.append(ast.unparse(ast.fix_missing_locations(rewriter.visit(stmt))))
    return out


class _Epilogue(ast.NodeTransformer):
    def __init__(self, param: str):
        self.param, self.index = param, {"xindex"}

    def visit_Call(self, node):
        name = ast.unparse(node.func)
        if name in ("tl.program_id", "tl.arange", "tl.device_assert", "tl.debug_barrier"):
            raise NotFusable(f"the kernel calls {name}")
        if name in ("tl.load", "tl.store"):
            pointer = node.args[0] if node.args else None
            product = self._is_product(pointer)
            if product:
                if not (isinstance(pointer, ast.BinOp) and isinstance(pointer.op, ast.Add)
                        and isinstance(pointer.left, ast.Name) and isinstance(pointer.right, ast.Name)
                        and pointer.right.id in self.index):
                    raise NotFusable("the kernel reads or writes the product elsewhere than at its own index")
                if name == "tl.load":
                    return ast.parse(f"acc.to({self.param}.dtype.element_ty)", mode="eval").body
            self._mask(node, 1 if name == "tl.load" else 2)
            node.args = node.args[:1] + [self.visit(a) for a in node.args[1:]] if product else \
                [self.visit(a) for a in node.args]
            node.keywords = [self.visit(k) for k in node.keywords]
            return node
        return self.generic_visit(node)

    def _is_product(self, pointer) -> bool:
        return pointer is not None and any(isinstance(n, ast.Name) and n.id == self.param for n in ast.walk(pointer))

    @staticmethod
    def _mask(node, position: int) -> None:
        """The call's mask (positional at ``position``, or ``mask=``) as ``xmask & (mask)``."""
        keyword = next((k for k in node.keywords if k.arg == "mask"), None)
        mask = keyword.value if keyword else (node.args[position] if len(node.args) > position else None)
        xmask = ast.Name(id="xmask", ctx=ast.Load())
        unmasked = mask is None or (isinstance(mask, ast.Constant) and mask.value is None)
        tile = xmask if unmasked or (isinstance(mask, ast.Name) and mask.id == "xmask") \
            else ast.BinOp(left=xmask, op=ast.BitAnd(), right=mask)
        if keyword:
            keyword.value = tile
        elif len(node.args) > position:
            node.args[position] = tile
        else:
            node.keywords.append(ast.keyword(arg="mask", value=tile))

    def visit_List(self, node):
        if len(node.elts) == 1 and isinstance(node.elts[0], ast.Name) and node.elts[0].id == "XBLOCK":
            return ast.List(elts=[ast.Name(id="BM", ctx=ast.Load()), ast.Name(id="BN", ctx=ast.Load())], ctx=ast.Load())
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in ("XBLOCK", "xoffset"):
            raise NotFusable(f"the kernel uses {node.id} other than as a shape")
        if node.id == self.param:
            raise NotFusable("the kernel uses the product other than by loads and stores at its index")
        return node


def kernel_source(site: Site, precision: str, variant: int = 0) -> str:
    """The site's Triton GEMM and its launcher, rendered for ``precision`` with the tile of
    ``variant`` (:func:`tiles`)."""
    from loopwise.kernels.expert.generate import _templates

    params = [n for n in site.fused.arg_names if n not in site.fused.config] if site.fused else []
    if site.cutlass:
        mode = transposed_mode(site)
        return _templates().get_template("inductor_conv_cutlass.py.j2").render(
            name=site.name, out=site.out, fused=site.fused.name if site.fused else "", params=params,
            bias=site.conv["bias"], ext=cutlass_extension(site, precision, variant),
            config=cutlass_config(site, variant), precision_text=cutlass_products(precision),
            stride=tuple(site.conv["stride"]), dilation=tuple(site.conv["dilation"]), transposed=mode,
            padding=cutlass_conv.flipped_padding(site.conv["padding"], site.conv["dilation"], site.conv["window"])
            if mode == "flip" else tuple(site.conv["padding"]), output_padding=tuple(site.conv["output_padding"]),
            epilogue=site.epilogue)
    if site.op == CONVOLUTION:
        pad = 3 - len(site.conv["window"])  # 1-d and 2-d as 3-d with leading extents of one
        spatial = {name: (fill,) * pad + tuple(site.conv[key]) for name, key, fill in
                   (("K", "window", 1), ("S", "stride", 1), ("P", "padding", 0), ("D", "dilation", 1))}
        return _templates().get_template("inductor_conv.py.j2").render(
            name=site.name, out=site.out, fused=site.fused.name if site.fused else "", params=params,
            dtype=site.dtype, bias=site.conv["bias"], groups=site.conv["groups"], spatial=spatial,
            dot_precision=dot_precision("float32", precision), precision_text=dot_precision(site.dtype, precision),
            epilogue=site.epilogue, **tiles(site, variant))
    return _templates().get_template("inductor_gemm.py.j2").render(
        name=site.name, op=f"extern_kernels.{site.op}", out=site.out, fused=site.fused.name if site.fused else "",
        params=params, dtype=site.dtype, bias=site.op == "addmm", alpha=site.alpha, beta=site.beta,
        dot_precision=dot_precision("float32", precision), precision_text=dot_precision(site.dtype, precision),
        epilogue=site.epilogue, wide=math.prod(site.shape) >= 2**31, batched=site.op == "bmm", **tiles(site, variant))
