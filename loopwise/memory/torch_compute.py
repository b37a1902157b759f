"""The compute operators of an exported torch graph as loop nests: elementwise (with numpy
broadcasting), convolutions (a following eval-mode batch norm folded in), linear, addmm, matmul,
row-wise softmax / layer norm, embedding, pooling and reductions."""

from __future__ import annotations

import math

from loopwise.memory.ir import Access, Operator, Tensor, conv2d_nest, linear_walk, matmul_nest, reduction_nest
from loopwise.memory.torch_copies import VIEWS
from loopwise.memory.views import Ref, flat_values, strides


class ComputeOperators:
    """The handlers of :class:`loopwise.memory.torch_import` 's builder for compute operators."""

    # -- compute operators --------------------------------------------------------------------
    def _elementwise(self, node, val) -> None:
        short = str(node.target).split(".")[1].rstrip("_") or "op"
        outs = val if isinstance(val, (list, tuple)) else [val]
        shape = tuple(int(d) for d in outs[0].shape)
        dims = [f"d{j}" for j in range(len(shape))]
        x = self.ref(node.args[0])
        if short in ("_native_batch_norm_legit_no_training", "batch_norm"):
            if self._fold_batch_norm(node, outs[0], x):
                return
            reads = [x.pairs(tuple(dims))]
            for arg in node.args[1:5]:
                r = self.ref(arg)
                if r is not None:
                    reads.append(r.pairs((dims[1],)))
        else:
            reads = [self._broadcast_read(r, shape, dims) for r in (self.ref(a) for a in flat_values((node.args, node.kwargs)))
                     if r is not None]
        out = self._real(node.name, outs[0])
        self.env[node.name] = [out] + [None] * (len(outs) - 1) if isinstance(val, (list, tuple)) else out
        self._emit(f"{short}:{node.name}", dict(zip(dims, shape)), reads, [out.pairs(tuple(dims))])

    def _fold_batch_norm(self, node, val, x: Ref) -> bool:
        """A batch norm whose input is a convolution's output read by nothing else: folded into that
        convolution (scale into the weights, shift into a per-channel bias)."""
        producer = node.args[0]
        if x.base is None or x.base != producer.name or self.users.get(producer.name, 0) != 1 or not self.ops:
            return False
        conv = self.ops[-1]
        if not conv.name.startswith("convolution:") or conv.writes[0].tensor != x.base:
            return False
        k_index = conv.writes[0].index[1]
        bias = f"{conv.name.split(':', 1)[1]}_folded_bias"
        has_bias = any(len(t.shape) == 1 for t in conv.tensors)  # the shift joins the bias it has
        if not has_bias:
            t = Tensor(bias, (x.shape[1],), self.elem)
            self.weights.add(bias)
            self.ops[-1] = Operator(conv.name, conv.dims, conv.tensors + (t,), reads=conv.reads + (Access(bias, (k_index,)),),
                                    writes=conv.writes, macs=conv.macs, coupled=conv.coupled)
        out = Ref(x.shape, x.base, x.base_shape, x.to_base, x.elem)
        self.env[node.name] = [out, None, None] if isinstance(node.meta.get("val"), (list, tuple)) else out
        self.folded.append("batch_norm")
        return True

    def _op_convolution(self, node, val) -> None:
        x, w = self.ref(node.args[0]), self.ref(node.args[1])
        b = self.ref(node.args[2]) if len(node.args) > 2 else None
        stride, padding, dilation = node.args[3], node.args[4], node.args[5]
        transposed, groups = bool(node.args[6]), int(node.args[8])
        self._conv(node, val, x, w, b, stride, padding, dilation, groups, transposed)

    def _op_conv2d(self, node, val) -> None:
        a = list(node.args) + [None, [1, 1], [0, 0], [1, 1], 1][len(node.args) - 2:]
        self._conv(node, val, self.ref(a[0]), self.ref(a[1]), self.ref(a[2]), a[3], a[4], a[5], int(a[6]), False)

    def _op_conv_transpose2d(self, node, val) -> None:
        a = list(node.args) + [None, [1, 1], [0, 0], [0, 0], 1, [1, 1]][len(node.args) - 2:]
        self._conv(node, val, self.ref(a[0]), self.ref(a[1]), self.ref(a[2]), a[3], a[4], a[7], int(a[6]), True)

    def _conv(self, node, val, x, w, b, stride, padding, dilation, groups, transposed) -> None:
        if len(x.shape) != 4:
            raise ValueError(f"a {len(x.shape) - 2}-d convolution: 2-d ones are imported")
        if isinstance(padding, str):
            raise ValueError(f"padding={padding!r}: give explicit padding")
        out = self._real(node.name, val)
        k = out.shape[1]
        r, s = w.shape[2:]
        nest = conv2d_nest(x.shape[0], x.shape[1], k, r, s, groups, out.shape[2:], x.shape[2:], _pair(stride),
                           _pair(padding), _pair(dilation), transposed)
        reads = [x.pairs(nest.reads[0]), w.pairs(nest.reads[1])] + ([b.pairs(nest.bias)] if b is not None else [])
        self.env[node.name] = out
        self._emit(f"convolution:{node.name}", nest.dims, reads, [out.pairs(nest.write)], nest.macs)

    def _op_linear(self, node, val) -> None:
        x, w = self.ref(node.args[0]), self.ref(node.args[1])
        b = self.ref(node.args[2]) if len(node.args) > 2 else None
        lead = [f"l{j}" for j in range(len(x.shape) - 1)]
        n, k = w.shape
        out = self._out(node, val)
        dims = dict(zip(lead, x.shape[:-1])) | {"n": n, "k": k}
        reads = [x.pairs((*lead, "k")), w.pairs(("n", "k"))]
        if b is not None:
            reads.append(b.pairs(("n",)))
        self._emit(f"linear:{node.name}", dims, reads, [out.pairs((*lead, "n"))], math.prod(x.shape[:-1]) * n * k)

    def _op_addmm(self, node, val) -> None:
        bias, x, w = (self.ref(a) for a in node.args[:3])
        m, k = x.shape
        n = w.shape[1]
        # a product of a flattened tensor ([b*s, k], as GPT-2's Conv1D and most 2-D matmuls see their
        # input) is the same product over the unflattened rows: its loops keep the batch and token
        # dimensions, so a slab over the batch reaches it, and its output is stored unflattened
        lead_dims, x_ref = ("m",), x
        source = node.args[1]
        if str(getattr(source, "target", "")) in VIEWS:
            unflat = self.ref(source.args[0])
            if unflat is not None and len(unflat.shape) > 2 and unflat.shape[-1] == k and math.prod(unflat.shape[:-1]) == m:
                lead_dims, x_ref = tuple(f"l{j}" for j in range(len(unflat.shape) - 1)), unflat
        lead_shape = x_ref.shape[:-1] if x_ref is not x else (m,)
        out_shape = (*lead_shape, n)
        out = Ref(out_shape, node.name, out_shape, lambda ix: ix, self._elem(val))
        self.env[node.name] = out.reshaped((m, n)) if x_ref is not x else out
        rows = [f"{st}*{d}" for st, d in zip(strides(lead_shape), lead_dims)]
        row = " + ".join(rows) if len(rows) > 1 else lead_dims[0]
        reads = [x_ref.pairs((*lead_dims, "k")), w.pairs(("k", "n"))]
        if bias is not None:
            reads.append(bias.pairs(("n",)) if bias.shape in ((n,), (1, n)) and len(bias.shape) == 1 else
                         self._broadcast_read(bias, (m, n), [row, "n"]))
        self._emit(f"addmm:{node.name}", dict(zip(lead_dims, lead_shape)) | {"n": n, "k": k}, reads,
                   [out.pairs((*lead_dims, "n"))], m * n * k)

    def _matmul(self, node, val, a: Ref, b: Ref) -> None:
        out = self._out(node, val)
        nest = matmul_nest(a.shape, b.shape, out.shape)
        self._emit(f"matmul:{node.name}", nest.dims, [a.pairs(nest.reads[0]), b.pairs(nest.reads[1])],
                   [out.pairs(nest.write)], nest.macs)

    def _op_matmul(self, node, val) -> None:
        self._matmul(node, val, self.ref(node.args[0]), self.ref(node.args[1]))

    _op_mm = _op_bmm = _op_matmul

    def _rowwise(self, node, val, dims_whole: int, params=()) -> None:
        x = self.ref(node.args[0])
        shape = tuple(int(d) for d in (val[0] if isinstance(val, (list, tuple)) else val).shape)
        dims = [f"d{j}" for j in range(len(shape))]
        reads = [x.pairs(tuple(dims))]
        for p in params:
            r = self.ref(p)
            if r is not None:
                reads.append(r.pairs(tuple(dims[len(dims) - len(r.shape):])))
        out = self._real(node.name, val[0] if isinstance(val, (list, tuple)) else val)
        self.env[node.name] = [out, None, None] if isinstance(val, (list, tuple)) else out
        short = str(node.target).split(".")[1]
        self._emit(f"{short}:{node.name}", dict(zip(dims, shape)), reads, [out.pairs(tuple(dims))],
                   coupled=dims[len(dims) - dims_whole:])

    def _op_softmax(self, node, val) -> None:
        x = self.ref(node.args[0])
        dim = node.args[1] % len(x.shape)
        if dim != len(x.shape) - 1:
            raise ValueError(f"softmax over dimension {dim} of {len(x.shape)}: the last dimension is imported")
        self._rowwise(node, val, 1)

    _op__softmax = _op_log_softmax = _op__log_softmax = _op_softmax

    def _op_layer_norm(self, node, val) -> None:
        self._rowwise(node, val, len(node.args[1]), params=node.args[2:4])

    _op_native_layer_norm = _op_layer_norm

    def _op_embedding(self, node, val) -> None:
        weight, ids = self.ref(node.args[0]), self.ref(node.args[1])
        out = self._out(node, val)
        dims = [f"d{j}" for j in range(len(out.shape))]
        rows, width = weight.shape
        positions = math.prod(out.shape[:-1])
        # distinct rows in the order of the positions: the most rows a gather of this size can touch
        linear = " + ".join(f"{st}*{d}" for st, d in zip(strides(out.shape[:-1]), dims[:-1])) or "0"
        row = linear if positions <= rows else f"({linear}) mod {rows}"
        reads = [weight.pairs((row, dims[-1])),
                 self._broadcast_read(ids, out.shape[:-1], dims[:-1]) if ids.base is not None else None]
        self._emit(f"embedding:{node.name}", dict(zip(dims, out.shape)), reads, [out.pairs(tuple(dims))])

    def _pool(self, node, val, kernel, stride, padding, dilation=(1, 1), kind="pool") -> None:
        x = self.ref(node.args[0])
        out_val = val[0] if isinstance(val, (list, tuple)) else val
        out = self._real(node.name, out_val)
        self.env[node.name] = [out, None] if isinstance(val, (list, tuple)) else out
        n, c, p, q = out.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _pair(kernel), _pair(stride or kernel), _pair(padding), _pair(dilation)
        dims = {"n": n, "c": c, "p": p, "q": q, "r": kh, "s": kw}
        reads = [x.pairs(("n", "c", f"{sh}*p + {dh}*r - {ph}", f"{sw}*q + {dw}*s - {pw}"))]
        self._emit(f"{kind}:{node.name}", dims, reads, [out.pairs(("n", "c", "p", "q"))])

    def _op_max_pool2d(self, node, val) -> None:
        a = list(node.args) + [None, 0, 1][len(node.args) - 2:]
        self._pool(node, val, a[1], a[2], a[3], a[4], "max_pool2d")

    _op_max_pool2d_with_indices = _op_max_pool2d

    def _op_avg_pool2d(self, node, val) -> None:
        a = list(node.args) + [None, 0][len(node.args) - 2:]
        self._pool(node, val, a[1], a[2], a[3], (1, 1), "avg_pool2d")

    def _op_adaptive_avg_pool2d(self, node, val) -> None:
        x = self.ref(node.args[0])
        h, w = x.shape[-2:]
        oh, ow = val.shape[-2:]
        if h % oh or w % ow:
            raise ValueError(f"adaptive pooling {h}x{w} -> {oh}x{ow} with uneven windows")
        self._pool(node, val, (h // oh, w // ow), (h // oh, w // ow), (0, 0), (1, 1), "adaptive_avg_pool2d")

    _op__adaptive_avg_pool2d = _op_adaptive_avg_pool2d

    def _op_mean(self, node, val) -> None:
        """A reduction over the given dimensions (all of them when none are given): the loops span
        the input, read whole; the output is indexed by the dimensions kept."""
        x = self.ref(node.args[0])
        axes = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        if axes is None or isinstance(axes, bool) or axes in ([], ()):  # var(x, unbiased): every dimension
            axes = list(range(len(x.shape)))
        axes = [axes] if isinstance(axes, int) else list(axes)
        keep = bool(node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False))
        dims, read, write = reduction_nest(x.shape, axes, keep)
        out_val = val[0] if isinstance(val, (list, tuple)) else val
        if len(write) != len(out_val.shape):
            return self._unsupported(node, val, str(node.target).split(".")[1])
        out = self._real(node.name, out_val)
        self.env[node.name] = [out, None] if isinstance(val, (list, tuple)) else out
        short = str(node.target).split(".")[1]
        self._emit(f"{short}:{node.name}", dims, [x.pairs(read)], [out.pairs(write)])

    _op_sum = _op_amax = _op_amin = _op_prod = _op_var = _op_std = _op_logsumexp = _op_any = _op_all = _op_mean



def _pair(v) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = list(v)
    return (int(v[0]), int(v[-1]))

