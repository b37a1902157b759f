"""The partitioner's records: a fused elementwise pass, a norm (or row, pool, attention, recurrent) part in Triton, a GEMM with its epilogue."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


MIN_OPS = 2  # operations a group needs before it is worth a Triton pass of its own


@dataclass(frozen=True)
class Group:
    """One fused pass: ``out = expr(x0, x1, ..., p0, p1, ...)`` elementwise."""

    inputs: int  # activations x0, x1, ... (all of the output's shape)
    operands: tuple[str, ...]  # the model's tensors p0, p1, ... (attribute paths), broadcast
    body: tuple[str, ...]  # one Triton statement per operation
    expr: str
    ops: tuple[str, ...]
    # a pass that reads or writes fp16 / bf16: every load upcast to fp32, the store cast to out_dtype
    upcast: bool = False
    out_dtype: str = "float32"
    # a pass that reads through gathers or relabelings (partition/indexed.py): its index arithmetic
    # and loads, the launcher's statements computing the output's ``shape`` and ``int_args``
    prelude: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()
    int_args: tuple[str, ...] = ()
    wide: bool = False  # 64-bit index arithmetic: some index it computes reaches 2**31 at the captured shapes


SCANS = ("cumsum", "cumprod", "logcumsumexp", "cummax", "cummin")  # the row operations whose output is a scan
# the scans whose steps round (a running maximum or minimum is exact in any precision)
ROUNDING_SCANS = ("cumsum", "cumprod", "logcumsumexp")


@dataclass(frozen=True)
class RowOp:
    """What a row part (a :class:`Norm` of kind ``row``) computes along dimensions ``first``..``last``
    of its input, viewed as (outer, reduced, inner): a softmax or log-softmax, a reduction (capture/reduce.py's
    names: sum, mean, max, min, argmax, argmin, logsumexp, var, std, norm) or a scan (cumsum, cumprod,
    logcumsumexp, cummax and cummin's values)."""

    op: str
    first: int  # the dimensions, non-negative; first == last but for a reduction over a run of them
    last: int
    keepdim: bool = False  # a reduction's reduced dimensions kept (as 1)
    correction: int = 1  # var / std's
    neutral: str = "0.0"  # the value a masked entry holds: the reduction's identity
    out_dtype: str = "float32"  # the part's stored output (after its epilogue)
    # a softmax whose row is all -inf gives zeros there, not NaN: PyTorch's _safe_softmax, which
    # scaled_dot_product_attention applies to a query no key takes part for
    safe: bool = False
    # a reduction over dimensions that are not a run (first and last then the outermost and
    # innermost of them): the input's ``rank``, its kept positions the outer ones, no inner
    dims: tuple[int, ...] = ()
    rank: int = 0
    length: int = 0  # a scan's entries per line at the captured shape (0 for the other operations)
    # a scan of its input flipped along its dimension, flipped back (``flip(cumsum(flip(x, [d]), d),
    # [d])``): each line walked from its last entry, read and written where it lies
    reverse: bool = False
    # a scan of its input shifted one entry along its dimension, the neutral value first
    # (``cumprod(cat([ones_like(f[:, :1]), f[:, :-1]], 1))``, an exclusive scan): entry r reads r - 1
    exclusive: bool = False
    # one program per strip of inner columns (contiguous) of each outer slice: STRIP wide, narrowed
    # (down to NARROWEST) while there are fewer than FEWEST_PROGRAMS programs to keep the GPU busy;
    # while there are still fewer and each would walk more than LONGEST_WALK entries, the reduced
    # dimension is split among programs (partial results stored, then merged by a second launch)
    STRIP: ClassVar[int] = 64
    NARROWEST: ClassVar[int] = 16
    FEWEST_PROGRAMS: ClassVar[int] = 128
    LONGEST_WALK: ClassVar[int] = 65536
    # a part that walks its rows again (Norm.spread) after the splits' partial results: every program
    # of the second launch merges all of them, so their count is capped (the merges grow as its square)
    SPREAD_SPLITS: ClassVar[int] = 256

    @property
    def reduces(self) -> bool:
        """Whether the output drops (or keeps as 1) the dimensions, rather than having the input's shape."""
        return self.op not in ("softmax", "log_softmax", *SCANS)

    @property
    def scans(self) -> bool:
        return self.op in SCANS

    @property
    def rounds(self) -> bool:
        """Whether the operation is a scan whose steps round (a sum, a product, a log-sum-exp)."""
        return self.op in ROUNDING_SCANS


@dataclass(frozen=True)
class PoolOp:
    """What a pool part (a :class:`Norm` of kind ``pool``) computes over the last ``len(kernel)``
    dimensions of its input (the ones before are outer positions): the maximum or the mean of each
    output position's window. A fixed window (``max_pool2d``, ``avg_pool1d``) is ``kernel`` entries
    ``dilation`` apart per dimension, starting at ``o * stride - padding``; an adaptive one
    (``adaptive_max_pool2d``) spans ``floor(o * L / O)`` to ``ceil((o + 1) * L / O)`` of a
    dimension of length L pooled to ``out_size`` O. Entries outside the input are skipped; a mean
    divides by the whole window when it counts the padding (``count_include_pad``), else by the
    entries read. A depthwise convolution (reduce ``conv``: groups == channels, one input and one
    output channel a group) is a fixed window too, each channel's entries weighted by its own kernel
    (the model's tensor ``weight``, shaped (C, 1, *kernel)) and its ``bias`` added; a zero padding
    before it (``F.pad``) is folded into ``padding`` / ``pad_after``, so entries outside the input
    count as zeros."""

    op: str  # the operation's name: max_pool1d, avg_pool2d, adaptive_max_pool2d, conv1d, ...
    reduce: str  # "max", "avg" or "conv"
    kernel: tuple[int, ...] = ()  # per pooled dimension, for a fixed window
    stride: tuple[int, ...] = ()
    padding: tuple[int, ...] = ()  # before each dimension's entries
    dilation: tuple[int, ...] = ()
    out_size: tuple = ()  # per pooled dimension, for an adaptive window (None: the input's length)
    include_pad: bool = True
    out_dtype: str = "float32"
    pad_after: tuple[int, ...] = ()  # after each dimension's entries, where it differs from ``padding``
    weight: str = ""  # a depthwise convolution's weights and bias (attribute paths; bias "" for none)
    bias: str = ""
    # about as many window entries as fit BLOCK_W lanes are read per step; outputs per program
    # narrowed (down to one) while there are fewer than FEWEST_PROGRAMS programs
    WIDEST: ClassVar[int] = 64
    FEWEST_PROGRAMS: ClassVar[int] = 128

    @property
    def dims(self) -> int:
        return len(self.out_size or self.kernel)

    @property
    def adaptive(self) -> bool:
        return bool(self.out_size)

    @property
    def after(self) -> tuple[int, ...]:
        """The padding after each dimension's entries."""
        return self.pad_after or self.padding

    @property
    def paths(self) -> tuple[str, ...]:
        """The model's tensors the part's launcher takes, in its order: a convolution's weights and bias."""
        return tuple(path for path in (self.weight, self.bias) if path)


@dataclass(frozen=True)
class AttentionOp:
    """What an attention part (a :class:`Norm` of kind ``attention``, see :mod:`.attention`)
    computes: ``F.scaled_dot_product_attention(q, k, v)`` without dropout, as one
    flash-style pass (templates/_attention.j2), the head dimension taken ``block_d`` and the value
    dimension ``block_dv`` at a time (:func:`~loopwise.kernels.expert.attention_plan.attention_values`),
    its tiles the attention template's default moves."""

    causal: bool
    scale: float  # the scores' scale (1 / sqrt(head dimension) unless the call gives one)
    block_d: int
    block_dv: int
    stages: int
    dtype: str  # q's, k's, v's and the output's
    mask: int = 0  # the call's attn_mask (the part's fourth input): 0 none, 1 boolean, 2 added to the scores
    # a query whose keys are all masked gets NaN (attention written out: softmax of a row of -inf), not zeros
    empty_nan: bool = False


@dataclass(frozen=True)
class RecurrentOp:
    """What a recurrent part (a :class:`Norm` of kind ``recurrent``, see :mod:`.recurrent`) computes:
    an nn.LSTM, nn.GRU or nn.RNN module as PyTorch defines it, layer by layer. Each layer is one
    Triton GEMM for the input projections of all its time steps (both directions at once), then one
    Triton kernel that walks the time steps inside itself: a program per block of ROWS batch rows
    and direction owns every hidden unit of its rows, so no program waits on another within a step
    (there is no portable way for Triton programs to wait on each other)."""

    mode: str  # PyTorch's: "LSTM", "GRU", "RNN_TANH" or "RNN_RELU"
    layers: int
    hidden: int
    directions: int  # 2 when bidirectional
    batch_first: bool
    bias: bool
    # the state the call passes (h0; (h0, c0) for an LSTM) rather than zeros; the part's launcher
    # reads whatever it is given, this only names it
    state: bool = False
    ROWS: ClassVar[int] = 16  # batch rows per program: the smallest M of a tensor-core product
    GATES: ClassVar[dict[str, int]] = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}

    @property
    def gates(self) -> int:
        """Rows of the layer's weight matrices per hidden unit (i, f, g, o; r, z, n; one)."""
        return self.GATES[self.mode]

    @property
    def module_name(self) -> str:
        return {"LSTM": "LSTM", "GRU": "GRU"}.get(self.mode, "RNN")


@dataclass(frozen=True)
class ScoresOp:
    """An attention's scores as the epilogue of the product ``q @ k^T`` (a :class:`Gemm` of two
    activations; see :mod:`.split_attention`): the product times ``scale``, then, where ``causal``,
    -inf right of the diagonal (query i sees keys 0..i, the top-left diagonal), then the part's
    third input read as the mask, broadcast to the scores: ``mask`` 0 none, 1 boolean (a key takes
    part where it is True), 2 added to the scores, 3 boolean the other way (masked_fill's: True
    drops a key)."""

    scale: float
    causal: bool = False
    mask: int = 0


@dataclass(frozen=True)
class BatchNormCall:
    """An ``F.batch_norm`` call as a BatchNorm part (a :class:`Norm` of kind ``batch``) reads it:
    the attribute paths of the model's running statistics, weight and bias, and the call's options
    (training: the batch's statistics normalize and the running ones move by ``momentum``; else the
    running ones normalize)."""

    running_mean: str
    running_var: str
    weight: str
    bias: str
    training: bool
    momentum: float
    eps: float

    @property
    def paths(self) -> tuple[str, str, str, str]:
        """The tensors the part's launcher takes, in its order."""
        return (self.running_mean, self.running_var, self.weight, self.bias)


@dataclass(frozen=True)
class Norm:
    """One nn.GroupNorm or nn.BatchNorm1d/2d/3d as Triton passes: Welford statistics over chunks
    (per sample and group; per channel over the batch for a BatchNorm in training, which also
    updates the running statistics as PyTorch does; a BatchNorm in eval reads its running ones),
    then normalize and the affine map. Or (kind ``layer``) an nn.LayerNorm as one pass, a row of at
    most LAYER_WHOLE elements held whole in a program, a longer one walked twice in chunks of that
    many (its tensors then hold one value per position of the normalized dimensions). Or (kind ``row``, see :class:`RowOp`) a
    softmax, log-softmax, reduction or scan over any dimension as one pass (two reads for a softmax),
    its prologue's and epilogue's tensors broadcast as a fused pass's are, or (kind ``pool``, see
    :class:`PoolOp`) a max or average pooling, fixed or adaptive, as one pass. Or (kind ``softmax``) a softmax over the channels of an
    (N, C, ...) tensor (KernelBench L2/6, 2/91: after a convolution) as one pass: each program holds
    all C channels of a run of positions, so the maximum, the sum and the output come from one read.
    Or (kind ``attention``, see :class:`AttentionOp`) a flash-style attention call, or (kind
    ``recurrent``, see :class:`RecurrentOp`) an nn.LSTM / nn.GRU / nn.RNN module, neither with a
    prologue or an epilogue.
    The elementwise work whose output only the norm reads is its prologue, computed where it is
    read (for a GroupNorm or BatchNorm in both passes: recomputed, cheaper than a pass over memory);
    the elementwise work that reads only the norm's output is its epilogue, applied before the store."""

    module: str  # the norm's attribute path ("" for a softmax: nothing of the model to read)
    kind: str  # "group", "batch", "layer", "softmax" or "row"
    inputs: int  # activations x0, x1, ... of the norm's input shape
    operands: tuple[str, ...]  # the prologue's tensors p0, p1, ..., one value per channel
    body: tuple[str, ...]
    expr: str
    ops: tuple[str, ...]  # the prologue's, the norm's and the epilogue's
    post_operands: tuple[str, ...] = ()  # the epilogue's tensors q0, q1, ..., one value per channel
    post_body: tuple[str, ...] = ()
    post_expr: str = "y"
    # a row part's prologue that reads through gathers, slices or permutes (see Group): its index
    # arithmetic and loads, the launcher's statements computing the input's ``shape`` and ``int_args``
    prelude: tuple[str, ...] = ()
    sizes: tuple[str, ...] = ()
    int_args: tuple[str, ...] = ()
    row: RowOp | None = None  # a row part's operation
    # a reduction part's second walk over its rows: the pass over its input's positions that reads
    # its value broadcast (its operand ``spread_stat``), computed there and stored as the part's
    # output (the value itself stored first, read back by the program; norms.py's _spread)
    spread: Group | None = None
    spread_stat: int = -1
    pool: PoolOp | None = None  # a pool part's operation
    call: BatchNormCall | None = None  # a functional batch_norm's tensors and options (module "")
    attention: AttentionOp | None = None  # an attention part's call (its inputs x0, x1, x2: q, k, v; x3 its mask)
    recurrent: RecurrentOp | None = None  # a recurrent part's module (its inputs x0 the sequence, x1 the state or None)
    out_dtype: str = "float32"  # the stored output's, as the captured graph has it (after the epilogue)
    wide: bool = False  # 64-bit index arithmetic: some index it computes reaches 2**31 at the captured shapes
    LAYER_WHOLE: ClassVar[int] = 16384  # a LayerNorm's row held whole in one program up to this many elements


@dataclass(frozen=True)
class Gemm:
    """A product with a model matrix (nn.Linear, ``x @ W``, a product einsum; see
    :mod:`.products`) or an nn.Conv2d as a Triton GEMM: ``out = epilogue(x0 @ W + b)`` over the
    rows of x0, the epilogue reading per-column tensors q0, q1, ... (attribute paths). Or a batch
    of products of two activations (``weight`` ""; the products of an attention the flash part
    does not compute, :mod:`.split_attention`): the part's second input is W, (..., N, K), or
    (..., K, N) with ``weight_kn``, its batch dimensions x0's."""

    module: str  # what the GEMM computes, for its docstring: the module's attribute path, or the operation and its matrix
    weight: str  # the matrix's (the convolution's weights') attribute path
    bias: str  # the bias's attribute path, "" for none
    operands: tuple[str, ...]  # epilogue tensors, each one value per output column (channel)
    body: tuple[str, ...]
    expr: str
    ops: tuple[str, ...]
    conv: tuple = ()  # a Conv2d: (kh, kw, stride, padding, dilation, in_channels); () for a product
    # the input's and weights' dtype (a Linear's may be float16 / bfloat16: products summed in fp32,
    # the bias and the epilogue applied in fp32) and the stored output's
    dtype: str = "float32"
    out_dtype: str = "float32"
    weight_kn: bool = False  # the matrix is stored (K, N) (``x @ W``), not (N, K) as nn.Linear's
    summed_axis: int = -1  # the input's dimension summed, from the end; the others are the rows in order
    batched: bool = False  # a batch of matrices (B, K, N) and a (B, M, K) input: one product per batch entry
    scores: ScoresOp | None = None  # an attention's scale and masks, applied to the product (weight "")
    # x0 holds causal attention weights, zeros right of its diagonal: a row tile's K loop stops at its last row
    causal_rows: bool = False

    @property
    def has_bias(self) -> bool:
        return bool(self.bias)


# each part's launcher, by kind (the rest are GroupNorm / BatchNorm)
LAUNCHERS = {"softmax": "softmax", "layer": "lnorm", "row": "rowop", "pool": "poolop", "attention": "attn",
             "recurrent": "rnn"}

