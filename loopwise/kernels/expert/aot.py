"""What a candidate's Triton kernel compiles to for Hopper, without a GPU: the candidate's forward
runs on the meta device with its one kernel launch intercepted (real problem sizes cost no memory),
and the launched kernel is compiled ahead of time for sm_90 with the arguments it was given
(pointers and integers divisible by 16 specialised as a launch specialises them). ptxas's report
gives registers per thread and bytes of spill stores; the PTX says whether the products became
Hopper's warp-group wgmma. Used by the tests of the expert's templates and bench/template_spills.py.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import tempfile
from pathlib import Path


def launch(source: str, problem) -> tuple:
    """(kernel, positional args, keyword args) of the one kernel launch ``source``'s ModelNew makes
    on ``problem``'s inputs, run on the meta device."""
    import torch
    from triton.runtime.jit import JITFunction

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"candidate_{abs(hash(source))}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    reference = problem.load_module()
    seen = []

    def run(self, *args, grid, warmup, **kwargs):
        seen.append((self, args, kwargs))

    original, JITFunction.run = JITFunction.run, run
    try:
        with torch.device("meta"):
            model = module.ModelNew(*reference.get_init_inputs())
            model(*reference.get_inputs())
    finally:
        JITFunction.run = original
    if len(seen) != 1:
        raise RuntimeError(f"expected one kernel launch, saw {len(seen)}")
    return seen[0]


def compile_for_hopper(source: str, problem) -> dict:
    """``{"registers", "spill_bytes", "wgmma"}`` of the kernel ``source`` launches on ``problem``,
    compiled for sm_90a."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    kernel, args, kwargs = launch(source, problem)
    kwargs = dict(kwargs)
    options = {"num_warps": kwargs.pop("num_warps", 4), "num_stages": kwargs.pop("num_stages", 3)}
    signature, constants, attrs = {}, {}, {}
    positional = iter(args)
    for i, param in enumerate(kernel.params):
        value = kwargs[param.name] if param.name in kwargs else next(positional)
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constants[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = {torch.float32: "*fp32", torch.int32: "*i32", torch.int64: "*i64"}[value.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            signature[param.name] = "i64" if abs(int(value)) >= 2**31 else "i32"
            if int(value) % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(ASTSource(kernel, signature, constants, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = Path(tmp) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        report = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a", str(ptx), "-o", str(ptx.with_suffix(".cubin"))],
                                capture_output=True, text=True, check=True)
    text = report.stdout + report.stderr
    return {"registers": int(re.search(r"Used (\d+) registers", text).group(1)),
            "spill_bytes": int(re.search(r"(\d+) bytes spill stores", text).group(1)),
            "wgmma": "wgmma.mma_async" in compiled.asm["ptx"]}
