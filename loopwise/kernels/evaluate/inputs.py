"""Seeded inputs and models, built the same way in the judge and in the sandbox.

KernelBench's contract: seed 42 before building each model (so weights match), a fresh seed and a
fresh ``get_inputs()`` for every trial. Stress distributions keep the problem's shapes, dtypes and
integer tensors (indices, labels) but redraw floating tensors as mixed-sign normal values, which
exposes reduced-precision arithmetic through cancellation (see FACTS §4.3b).
"""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

MODEL_SEED = 42


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # numpy is optional for problems
        pass


def to_device(value: Any, device: str) -> Any:
    """A private copy on ``device`` (a copy even when already there, so no caller shares memory)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device, copy=True)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def draw_inputs(module: ModuleType, seed: int, device: str | None = None) -> list:
    """Calls the problem's ``get_inputs()`` under ``seed``: CPU tensors, as the problem makes them;
    with a CUDA ``device``, under that device as the default for new tensors, so ``torch.rand`` and
    friends draw on the GPU from its seeded generator (the same distribution, other values). A
    6 GiB ``torch.rand`` takes seconds on the CPU's single generator and milliseconds there. A
    ``get_inputs`` that cannot run that way (it hands tensors to numpy, say) is drawn on the CPU."""
    seed_everything(seed)
    if device is not None and device.startswith("cuda"):
        import torch

        try:
            with torch.device(device):
                return list(module.get_inputs())
        except Exception:  # noqa: BLE001 - drawn on the CPU below, as the problem wrote it
            seed_everything(seed)
    return list(module.get_inputs())


def init_inputs(module: ModuleType, device: str) -> list:
    return [to_device(v, device) for v in module.get_init_inputs()]


def build_model(cls: type, args: list, device: str):
    """Builds ``cls(*args)`` under KernelBench's model seed, in eval-free no-grad style."""
    import torch

    with torch.no_grad():
        seed_everything(MODEL_SEED)
        model = cls(*args)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
    return model


def stress_variant(inputs: list, seed: int, distribution: str, device: str) -> list:
    """Stress inputs derived from a draw of the problem's own inputs (already on ``device``).

    ``centered``: each floating tensor shifted to zero mean and scaled to four times its own range
    (at least [-4, 4]), with exact zeros
    kept, so mixed signs and cancellation appear while structure survives (triangular and diagonal
    zeros, symmetry). ``randn`` / ``randn_abs``: fresh normal values of the same shape.
    """
    import torch

    if distribution == "kernelbench":
        return inputs
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    out = []
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            if distribution == "centered":
                fresh = _centered(value)
            else:
                fresh = torch.randn(value.shape, generator=gen, device=device, dtype=torch.float32)
                if distribution == "randn_abs":
                    fresh = fresh.abs()
            value = fresh.to(value.dtype)
        out.append(value)
    return out


# Elements per slice where two tensors on different devices are compared (see same_bits), and
# where a large tensor's centered stress variant is made.
SLICE = 1 << 24


def _centered(value):
    """``value`` shifted to zero mean and scaled to four times its own range (at least [-4, 4]),
    exact zeros kept, computed in float64 (the ``centered`` stress distribution). A tensor of more
    than ``SLICE`` elements is done slice by slice: whole float64 temporaries of a multi-GiB input
    would take several times its size."""
    import torch

    if value.numel() <= SLICE:
        x = value.double()
        centered = x - x.mean()
        # Wider than the problem's own range, so thresholds it never crosses are crossed.
        span = 4.0 * max(float(x.abs().max()), 1.0)
        scale = centered.abs().max().clamp_min(1e-30)
        return torch.where(x == 0, torch.zeros_like(x), centered / scale * span)
    flat = value.reshape(-1)
    parts = flat.split(SLICE)
    mean = torch.stack([part.double().sum() for part in parts]).sum() / flat.numel()
    low, high = (v.double() for v in torch.aminmax(flat))
    span = 4.0 * max(float(torch.maximum(low.abs(), high.abs())), 1.0)
    # the largest |x - mean| (float64 subtraction is monotone, so the extremes give it)
    scale = torch.maximum(high - mean, mean - low).clamp_min(1e-30)
    out = torch.empty(flat.shape, dtype=value.dtype, device=value.device)
    for part, into in zip(parts, out.split(SLICE)):
        x = part.double()
        into.copy_(torch.where(x == 0, torch.zeros_like(x), (x - mean) / scale * span))
    return out.view(value.shape)


def _bits(t):
    """A floating tensor's memory as integers of its width (so NaN payloads compare); others as they are."""
    import torch

    if t.is_floating_point() and t.element_size() in (2, 4, 8):
        return t.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def same_bits(a, b) -> bool:
    """Bitwise equality of two tensors (NaN payloads included) of one shape and dtype; strides may
    differ, and so may devices: ``b`` elsewhere (a host copy of a device tensor) is compared slice
    by slice on ``a``'s device, never copied there whole."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return equal_across(_bits(a), _bits(b))


def equal_across(a, b) -> bool:
    """``torch.equal`` of two same-shaped tensors, ``b`` possibly on another device than ``a``:
    then compared slice by slice on ``a``'s device, never copied there whole."""
    import torch

    if a.device == b.device:
        return bool(torch.equal(a, b))
    return all(bool(torch.equal(x, y.to(a.device))) for x, y in zip(a.reshape(-1).split(SLICE),
                                                                     b.reshape(-1).split(SLICE)))


def changed(after, before, moved: bool = True) -> bool:
    """Whether a caller's tensor is no longer what it was (``before``, a copy made before the call):
    other bits, dtype, shape or (with ``moved``) device. Strides alone are no change: the caller
    reads the same values, and outputs' strides are not judged either. Without ``moved``,
    ``before`` may be kept on another device than the tensor called with (the judge's host copy of
    a draw), and only its values count."""
    return (moved and after.device != before.device) or not same_bits(after, before)


def changed_at(after: list, before: list, moved: bool = True, versions: list | None = None) -> list[int]:
    """The argument indices of the tensors a call changed (:func:`changed`), ``before`` holding
    copies of the arguments made before it. With ``versions`` (:func:`version_counts` of ``after`` before
    the call) a tensor the call wrote in place counts as changed even where it wrote the bits it
    held (an ``out`` that already held the result: an uninitialised one can, where the allocator
    hands back a freed copy of it)."""
    import torch

    written = rewritten(after, versions) if versions else set()
    return [i for i, (a, b) in enumerate(zip(after, before))
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and (i in written or changed(a, b, moved))]


def rewritten(args: list, versions: list) -> set[int]:
    """The argument indices whose version counter moved from ``versions`` (:func:`version_counts`
    of ``args`` before a call): the tensors the call wrote in place, whatever bits it left."""
    return {i for i, (was, now) in enumerate(zip(versions, version_counts(args))) if was is not None and now != was}


def version_counts(args: list) -> list:
    """Each tensor argument's version counter (PyTorch counts its in-place writes; None for anything
    else and for inference tensors, which keep none), to tell later whether a call wrote it."""
    import torch

    found = []
    for a in args:
        try:
            found.append(a._version if isinstance(a, torch.Tensor) else None)
        except RuntimeError:  # an inference tensor
            found.append(None)
    return found


def clone_args(args: Any) -> Any:
    """Deep copy of tensors, also inside nested lists and tuples."""
    import torch

    if isinstance(args, torch.Tensor):
        return args.clone()
    if isinstance(args, (list, tuple)):
        return type(args)(clone_args(a) for a in args)
    return args


class DeviceSend:
    """Copies of tensors for a sandbox, made on the device from a memory pool of their own.

    A CUDA IPC handle opens the whole allocator segment a tensor lives in, so a judge tensor that
    shared a segment with a sent copy (a reference output) would be readable from the sandbox.
    Sent copies therefore come from a private pool, whose segments hold nothing but other sent
    copies, which the sandbox has seen anyway.
    """

    def __init__(self, device: str) -> None:
        import torch

        self.device = device
        self.pool = torch.cuda.MemPool()

    def __call__(self, args: Any) -> Any:
        import torch

        with torch.cuda.use_mem_pool(self.pool):
            return to_device(args, self.device)

    def release(self) -> None:
        """Later copies come from a fresh pool; the old one gives its unused segments (copies sent
        before, which the sandbox has let go of) back to the driver. A pool keeps every segment it
        ever had, out of ``torch.cuda.empty_cache``'s reach while it lives; the copies still in use
        stay in the old pool, which serves nothing else, until they are freed and the cache is
        emptied again."""
        import torch

        self.pool = torch.cuda.MemPool()


def for_sandbox(args: Any, send: DeviceSend | None) -> Any:
    """A private copy of ``args`` to send to a sandbox: on the device when ``send`` is given (CUDA
    tensors cross the pipe as IPC handles, with no trip through host memory), else a host copy
    (shared memory), also of inputs drawn on the device. Either way the judge never reads the copy again."""
    return send(args) if send is not None else to_device(args, "cpu")


def tensors_in(value: Any) -> list:
    """Every tensor in ``value``: a tensor, or (nested) lists, tuples and dict values of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors_in(item)]
    return []


def nbytes(value: Any) -> int:
    """Bytes of every tensor in ``value`` (see :func:`tensors_in`)."""
    return sum(t.numel() * t.element_size() for t in tensors_in(value))


def flatten_outputs(out: Any) -> list:
    """A model returns a tensor or a (nested) tuple/list of tensors; we compare them in order."""
    if isinstance(out, (list, tuple)):
        flat: list = []
        for item in out:
            flat.extend(flatten_outputs(item))
        return flat
    return [out]
