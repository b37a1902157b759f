"""The copy operators of an exported torch graph (transpose, permute, squeeze, expand, slice,
select, split, cat, pad): folded into their readers' access maps, so they move no bytes."""

from __future__ import annotations

from loopwise.memory.views import Ref, split_parts

IDENTITY = {"aten.contiguous.default", "aten.clone.default", "aten.dropout.default", "aten.alias.default",
            "aten.detach.default", "aten.to.dtype", "aten.to.dtype_layout", "aten._to_copy.default",
            "aten.lift_fresh_copy.default", "aten.feature_dropout.default", "aten.type_as.default",
            # eval-mode dropout, also in place (torchvision's EfficientNet: nn.Dropout(inplace=True))
            "aten.dropout_.default", "aten.feature_dropout_.default", "aten.alpha_dropout.default",
            "aten.alpha_dropout_.default", "aten.feature_alpha_dropout.default",
            "aten.feature_alpha_dropout_.default"}
VIEWS = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.flatten.using_ints"}


class CopyOperators:
    """The handlers of :class:`loopwise.memory.torch_import` 's builder for copy operators."""

    # -- copy operators -----------------------------------------------------------------------
    def _op_transpose(self, node, val) -> None:
        src = self.ref(node.args[0])
        n = len(src.shape)
        a, b = node.args[1] % n, node.args[2] % n
        perm = list(range(n))
        perm[a], perm[b] = perm[b], perm[a]
        self._permuted(node, val, src, perm, "transpose")

    def _op_t(self, node, val) -> None:
        src = self.ref(node.args[0])
        self._permuted(node, val, src, list(reversed(range(len(src.shape)))), "t")

    def _op_permute(self, node, val) -> None:
        src = self.ref(node.args[0])
        self._permuted(node, val, src, [d % len(src.shape) for d in node.args[1]], "permute")

    def _permuted(self, node, val, src, perm, kind) -> None:
        inverse = [perm.index(j) for j in range(len(perm))]  # source dim j is view dim inverse[j]
        self.env[node.name] = src.view(val.shape, lambda ix, inv=inverse: tuple(ix[inv[j]] for j in range(len(inv))))
        self.folded.append(kind)

    def _op_unsqueeze(self, node, val) -> None:
        src = self.ref(node.args[0])
        d = node.args[1] % (len(src.shape) + 1)
        self.env[node.name] = src.view(val.shape, lambda ix, d=d: ix[:d] + ix[d + 1:])
        self.folded.append("unsqueeze")

    def _op_squeeze(self, node, val) -> None:
        src = self.ref(node.args[0])
        self.env[node.name] = src.reshaped(val.shape)
        self.folded.append("squeeze")

    def _op_expand(self, node, val) -> None:
        src = self.ref(node.args[0])
        lead = len(val.shape) - len(src.shape)
        self.env[node.name] = src.view(
            val.shape, lambda ix, lead=lead, s=src.shape: tuple("0" if s[j] == 1 else ix[lead + j] for j in range(len(s))))
        self.folded.append("expand")

    def _op_slice(self, node, val) -> None:
        src = self.ref(node.args[0])
        n = len(src.shape)
        dim = (node.args[1] if len(node.args) > 1 else 0) % n
        start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
        start = max(0, start + src.shape[dim]) if start < 0 else min(start, src.shape[dim])
        step = node.args[4] if len(node.args) > 4 else 1
        def shift(ix, d=dim, a=start, s=step):
            e = ix[d] if s == 1 else f"{s}*({ix[d]})"
            return ix[:d] + (f"{a} + {e}" if a else e,) + ix[d + 1:]

        self.env[node.name] = src.view(val.shape, shift)
        self.folded.append("slice")

    def _op_select(self, node, val) -> None:
        src = self.ref(node.args[0])
        dim = node.args[1] % len(src.shape)
        i = node.args[2] % src.shape[dim]
        self.env[node.name] = src.view(val.shape, lambda ix, d=dim, i=i: ix[:d] + (str(i),) + ix[d:])
        self.folded.append("select")

    def _op_split(self, node, val) -> None:
        src = self.ref(node.args[0])
        dim = (node.args[2] if len(node.args) > 2 else 0) % len(src.shape)
        parts, start = [], 0
        for v in val:
            parts.append(src.view(v.shape, lambda ix, d=dim, a=start: ix[:d] + (f"{a} + {ix[d]}" if a else ix[d],)
                                      + ix[d + 1:]))
            start += int(v.shape[dim])
        self.env[node.name] = parts
        self.folded.append("split")

    _op_split_with_sizes = _op_split

    def _op_chunk(self, node, val) -> None:
        self._op_split(node, val)

    def _op_cat(self, node, val) -> None:
        """A concatenation folded into its readers: each reads the part its index falls in."""
        inputs = [self.ref(a) for a in node.args[0]]
        dim = (node.args[1] if len(node.args) > 1 else 0) % len(val.shape)
        if any(r is None for r in inputs):
            return self._unsupported(node, val, "cat")
        parts, offset = [], 0
        for r in inputs:
            if r.base is not None:
                parts.append((r, tuple(offset if j == dim else 0 for j in range(len(val.shape)))))
            offset += r.shape[dim]
        shape = tuple(int(d) for d in val.shape)
        self.env[node.name] = Ref(shape, "concat", shape, lambda ix: ix, inputs[0].elem, parts=tuple(parts))
        self.folded.append("cat")

    _op_concat = _op_concatenate = _op_cat

    def _op_constant_pad_nd(self, node, val) -> None:
        """Zero padding folded into the readers: a read in the padding touches no element."""
        src = self.ref(node.args[0])
        pads = list(node.args[1])
        value = node.args[2] if len(node.args) > 2 else 0
        if value not in (0, 0.0):
            return self._unsupported(node, val, "constant_pad_nd")
        before = [0] * len(src.shape)
        for j in range(len(pads) // 2):
            before[len(src.shape) - 1 - j] = pads[2 * j]
        shape = tuple(int(d) for d in val.shape)
        self.env[node.name] = Ref(shape, "pad", shape, lambda ix: ix, src.elem, parts=((src, tuple(before)),))
        self.folded.append("pad")

    def _op_pad(self, node, val) -> None:
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        if mode != "constant":
            return self._unsupported(node, val, f"pad({mode})")
        self._op_constant_pad_nd(node, val)

