"""einops calls in a traced forward, recorded as the torch operations they stand for.

einops picks the array library of its argument by type (``einops._backends.get_backend``), and an
fx Proxy is no type it knows, so a forward that calls ``rearrange``, ``repeat``, ``reduce`` or
``einops.einsum`` cannot be traced as it is. einops finds its backends among the subclasses of
``AbstractBackend``; :func:`register` adds one for fx proxies that is torch's backend (reshape,
permute, expand, sum, ...) applied to the proxy, so each einops call enters the graph as the torch
calls it makes on a tensor, and the graph, the plans and the files written from it have no einops
in them.

einops computes its recipe from the argument's shape, so only the shaped trace
(:func:`loopwise.kernels.expert.functionalize.trace` with inputs), whose proxies answer shape
questions with numbers, gets through; the symbolic trace fails as before and is retried shaped.
The backend module is einops' own, not part of its documented API: what is relied on is
``AbstractBackend`` subclass discovery, ``framework_name`` (a module that must be imported) and
torch's backend's methods, as in einops 0.8.
"""

from __future__ import annotations

_backend = None  # the backend class, held here: einops finds it through __subclasses__, a weak reference


def register() -> None:
    """Makes einops accept fx proxies (once per process); does nothing where einops is not
    installed (then no forward can call it)."""
    global _backend
    if _backend is not None:
        return
    try:
        from einops import _backends
    except ImportError:
        return
    import torch

    class FxProxyBackend(_backends.TorchBackend):
        """torch's backend for ``torch.fx.Proxy`` arguments (each call recorded in the graph)."""

        framework_name = "torch.fx"

        def is_appropriate_type(self, tensor) -> bool:
            return isinstance(tensor, torch.fx.Proxy)

        def shape(self, x):
            shape = x.shape
            if not isinstance(shape, torch.Size):  # a symbolic proxy: einops cannot plan on it
                raise TypeError("einops needs the argument's shape as numbers (a shaped trace)")
            return tuple(shape)

        def is_float_type(self, x) -> bool:
            return x.dtype in (torch.float16, torch.float32, torch.float64, torch.bfloat16)

    _backend = FxProxyBackend
