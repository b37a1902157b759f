"""Side by side with ZigZag (``zigzag-dse``), the layer-at-a-time design-space explorer: the same
ONNX model on the same memory hierarchy, layer by layer, DRAM traffic per layer from both.

The hierarchy given to ZigZag is built from a loopwise target: a register file for outputs, the
target's scratchpad shared by inputs, weights and outputs, and DRAM above it, sized so that both
tools hold the same number of elements (ZigZag's ONNX parser gives every element 8 bits; loopwise's
elements are ``elem_bytes`` wide). ZigZag searches its own spatial and temporal mappings (LOMA);
loopwise takes each operator's best tiling (:mod:`loopwise.memory.layerwise`). ZigZag models
convolutions and matrix products, so those are the layers compared; a bias, which ZigZag does not
model, is left out of loopwise's side.

Where every layer fits the scratchpad, both must report each operand moved exactly once, so this
checks the two readings of the model (shapes, strides, padding, groups) against each other. Where
layers must be tiled, the numbers differ by design: ZigZag loads a convolution's input window again
for each output tile, loopwise counts the overlap between consecutive tiles as reused.
"""

from __future__ import annotations

import logging
import math
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loopwise.errors import UserError
from loopwise.memory.targets import Target

ZIGZAG_BITS = 8  # the element width ZigZag's ONNX parser assigns


@dataclass(frozen=True)
class LayerRow:
    layer: str
    zigzag_elements: dict[str, int]  # operand (I, W, O) -> elements moved to or from DRAM
    loopwise_elements: dict[str, int]

    @property
    def zigzag_total(self) -> int:
        return sum(self.zigzag_elements.values())

    @property
    def loopwise_total(self) -> int:
        return sum(self.loopwise_elements.values())

    @property
    def ratio(self) -> float:
        return self.loopwise_total / self.zigzag_total if self.zigzag_total else float("nan")


def _port(name: str, kind: str, bw_min: int, bw_max: int, allocation: list[str]) -> dict:
    return {"name": name, "type": kind, "bandwidth_min": bw_min, "bandwidth_max": bw_max, "allocation": allocation}


def hardware(target: Target, elem_bytes: int = 2) -> dict:
    """ZigZag's accelerator description for ``target`` (as a dict to dump to YAML)."""
    all_ops = ["I1, tl", "I2, tl", "O, tl", "O, fl", "I1, fh", "I2, fh", "O, fh", "O, th"]
    scratch_bits = target.scratchpad.bytes // elem_bytes * ZIGZAG_BITS
    return {
        "name": f"loopwise-{target.name}",
        "memories": {
            "rf_O": {"size": 256, "r_cost": 1, "w_cost": 1, "area": 0, "latency": 1, "auto_cost_extraction": False,
                     "operands": ["O"], "served_dimensions": ["D2"],
                     "ports": [_port("r_port_1", "read", 16, 16, ["O, tl"]), _port("r_port_2", "read", 16, 16, ["O, th"]),
                               _port("w_port_1", "write", 16, 16, ["O, fh"]), _port("w_port_2", "write", 16, 16, ["O, fl"])]},
            "scratchpad": {"size": scratch_bits, "r_cost": 10, "w_cost": 10, "area": 0, "latency": 1,
                           "operands": ["I1", "I2", "O"], "served_dimensions": ["D1", "D2"],
                           "ports": [_port("rw_port_1", "read_write", 16, 4096, all_ops)]},
            "dram": {"size": 10**13, "r_cost": 1000, "w_cost": 1000, "area": 0, "latency": 1,
                     "operands": ["I1", "I2", "O"], "served_dimensions": ["D1", "D2"],
                     "ports": [_port("rw_port_1", "read_write", 16, 4096, all_ops)]},
        },
        "operational_array": {"input_precision": [ZIGZAG_BITS, ZIGZAG_BITS], "unit_energy": 0.04, "unit_area": 1,
                              "dimensions": ["D1", "D2"], "sizes": [16, 16]},
    }


MAPPING = [{"name": "default", "spatial_mapping": {"D1": ["K, 16"], "D2": ["C, 16"]},
            "memory_operand_links": {"O": "O", "W": "I2", "I": "I1"}}]


def run_zigzag(model: Path, target: Target, elem_bytes: int = 2, lpf_limit: int = 1) -> dict[str, dict[str, int]]:
    """ZigZag's best mapping per layer (least energy): DRAM elements moved per operand, by layer name."""
    try:
        from zigzag.api import get_hardware_performance_zigzag
        from zigzag.mapping.data_movement import DataDirection, DataMoveAttr
    except ImportError as exc:
        raise UserError(f"the ZigZag comparison needs zigzag-dse (pip install 'loopwise[compare]'): {exc}") from None
    import yaml

    work = Path(tempfile.mkdtemp(prefix="loopwise-zigzag-"))
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        (work / "hw.yaml").write_text(yaml.safe_dump(hardware(target, elem_bytes), sort_keys=False))
        (work / "mapping.yaml").write_text(yaml.safe_dump(MAPPING, sort_keys=False))
        logging.disable(logging.WARNING)  # ZigZag configures the root logger at INFO and reports every layer
        result = get_hardware_performance_zigzag(str(model), str(work / "hw.yaml"), str(work / "mapping.yaml"),
                                                 opt="energy", dump_folder=str(work / "out"), lpf_limit=lpf_limit,
                                                 nb_spatial_mappings_generated=1, loma_show_progress_bar=False)
    finally:
        logging.disable(logging.NOTSET)
        root.setLevel(level)
        for h in list(root.handlers):
            if h not in handlers:
                root.removeHandler(h)
        shutil.rmtree(work, ignore_errors=True)
    _, layers = result[-1][0]
    out: dict[str, dict[str, int]] = {}
    for cme, _ in layers:
        moved = {}
        for operand, levels in cme.mapping.unit_mem_data_movement.items():
            top = levels[-1]  # the DRAM level: what it hands down and what it takes back
            amount = top.get_attribute(DataMoveAttr.DATA_TRANS_AMOUNT_PER_PERIOD)
            periods = top.get_attribute(DataMoveAttr.DATA_TRANS_PERIOD_COUNT)
            moved[str(operand)] = sum(amount.get(d) * periods.get(d)
                                      for d in (DataDirection.RD_OUT_TO_LOW, DataDirection.WR_IN_BY_LOW))
        out[cme.layer.name] = moved
    return out


def loopwise_layers(graph, target: Target, names=None) -> dict[str, dict[str, int]]:
    """loopwise's layer-by-layer traffic (best tiling per operator) in elements, by ONNX node name,
    per operand as ZigZag names them (I the input, W the weights, O the output)."""
    from loopwise.memory.layerwise import best_tiling
    from loopwise.memory.tiling import traffic

    out: dict[str, dict[str, int]] = {}
    for op in graph.operators:
        kind, _, node = op.name.partition(":")
        if kind not in ("Conv", "Gemm", "MatMul") or (names is not None and node not in names):
            continue
        choice = best_tiling(op, target.scratchpad.bytes)
        moved = traffic(op, choice.tiles, list(choice.order))
        roles = {"I": op.reads[0].tensor, "W": op.reads[1].tensor, "O": op.writes[0].tensor}
        out[node] = {role: moved[t].total for role, t in roles.items()}
    return out


def compare(model: Path, target: Target, elem_bytes: int = 2, lpf_limit: int = 1, graph=None) -> list[LayerRow]:
    """One row per layer both tools model, in ZigZag's order (``graph``: the model as loopwise
    imported it, when the caller has it)."""
    from loopwise.memory.onnx_import import load_onnx

    zz = run_zigzag(model, target, elem_bytes, lpf_limit)
    ours = loopwise_layers(graph if graph is not None else load_onnx(model, elem_bytes).graph, target, set(zz))
    missing = [name for name in zz if name not in ours]
    if missing:
        raise UserError(f"{model}: ZigZag layers loopwise did not import: {', '.join(missing[:5])}")
    return [LayerRow(name, zz[name], ours[name]) for name in zz]


@dataclass(frozen=True)
class MatrixProduct:
    """A matrix-product operator read as ``batch`` independent ``[m, k] x [k, n]`` products: a
    dimension of both operands and the output is a batch dimension, of the first operand and the
    output a row (m), of the second operand and the output a column (n), of both operands only the
    contraction (k). A dimension of extent 1 plays no role (the row of a product at batch 1)."""

    name: str
    batch: int
    m: int
    k: int
    n: int


_AFFINE = re.compile(r"^[\w\s+\-*()]+$")


def _terms(expr: str, dims: dict[str, int]) -> dict[str, int] | None:
    """The coefficient of each dimension of ``expr`` (of extent above 1), or None when it is not
    an affine expression (a floor or a modulo)."""
    words = set(re.findall(r"[A-Za-z_]\w*", expr))
    if not _AFFINE.match(expr) or words - set(dims):
        return None
    at = lambda point: eval(expr, {"__builtins__": {}}, dict(dict.fromkeys(words, 0), **point))  # noqa: E731
    base = at({})
    return {d: at({d: 1}) - base for d in sorted(words) if dims[d] > 1}


def _each_element_once(index: tuple[str, ...], dims: dict[str, int]) -> bool:
    """Whether an access reaches a different element at every point of its dimensions: each affine
    index a sum whose terms never collide (mixed radix), no dimension in two of them. A
    convolution's input read through a sliding window (``p + r``) reaches elements more than once;
    an index with a floor or a modulo (a view the importer folded, such as heads split out of a
    row) is taken as it comes."""
    seen: set[str] = set()
    for expr in index:
        terms = _terms(expr, dims)
        if terms is None:
            continue
        if seen & set(terms) or 0 in terms.values():
            return False
        seen |= set(terms)
        span = 0
        for d, coef in sorted(terms.items(), key=lambda kv: abs(kv[1])):
            if abs(coef) <= span:
                return False
            span += abs(coef) * (dims[d] - 1)
    return True


def _operands(op) -> list[set[str]]:
    """The dimensions of each operand of ``op``, in the order they are first read: the reads that
    reach a dimension the output does not have (the contraction), those over the same dimensions
    taken as one operand (the parts of a concatenation); a bias is no operand."""
    out_dims = _dims_of(op.writes[0], op.dims)
    operands: list[set[str]] = []
    for access in op.reads:
        dims = _dims_of(access, op.dims)
        if dims - out_dims and dims not in operands:
            operands.append(dims)
    return operands


def _dims_of(access, dims) -> set[str]:
    return {word for expr in access.index for word in re.findall(r"[A-Za-z_]\w*", expr)
            if word in dims and dims[word] > 1}


def matrix_products(graph, kinds=("linear", "matmul", "bmm", "mm", "addmm", "MatMul", "Gemm")) -> list[MatrixProduct]:
    """The graph's matrix products (operators named ``kind:...``), each split into batch, m, k and n
    extents from its access maps. An operator of those kinds whose dimensions do not split that way,
    or that reaches an element of an operand or of its output more than once (a convolution with a
    sliding window: as a product its first operand would be that many times its input), is a
    :class:`UserError`; a convolution whose windows do not overlap (one by one, or patches) is one."""
    out = []
    for op in graph.operators:
        if op.name.split(":")[0] not in kinds:
            continue
        operands = _operands(op)
        if any(not _each_element_once(x.index, op.dims) for x in (*op.reads, *op.writes)):
            raise UserError(f"{op.name}: reads or writes elements more than once (a sliding window): not a matrix "
                            "product (loopwise memory compare maps a convolution as one)")
        o = _dims_of(op.writes[0], op.dims)
        if len(operands) != 2:
            raise UserError(f"{op.name}: not a matrix product of two operands ({op.dims})")
        a, b = operands
        roles = {"batch": a & b & o, "m": (a & o) - b, "n": (b & o) - a, "k": (a & b) - o}
        wide = {d for d, extent in op.dims.items() if extent > 1}
        if set().union(*roles.values()) != wide or not roles["k"]:
            raise UserError(f"{op.name}: not a matrix product of two operands ({op.dims})")
        size = {r: math.prod(op.dims[d] for d in ds) for r, ds in roles.items()}
        out.append(MatrixProduct(op.name, size["batch"], size["m"], size["k"], size["n"]))
    return out


def matmul_onnx(m: int, k: int, n: int, path: Path) -> Path:
    """A one-layer ONNX model, ``[m, k] x [k, n]`` with the second operand as weights (what ZigZag's
    parser maps as a matrix product); the weights are zeros, only their shape is read."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.zeros((k, n), dtype=np.float16), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "product",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [m, n])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def zigzag_products(products: list[MatrixProduct], target: Target, elem_bytes: int = 2,
                    lpf_limit: int = 7, work: Path | None = None) -> dict[str, int]:
    """ZigZag's best mapping of each product, as DRAM elements moved (one ZigZag run per distinct
    shape; a batched product is its batch of independent products)."""
    work = work or Path(tempfile.mkdtemp(prefix="loopwise-zigzag-products-"))
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[int, int, int], int] = {}
    out = {}
    for p in products:
        shape = (p.m, p.k, p.n)
        if shape not in runs:
            layers = run_zigzag(matmul_onnx(*shape, work / f"mm_{p.m}_{p.k}_{p.n}.onnx"), target, elem_bytes, lpf_limit)
            runs[shape] = sum(sum(v.values()) for v in layers.values())
        out[p.name] = p.batch * runs[shape]
    return out
