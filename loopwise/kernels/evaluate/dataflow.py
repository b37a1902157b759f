"""Does the output depend on anything the candidate's own kernels touched?

A decoy launches a kernel of its own on a scratch buffer while PyTorch computes the answer, so
"it launched a custom kernel" is true and meaningless. During one forward call we follow storage
through every PyTorch operation (a dispatch mode sees each aten call, also those made from C++
extensions) and mark every tensor passed to or returned by a counted launch (Triton, extension
functions) as touched. An operation's fresh outputs depend on what its inputs depend on; views and
in-place results add to their storage's mark. When own kernels ran and no output depends on any
storage they touched, the kernels did not contribute to the result.

Storage is keyed by its data pointer: a freed block reused later can carry a stale mark, which can
only hide a decoy (a missed detection), never accuse an honest candidate. A kernel launched past the
counted paths is work the flow cannot see: the call is followed with a Triton launch hook set, so
that launchers that call compiled kernels directly only while no hook is set (the compiler seed's)
go through Triton's counted path.
"""

from __future__ import annotations


def _storage(t) -> int | None:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001 - tensors without storage (meta, sparse, subclasses)
        return None


def _tensors(tree) -> list:
    import torch
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class Flow:
    """Storage marks for one forward call."""

    def __init__(self) -> None:
        self.touched: dict[int, bool] = {}
        self.launches = 0

    def mark(self, tensors) -> None:
        for t in tensors:
            ptr = _storage(t)
            if ptr is not None:
                self.touched[ptr] = True

    def depends(self, t) -> bool:
        return bool(self.touched.get(_storage(t)))

    def on_launch(self, args, kwargs, result) -> None:
        self.launches += 1
        self.mark(_tensors((args, kwargs, result)))

    def on_op(self, func, args, kwargs, out) -> None:
        ins = _tensors((args, kwargs))
        tainted = any(self.depends(t) for t in ins)
        in_ptrs = {_storage(t) for t in ins}
        written = _tensors(out) + self._mutated_args(func, args, kwargs)
        for t in written:
            ptr = _storage(t)
            if ptr is None:
                continue
            if ptr in in_ptrs:  # a view or an in-place result: the storage keeps its mark
                self.touched[ptr] = self.touched.get(ptr, False) or tainted
            else:  # fresh memory: it holds what its inputs hold, nothing older
                self.touched[ptr] = tainted

    @staticmethod
    def _mutated_args(func, args, kwargs) -> list:
        out = []
        try:
            schema = func._schema.arguments
        except AttributeError:
            return out
        for i, arg in enumerate(schema):
            info = getattr(arg, "alias_info", None)
            if info is None or not getattr(info, "is_write", False):
                continue
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            out += _tensors(value)
        return out


def trace(call):
    """Runs ``call()`` with the flow followed; returns (result, flow)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from loopwise.kernels.evaluate import launches

    flow = Flow()

    class _Follow(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            flow.on_op(func, args, kwargs, out)
            return out

    launches.LISTENERS.append(flow.on_launch)
    try:
        # (launchers that skip Triton's launch path while no hook is set take it here: their
        # kernels' tensors are marked, not left as work the flow cannot see)
        with launches.through_triton(), _Follow():
            result = call()
    finally:
        launches.LISTENERS.remove(flow.on_launch)
    return result, flow


def contributes(outputs: list, flow: Flow) -> bool | None:
    """Whether any tensor output depends on own-kernel work; None when nothing can be said
    (no counted launch, or no tensor output)."""
    import torch

    tensors = [o for o in outputs if isinstance(o, torch.Tensor)]
    if not flow.launches or not tensors:
        return None
    return any(flow.depends(o) for o in tensors)
