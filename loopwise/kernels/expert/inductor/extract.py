"""Inductor's own code for a problem, taken apart into what a standalone ``ModelNew`` is made of.

Run on the machine that will run the candidate (the kernels are autotuned there): the problem's
``Model`` is compiled by torch.compile (default mode, static shapes, one graph, no gradients) with a
backend that records Dynamo's graph, and ``GraphLowering.compile_to_module`` is wrapped to keep
the Python module Inductor writes. One forward call compiles and autotunes every kernel; then the
record (:class:`InductorRecord`, JSON) holds:

- the module's source (its ``call(args)`` and the names it reads), for
  :mod:`loopwise.kernels.expert.inductor.standalone` to rewrite;
- per Triton kernel: the ``@triton.jit`` function's source, its parameter names, the launch
  configuration the autotuner chose (block sizes, warps, stages) and its grid as Python
  expressions of the kernel's arguments and block sizes (Inductor's own grid rule for the kernel,
  written out with the block sizes left symbolic, so that another configuration gets its grid);
- per argument of ``call``: where ``ModelNew.forward`` finds it (``self.get_parameter(name)`` /
  ``self.get_buffer(name)``, or the forward's own argument), found by identity among the tensors
  the backend is given.

The module relies on Inductor's runtime helpers only (``torch._inductor.runtime``), never on
torch.compile. Everything here uses the torch internals named above; :data:`SUPPORTED_TORCH` lists
the versions it ran on (2.11 with CUDA on the H200; 2.13 on the CPU, where the input mapping and
the module's shape were checked but no Triton kernel is generated).

Run as ``python -m loopwise.kernels.expert.inductor.extract PROBLEM.py OUT.json [--device cuda]``,
in a process of its own (the caller's process keeps no compiler state): exit 0 with the record
written, exit 3 with ``{"unsupported": reason}`` written when the problem cannot be seeded.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loopwise.kernels.expert.elementwise import Unsupported

SUPPORTED_TORCH = ("2.11", "2.13")
UNSUPPORTED_EXIT = 3


@dataclass
class KernelRecord:
    """One Triton kernel of Inductor's module and the launch its autotuner chose."""

    name: str
    src: str  # the @triton.jit function, from `def` on
    arg_names: list[str]
    config: dict[str, int]  # the constexpr block sizes (XBLOCK, R0_BLOCK, ...)
    num_warps: int
    num_stages: int
    grid: dict = field(default_factory=dict)  # {"prefix": [...], "x": expr, "y": expr, "z": expr}
    grid_symbolic: bool = True  # False: the grid holds for this configuration only
    constants: dict = field(default_factory=dict)  # parameters Inductor passes as compile-time constants
    kind: str = ""  # pointwise / reduction / persistent_reduction / template / ...


@dataclass
class InductorRecord:
    """What :mod:`standalone` needs to write a ``ModelNew`` for one problem (JSON-serialisable)."""

    module: str  # the module Inductor wrote (Python source)
    kernels: list[KernelRecord]
    inputs: list[str]  # per argument of call(): "self.get_parameter(...)" / "self.get_buffer(...)" / "arg:<name>"
    outputs: int  # how many tensors the forward returns; 0: one tensor, not a tuple
    extern: list[str]  # the library calls in call() (extern_kernels.mm, aten.topk, ...)
    torch: str = ""
    triton: str = ""
    device_name: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> InductorRecord:
        data = json.loads(text)
        data["kernels"] = [KernelRecord(**k) for k in data["kernels"]]
        return cls(**data)


def extract(problem, device: str = "cuda") -> InductorRecord:
    """Compiles ``problem`` with Inductor on ``device``, runs it once, and records its module.

    Raises:
        Unsupported: graph breaks, more than one graph, no output code, arguments that cannot be
            mapped back to the model, outputs that are not tensors.
    """
    import inspect
    from unittest import mock

    import torch
    import triton
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    module = problem.load_module()
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).to(device)
    torch.manual_seed(42)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    params = list(inspect.signature(module.Model.forward).parameters.values())[1:]
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    vararg = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
    graphs, modules = [], []

    def backend(gm, example_inputs):
        graphs.append(_input_paths(example_inputs, model, inputs, named, vararg))
        return compile_fx(gm, example_inputs)

    original = GraphLowering.compile_to_module

    def keep(self):
        compiled = original(self)
        modules.append(compiled)
        return compiled

    torch._dynamo.reset()
    with mock.patch.object(GraphLowering, "compile_to_module", keep), \
            inductor_config.patch(force_disable_caches=True), torch.no_grad():
        try:
            compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
            out = compiled(*inputs)
        except Exception as exc:  # noqa: BLE001 - whatever torch.compile raises, the seed does not exist
            raise Unsupported(f"torch.compile fails on this problem ({type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''})") from None
    torch._dynamo.reset()
    if len(graphs) != 1 or len(modules) != 1:
        raise Unsupported(f"Inductor compiled {len(graphs)} graphs into {len(modules)} modules; one of each is seeded")
    paths, compiled_module = graphs[0], modules[0]
    source_text = Path(compiled_module.__file__).read_text()
    return InductorRecord(
        module=source_text,
        kernels=_kernels(compiled_module),
        inputs=paths,
        outputs=_output_count(out),
        extern=library_calls(source_text),
        torch=torch.__version__, triton=triton.__version__,
        device_name=torch.cuda.get_device_name() if device.startswith("cuda") else device)


def _kernels(compiled_module) -> list[KernelRecord]:
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    out = []
    for name, value in sorted(vars(compiled_module).items()):
        if not isinstance(value, CachingAutotuner):
            continue
        if len(value.launchers) != 1:
            raise Unsupported(f"kernel {name} was not autotuned to one configuration (was it launched?)")
        cfg = value.launchers[0].config
        meta = dict(value.inductor_meta or {})
        grid, symbolic = _grid(meta, cfg)
        constants = {k: v for k, v in (value.triton_meta or {}).get("constants", {}).items()
                     if isinstance(v, (int, float, bool)) or v is None}
        out.append(KernelRecord(
            name=name, src=value.fn.src, arg_names=list(value.fn.arg_names), config=dict(cfg.kwargs),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=grid, grid_symbolic=symbolic,
            constants=constants, kind=str(value.heuristic_type.name if hasattr(value, "heuristic_type") else "")))
    return out


def _grid(meta: dict, cfg) -> tuple[dict, bool]:
    """The kernel's grid as Python expressions: with the block sizes as names (symbolic) where
    Inductor's rule written that way gives the same grid as its rule for the chosen configuration
    on sample sizes, else that configuration's own."""
    from torch._inductor.runtime import triton_heuristics as th

    def written(grid) -> dict:
        return {"prefix": list(grid.prefix), "x": str(grid.x_grid), "y": str(grid.y_grid), "z": str(grid.z_grid)}

    if not isinstance(getattr(th, meta.get("grid_type", ""), None), type):
        raise Unsupported(f"a kernel has no grid rule Inductor names ({meta.get('grid_type')!r})")
    numeric = written(th.GridExpr.from_meta(meta, cfg))
    try:
        grid = getattr(th, meta["grid_type"])(inductor_meta=meta, mode="python")
        grid.generate({k: k for k in cfg.kwargs})
        symbolic = written(grid)
        for sizes in ({"xnumel": 1000, "ynumel": 77, "znumel": 5, "r0_numel": 300, "r1_numel": 3},
                      {"xnumel": 70000, "ynumel": 100000, "znumel": 1, "r0_numel": 65536, "r1_numel": 1}):
            if _evaluate(symbolic, {**sizes, **cfg.kwargs}) != _evaluate(numeric, {**sizes, **cfg.kwargs}):
                return numeric, False
        return symbolic, True
    except Exception:  # noqa: BLE001 - a rule that needs the numbers (or names what the samples lack)
        return numeric, False


def _evaluate(grid: dict, names: dict) -> tuple:
    scope = dict(names)
    for line in grid["prefix"]:
        exec(line, scope)
    return tuple(eval(str(grid[axis]), scope) for axis in ("x", "y", "z"))


def _input_paths(example_inputs, model, inputs: list, forward_params: list[str], vararg: str) -> list[str]:
    """Where each graph input comes from, as ModelNew.forward reaches it: found by identity among
    the model's parameters and buffers and the forward's arguments."""
    import torch

    owners: dict[int, str] = {}
    for name, t in model.named_buffers(remove_duplicate=False):
        owners.setdefault(id(t), f"self.get_buffer({name!r})")
    for name, t in model.named_parameters(remove_duplicate=False):
        owners.setdefault(id(t), f"self.get_parameter({name!r})")
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor):
            named = forward_params[i] if i < len(forward_params) else f"{vararg}[{i - len(forward_params)}]"
            owners.setdefault(id(t), f"arg:{named}")
    out = []
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise Unsupported(f"graph input {i} is a {type(t).__name__}, not a tensor (dynamic shapes?)")
        if id(t) not in owners:
            raise Unsupported(f"graph input {i} ({tuple(t.shape)}) is neither the model's own tensor nor a "
                              "forward argument")
        out.append(owners[id(t)])
    return out


def library_calls(source_text: str) -> list[str]:
    """The library calls the module's code makes (``extern_kernels.mm``, ``aten.topk``), not the
    names its comments and kernel sources mention."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(source_text)):
        base = getattr(node, "value", None)
        if isinstance(node, ast.Attribute) and ((isinstance(base, ast.Name) and base.id == "aten")
                                                or (isinstance(base, ast.Attribute) and base.attr == "aten")):
            found.add(f"aten.{node.attr}")  # aten.topk(.default), torch.ops.aten.topk
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "extern_kernels":
            found.add(f"extern_kernels.{node.attr}")
    return sorted(found)


def _output_count(out) -> int:
    import torch

    if isinstance(out, torch.Tensor):
        return 0
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return len(out)
    raise Unsupported(f"the forward returns {type(out).__name__}, not a tensor or a tuple of tensors")


def main(argv: list[str] | None = None) -> int:
    import argparse

    from loopwise.kernels.problem import load_problem

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("out")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    problem = load_problem(args.problem, validate=False)
    try:
        record = extract(problem, args.device)
    except Unsupported as exc:
        Path(args.out).write_text(json.dumps({"unsupported": str(exc)}))
        return UNSUPPORTED_EXIT
    Path(args.out).write_text(record.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
