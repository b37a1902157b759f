"""What a candidate's Triton kernel compiles to for Hopper, without a GPU: the candidate's forward
runs on the meta device with its one kernel launch intercepted (real problem sizes cost no memory),
and the launched kernel is compiled ahead of time for sm_90 with the arguments it was given
(pointers and integers divisible by 16 specialised as a launch specialises them), with the SASS
tool's compile and ptxas report: registers per thread and bytes of spill stores, with the shared
memory Triton allots a block; the PTX says whether the products became Hopper's warp-group wgmma.
Used by the tests of the expert's templates and bench/template_spills.py.
"""

from __future__ import annotations

import tempfile


def _pointer_types() -> dict:
    """Triton's pointer type for each torch dtype a launch passes a tensor of."""
    import torch

    return {torch.float32: "*fp32", torch.float64: "*fp64", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int32: "*i32",
            torch.int64: "*i64", torch.uint8: "*u8"}


def launch(source: str, problem, kernel: str | None = None, pick: int | None = None) -> tuple:
    """(kernel, positional args, keyword args) of the one kernel launch ``source``'s ModelNew makes
    on ``problem``'s inputs, run on the meta device; with ``kernel``, of the one launch of the
    kernel of that name among its launches (with ``pick``, of its launch of that index)."""
    import torch
    from triton.runtime.jit import JITFunction

    from loopwise.kernels.evaluate.sandbox import _import_candidate

    with tempfile.TemporaryDirectory() as tmp:  # Triton has read the kernels' source once imported
        module = _import_candidate(source, tmp)
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
    if kernel is not None:
        seen = [s for s in seen if s[0].__name__ == kernel]
    if pick is not None and kernel is not None and -len(seen) <= pick < len(seen):
        seen = [seen[pick]]
    if len(seen) != 1:
        raise RuntimeError(f"expected one kernel launch{' of ' + kernel if kernel else ''}, saw {len(seen)}")
    return seen[0]


def compile_for_hopper(source: str, problem, kernel: str | None = None, pick: int | None = None) -> dict:
    """``{"registers", "spill_bytes", "shared_bytes", "wgmma"}`` of the kernel ``source`` launches
    on ``problem`` (the one named ``kernel`` where it launches several), compiled for sm_90a with the profiling tools'
    :func:`~loopwise.kernels.profile.sass_tools.compile_triton` and
    :func:`~loopwise.kernels.profile.sass_tools.ptxas_resources`; a launch asking more shared memory than
    :data:`~loopwise.kernels.expert.generate.HOPPER_SHARED_BYTES` fails. ``pick``: which launch of
    ``kernel``, where it is launched several times."""
    import torch

    from loopwise.kernels.profile.sass_tools import compile_triton, ptxas_resources

    kernel, args, kwargs = launch(source, problem, kernel, pick)
    kwargs = dict(kwargs)
    num_warps, num_stages = kwargs.pop("num_warps", 4), kwargs.pop("num_stages", 3)
    signature, constants, aligned = {}, {}, []
    positional = iter(args)
    for param in kernel.params:
        value = kwargs[param.name] if param.name in kwargs else next(positional)
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constants[param.name] = value
            continue
        if isinstance(value, torch.Tensor):
            signature[param.name] = _pointer_types()[value.dtype]
        else:
            signature[param.name] = "i64" if abs(int(value)) >= 2**31 else "i32"
        if isinstance(value, torch.Tensor) or int(value) % 16 == 0:
            aligned.append(param.name)
    compiled = compile_triton(kernel, signature, constants, num_warps=num_warps, num_stages=num_stages,
                              aligned=tuple(aligned))
    resources = ptxas_resources(compiled.asm["ptx"], "sm_90a")[compiled.metadata.name]
    return {"registers": resources.registers, "spill_bytes": resources.spill_store_bytes,
            "shared_bytes": compiled.metadata.shared, "wgmma": "wgmma.mma_async" in compiled.asm["ptx"]}
