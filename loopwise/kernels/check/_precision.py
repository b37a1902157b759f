"""The precision rule: TF32, fp16, bf16 or fp8 math in a problem whose reference is fp32.

``tl.dot`` on fp32 operands defaults to TF32 in Triton, so a dot is fp32-accurate only with
``input_precision="ieee"`` or ``"tf32x3"`` (3xTF32), with ``allow_tf32=False``, or when the source
sets ``TRITON_F32_DEFAULT`` to one of those.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from loopwise.kernels.check._codes import RuleMatch
from loopwise.kernels.check._source import CText, SourceIndex, constant_str

_LOW_DTYPES = re.compile(
    r"^(torch\.(float16|half|bfloat16|float8_\w+|(cuda\.)?(Half|BFloat16)Tensor)|"
    r"numpy\.(float16|half)|triton\.language\.(float16|bfloat16|float8\w*)|"
    r"cutlass\.(cute\.)?(Float16|BFloat16|TFloat32|Float8\w*))$"
)
_AUTOCAST = re.compile(r"^torch\.((cuda|cpu)\.amp\.|amp\.(autocast_mode\.)?)?(autocast|custom_fwd)$")
_LOW_METHODS = {"half", "bfloat16"}
_FLAG_SETTINGS = {
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
}
_PRECISION_SETTINGS = re.compile(r"^torch\.backends\.(\w+\.)*fp32_precision$")
_ACCURATE_DOT = {"ieee", "tf32x3"}
_DOTS = {"triton.language.dot"}

_C_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (label, re.compile(pattern))
    for label, pattern in (
        ("half-precision type", r"\b__half2?\b|\bhalf2\b|\b__nv_bfloat162?\b|\b__nv_fp8\w*"),
        ("half-precision conversion", r"\b__float2half\w*|\b__float22half2\w*|\b__floats2half2\w*|"
                                      r"\b__float2bfloat16\w*|\b__floats2bfloat162\w*|\b__half2float\b|\b__bfloat162float\b"),
        ("WMMA tensor-core API", r"\bnvcuda::wmma\b|\bwmma::"),
        ("reduced-precision MMA instruction", r"\b(?:wgmma|mma)\.[\w.]*?\.(?:f16|bf16|tf32|e4m3|e5m2)\b"),
        ("TF32 conversion", r"\bcvt\.\w+\.tf32\.f32\b|\b__float_to_tf32\b|\bwmma::precision::tf32\b"),
        ("cuBLAS reduced-precision mode", r"\bCUBLAS_COMPUTE_32F_FAST_\w+|\bCUBLAS_TF32_TENSOR_OP_MATH\b|"
                                          r"\bCUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION\b"),
        ("TF32 switch", r"\bsetAllowTF32Cu(?:BLAS|DNN)\s*\(\s*true|\bsetFloat32MatmulPrecision\b"),
        ("reduced-precision ATen dtype", r"\b(?:at|torch|c10)::(?:kHalf|kBFloat16|kFloat16|Half|BFloat16)\b"),
    )
)
_C_COMPARISON = re.compile(r"\s*[!=]=\s*")
_CUTLASS_LOW = re.compile(r"\bcutlass::(?:half_t|bfloat16_t|tfloat32_t)\b")
_CUTLASS_3XTF32 = "OpMultiplyAddFastF32"
_CUTLASS_TENSOR_OP = re.compile(r"\bOpClassTensorOp\b")
_CUTLASS_FP64 = re.compile(r"\bdouble\b|\bcutlass::complex<double>")


def find_precision(index: SourceIndex) -> Iterator[RuleMatch]:
    """Every place that downgrades fp32 math, in Python, Triton, CuTe DSL and embedded C/CUDA."""
    yield from _dtype_references(index)
    yield from _settings(index)
    yield from _dots(index)
    for text in index.c_texts():
        yield from _c_precision(text)


def _in_comparison(index: SourceIndex, node: ast.AST) -> bool:
    # ``if x.dtype == torch.float16: raise`` is a check, not a conversion.
    parent = index.parents.get(node)
    while parent is not None and not isinstance(parent, ast.stmt):
        if isinstance(parent, ast.Compare):
            return True
        parent = index.parents.get(parent)
    return False


def _dtype_references(index: SourceIndex) -> Iterator[RuleMatch]:
    for node, name in index.names():
        if _LOW_DTYPES.match(name) and not _in_comparison(index, node):
            yield RuleMatch("precision_downgrade", node.lineno, f"Reduced-precision dtype `{name}`")
        elif _AUTOCAST.match(name):
            yield RuleMatch("precision_downgrade", node.lineno, f"Use of `{name}`",
                          "autocast runs fp32 operations in fp16 or bf16")
    for call, _ in index.calls():
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in _LOW_METHODS and not call.args:
            yield RuleMatch("precision_downgrade", call.lineno, f"Conversion `.{func.attr}()`")


def _settings(index: SourceIndex) -> Iterator[RuleMatch]:
    for node in ast.walk(index.tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield from _setting(index, node, index.qualname(target), node.value)
    for call, name in index.calls():
        if name == "torch.set_float32_matmul_precision":
            value = constant_str(call.args[0]) if call.args else None
            if value != "highest":
                yield RuleMatch("precision_downgrade", call.lineno,
                              f"`torch.set_float32_matmul_precision({value!r})`",
                              "it lets fp32 matmuls run in TF32 or bf16")
        elif name in ("setattr", "builtins.setattr") and len(call.args) == 3:
            owner = index.qualname(call.args[0])
            attr = constant_str(call.args[1])
            if owner and attr:
                yield from _setting(index, call, f"{owner}.{attr}", call.args[2])


def _setting(index: SourceIndex, node: ast.AST, name: str | None, value: ast.expr) -> Iterator[RuleMatch]:
    if name in _FLAG_SETTINGS:
        if not (isinstance(value, ast.Constant) and value.value is False):
            yield RuleMatch("precision_downgrade", node.lineno, f"Setting `{name}`",
                          "it lets fp32 math run in reduced precision")
    elif name and _PRECISION_SETTINGS.match(name):
        if constant_str(value) != "ieee":
            yield RuleMatch("precision_downgrade", node.lineno, f"Setting `{name}`",
                          "only 'ieee' keeps fp32 math exact")


def _sets_accurate_default(index: SourceIndex) -> bool:
    """Whether the source sets TRITON_F32_DEFAULT to ieee or tf32x3 (then a plain tl.dot is fine)."""
    for node in index.strings():
        if node.value != "TRITON_F32_DEFAULT":
            continue
        statement = index.enclosing(node, (ast.stmt,))
        values = {constant_str(n) for n in ast.walk(statement)} if statement else set()
        if values & _ACCURATE_DOT:
            return True
    return False


def _keyword_or_position(call: ast.Call, name: str, position: int) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[position] if len(call.args) > position else None


def _resolve_literal(index: SourceIndex, call: ast.Call, node: ast.expr) -> str | None:
    """A string literal, a module constant, or a parameter's default (``PREC: tl.constexpr = "ieee"``)."""
    if (text := constant_str(node)) is not None or not isinstance(node, ast.Name):
        return text
    for definition in index.module_defs.get(node.id, ()):
        if isinstance(definition, ast.Assign) and (text := constant_str(definition.value)):
            return text
    func = index.enclosing(call, (ast.FunctionDef, ast.AsyncFunctionDef))
    if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = func.args
        positional = args.posonlyargs + args.args
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
        defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
        if node.id in defaults:
            return constant_str(defaults[node.id])
    return None


def _dots(index: SourceIndex) -> Iterator[RuleMatch]:
    accurate_default = _sets_accurate_default(index)
    for call, name in index.calls():
        if name not in _DOTS:
            continue
        precision = _keyword_or_position(call, "input_precision", 3)
        allow_tf32 = _keyword_or_position(call, "allow_tf32", 4)
        if precision is not None and not (isinstance(precision, ast.Constant) and precision.value is None):
            value = _resolve_literal(index, call, precision)
            if value in _ACCURATE_DOT:
                continue
            if value is None:
                yield RuleMatch("precision_downgrade", call.lineno, f"`tl.dot` with input_precision "
                              f"`{ast.unparse(precision)}`", "the precision could not be resolved to "
                              "'ieee' or 'tf32x3', so the dot may run in TF32", severity="flag")
            else:
                yield RuleMatch("precision_downgrade", call.lineno, f"`tl.dot` with input_precision={value!r}",
                              "only 'ieee' and 'tf32x3' keep fp32 accuracy")
            continue
        if isinstance(allow_tf32, ast.Constant) and allow_tf32.value is False:
            continue
        if isinstance(allow_tf32, ast.Constant) and allow_tf32.value is True:
            yield RuleMatch("precision_downgrade", call.lineno, "`tl.dot` with allow_tf32=True",
                          "it runs fp32 operands in TF32")
        elif not accurate_default:
            yield RuleMatch("precision_downgrade", call.lineno, "`tl.dot` without input_precision",
                          "on fp32 operands Triton defaults to TF32; use input_precision='ieee' or 'tf32x3'")


def _c_precision(text: CText) -> Iterator[RuleMatch]:
    for label, pattern in _C_PATTERNS:
        for match in pattern.finditer(text.text):
            if _C_COMPARISON.search(text.text[max(0, match.start() - 4):match.start()]) or \
                    _C_COMPARISON.match(text.text, match.end()):
                continue  # ``x.scalar_type() == at::kHalf`` checks a dtype, it does not convert
            yield RuleMatch("precision_downgrade", text.line_of(match.start()),
                          f"CUDA/C++ {label} `{match.group(0)}`")
    if _CUTLASS_3XTF32 not in text.text:
        low = list(_CUTLASS_LOW.finditer(text.text))
        for match in low:
            yield RuleMatch("precision_downgrade", text.line_of(match.start()), f"CUTLASS type `{match.group(0)}`",
                          "it is reduced precision unless the 3xTF32 operator OpMultiplyAddFastF32 is used")
        tensor_op = _CUTLASS_TENSOR_OP.search(text.text)
        if tensor_op and not low and not _CUTLASS_FP64.search(text.text):
            # float operands on CUTLASS's tensor-core path are rounded to TF32 (CUTLASS 2's
            # OpMultiplyAdd, CUTLASS 3's SM90 builder alike); int8 / fp8 ones are quantized.
            yield RuleMatch("precision_downgrade", text.line_of(tensor_op.start()),
                          "CUTLASS tensor-core GEMM `OpClassTensorOp` without OpMultiplyAddFastF32",
                          "fp32 operands on the tensor cores are TF32 unless the 3xTF32 operator is used")
