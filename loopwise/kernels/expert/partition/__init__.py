"""Partition: a forward that no whole-forward template covers, split into fused Triton groups and
the operations that stay in PyTorch.

The forward is captured with torch.fx and its shapes propagated on the meta device. Every
operation the elementwise translator can express (:func:`~loopwise.kernels.expert.expressions.expression`), whose inputs are float32,
float16 or bfloat16 tensors of its own output shape, or the model's tensors of those dtypes or
smaller values of the forward (a statistic kept as 1) that broadcast against it, is a fusion
candidate; connected candidates form a group, and each group
output (a value read outside the group, or returned) becomes one Triton pass that computes it from
the group's inputs in fp32 arithmetic (half-precision values upcast as they are loaded, the result
stored in the output's own dtype), recomputing what two outputs share, which for elementwise work
costs less than a second pass over memory; a half-precision value read outside the group is
loaded instead, as rounded there. A group of fewer than :data:`MIN_OPS` operations is left to
PyTorch: a one-operation Triton pass saves no memory traffic and costs a launch (unless it is the
whole forward, replacing PyTorch's one kernel). A gather (embedding lookup, index_select,
``x[idx]``, torch.gather) by an integer index tensor is fusible too: the pass reads the index and
then the table at the positions it names, computing the table's own elementwise work there where no
one else reads that work and it is repeated at most a few times per table element; a relabeling
(flatten, view, reshape, contiguous) between operations of a pass costs it nothing, and a permute
is read through (a copy of it, PyTorch's own kernel, is then the pass's store), and so are slices
(narrow, chunk and split pieces, ``x[:, a:b]``) and ``torch.cat``, each output position read from
the piece that holds it, a value read at several sets of positions computed at each (see
:mod:`gathers`, :mod:`slices` and :mod:`indexed`). Everything else
(convolutions, norms, reductions, pooling, matrix products with their own modules) stays in
PyTorch in this plan, in the traced order, with the reference's own modules and weights: ModelNew runs the
reference's ``__init__``.

A second plan (template kind ``graph_linear``) also makes every product of a float32, float16 or
bfloat16 activation with a model matrix a Triton GEMM over the activation's rows (nn.Linear,
``F.linear``, ``addmm``, ``x @ W``, ``torch.mm`` / ``torch.matmul``, an einsum that is such a
product; see :mod:`products`; a half-precision one on its own type, summed in fp32), with the
elementwise work that reads only its output fused as its epilogue (there a single operation is
worth fusing: it costs no pass of its own). A third (``graph_conv``) makes every
nn.Conv2d (groups 1, zero padding) an implicit GEMM on the tensor cores as well, its epilogue the
elementwise work that reads only its output with tensors of one value per output channel, and
the products GEMMs as in ``graph_linear``: under the fp32 policy tf32x3 on the tensor cores against
cuDNN's fp32 path on the CUDA cores. Another (``graph_norm``) runs every nn.GroupNorm and
nn.BatchNorm in Triton: Welford statistics over chunks (per sample and group; per channel over the
batch in training, the running statistics updated as PyTorch does), then one normalize-and-affine
pass, with the elementwise work whose output only the norm reads computed in both passes instead
of written out and read back (L2/21's add, scale and sigmoid, L2/61's ReLU) and the work that reads
only the norm's output applied before its store (a ReLU after a BatchNorm); a softmax over the
channels of an (N, C, ...) tensor is one pass of that plan too, every channel of a run of positions
in one program (L2/6's, 2/91's after a convolution), and so is every other row operation
(:mod:`rows`: a softmax, log-softmax, reduction or scan over one dimension, leading, middle or
last, or a reduction over a run of them): the input viewed as (outer, reduced, inner), a program
walks a strip of inner columns along the reduced dimension in chunks (a softmax twice), with the
elementwise work only it reads computed as it is read and the work only its output feeds applied
before the store, tensors broadcast as in a fused pass; a max or average pooling (:mod:`pools`:
1-D to 3-D, fixed or adaptive windows) is a part of it in the same way, a program taking a run of
output positions and walking their windows; and so is a ``scaled_dot_product_attention`` without
a mask or dropout (:mod:`attention`), or attention written out as ``softmax(q @ k^T) @ v``: one
flash-style pass, the score matrix never in memory, in the GEMM plans as well. A reduction part
whose value only one pass reads, broadcast at that pass's own positions (a norm written out), walks
its rows a second time and computes that pass there. Where a forward has both products with model
matrices and such parts, ``graph_full`` has the GEMMs of ``graph_linear`` and the parts of
``graph_norm`` together. The search measures the plans side by side, fewest launches first.

The emitted forward is torch.fx's own code for the rewritten graph, so what stays in PyTorch is
exactly what the reference ran; the note and :attr:`Pattern.params` name what was fused and what
was not (the coverage).
"""

from loopwise.kernels.expert.partition.build import partition
from loopwise.kernels.expert.partition.plans import kinds, launches, picks_after_half_gemm, plan, tf32_parts
from loopwise.kernels.expert.partition.records import MIN_OPS

__all__ = ["MIN_OPS", "kinds", "launches", "partition", "picks_after_half_gemm", "plan", "tf32_parts"]
