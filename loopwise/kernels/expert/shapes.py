"""Shapes of a traced forward's values, propagated on the meta device."""

from __future__ import annotations


def propagate_shapes(gm, args) -> None:
    """fx's ShapeProp over ``gm`` on the meta device (``node.meta["tensor_meta"]`` for each node
    that makes tensors), ``args`` copied there first (a forward's in-place writes stay off them).
    ShapeProp prints a failing node's traceback on stderr before it raises; this does not.

    Raises:
        RuntimeError: a node could not run on the meta device; the message names it and why.
    """
    import torch
    from torch.fx import Interpreter
    from torch.fx.node import map_aggregate
    from torch.fx.passes.shape_prop import ShapeProp, _extract_tensor_metadata

    class Quiet(ShapeProp):
        def run_node(self, n):
            try:
                result = Interpreter.run_node(self, n)
            except Exception as exc:  # noqa: BLE001 - said in one line, as the caller reports it
                first = next((line for line in str(exc).splitlines() if line.strip()), "")
                raise RuntimeError(f"{n.name} ({getattr(n.target, '__name__', n.target)}): {type(exc).__name__}: {first.strip()[:160]}") from None
            found = []

            def meta_of(value):
                if isinstance(value, torch.Tensor):
                    found.append(value)
                    return _extract_tensor_metadata(value)
                return value

            meta = map_aggregate(result, meta_of)
            if found:
                n.meta["tensor_meta"] = meta
            n.meta["type"] = type(result)
            return result

    try:
        with torch.device("meta"):
            Quiet(gm).propagate(*[a.to("meta").clone() if isinstance(a, torch.Tensor) else a for a in args])
    except RuntimeError as exc:  # fx's interpreter appends the node's listing on further lines
        raise RuntimeError(str(exc).splitlines()[0] if str(exc) else "no message") from None
