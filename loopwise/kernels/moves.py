"""The kernel engine's moves: one typed, frozen vocabulary of what to try next on a kernel.

The profiling tools suggest moves in their findings, the expert proposer turns them into template
settings, and the LLM prompt shows them as text. A move is one of two kinds:

* a :class:`ParameterMove`, ``block=512, warps=4``: concrete settings of the expert proposer's
  template knobs (:data:`PARAMETER_MOVES`): ``block`` is the elements (or tile) one program
  handles, ``warps`` the warps per program, ``chunk`` the elements a program walks in one pass.
  A value is the setting to try, not a delta.
* a :class:`StructuralMove`, ``vectorize_loads``: the short name of a rewrite no single knob
  expresses (:data:`STRUCTURAL_MOVES`, each with the sentence that explains it).

Both are checked when made (an unknown knob or name is an error), have a stable text form
(:attr:`~ParameterMove.text`, what prompts and reports show) and a JSON form (:meth:`~ParameterMove.to_json`,
what the run store and ``--json`` output hold: a ``{knob: value}`` object or the bare name), read back
by :func:`move_from_json`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "PARAMETER_MOVES",
    "STRUCTURAL_MOVES",
    "Move",
    "MoveKind",
    "ParameterMove",
    "StructuralMove",
    "move_from_json",
    "moves_text",
    "parse_moves",
]

# The expert proposer's Triton knobs (keys of ``proposer.SPACE`` for its Triton templates); a test
# keeps the two in step. Its CUTLASS variants' knobs (tile shapes, clusters, schedules, stages) are
# not named by tools: structural moves reach them. Not imported from there: the proposer pulls in
# the capture machinery (torch.fx), tools need none of it.
PARAMETER_MOVES: tuple[str, ...] = ("block", "warps", "chunk")

STRUCTURAL_MOVES: dict[str, str] = {
    "vectorize_loads": "load and store 16 bytes per thread (contiguous, 16-byte aligned pointers, "
                       "divisibility hints such as tl.multiple_of, vector types in CUDA)",
    "coalesce_accesses": "make neighbouring threads touch neighbouring addresses (transpose through "
                         "shared memory, change the layout, or gather whole rows)",
    "use_tensor_cores": "run the matmul on tensor cores (tl.dot with tf32/bf16/fp16 inputs, wgmma)",
    "use_tf32x3": "keep fp32 accuracy on tensor cores by splitting each fp32 operand into a tf32 "
                  "high part and a tf32 remainder and summing three tf32 products (3xTF32)",
    "use_bf16x3": "the same split into three bf16 parts (bf16x3), for more tensor-core throughput",
    "use_ieee_fp32": "compute the product in full fp32 (input_precision='ieee', no tf32/fp16 "
                     "tensor-core path) when the precision policy demands fp32",
    "match_input_precision": "feed the tensor cores the inputs' own type (fp16 as fp16, bf16 as "
                             "bf16) instead of converting to another format",
    "reduce_registers": "hold fewer live values per thread (smaller tile, fewer pipeline stages, "
                        "recompute instead of keep, or lift a register cap such as maxnreg)",
    "reduce_shared_memory": "use less shared memory per block (smaller tile, fewer stages)",
    "persistent_kernel": "launch one resident program per slot and loop over the work inside it, so "
                         "no partial last wave is left",
    "split_k": "split the reduction dimension of a matmul over more programs when its output has "
               "too few tiles to fill the GPU",
    "fuse_kernels": "fuse this kernel with its neighbours so small launches and their memory round "
                    "trips disappear",
    "use_cuda_graphs": "capture the forward call's launches in a CUDA graph (torch.cuda.graphs, "
                       "mode='reduce-overhead') so the host launches them once, without per-kernel gaps",
    "swizzle_shared_memory": "pad or swizzle the shared-memory tile layout so the threads of a warp hit "
                             "distinct banks",
    "uniform_branches": "make branches uniform per warp: regroup work so a warp's threads take one path, "
                        "replace short branches with selects (tl.where), blocks a multiple of 32 threads",
    "reorder_blocks": "order the programs so those sharing inputs run together while the inputs are in "
                      "L2 (grouped / swizzled program ids, larger tiles that reuse what they load)",
}


class MoveKind(enum.Enum):
    """Which kind of action a move is."""

    PARAMETER = "parameter"
    STRUCTURAL = "structural"


@dataclass(frozen=True)
class ParameterMove:
    """Concrete settings of the template knobs, in the order given.

    Attributes:
        settings: ``(knob, value)`` pairs; each knob one of :data:`PARAMETER_MOVES`, at most once,
            each value a positive integer.
    """

    settings: tuple[tuple[str, int], ...]
    kind: ClassVar[MoveKind] = MoveKind.PARAMETER

    def __post_init__(self) -> None:
        knobs = [knob for knob, _ in self.settings]
        values = [value for _, value in self.settings]
        if (not self.settings or set(knobs) - set(PARAMETER_MOVES) or len(set(knobs)) != len(knobs)
                or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values)):
            raise ValueError(f"parameter move {dict(self.settings)!r} must set {PARAMETER_MOVES} to positive integers")

    @classmethod
    def of(cls, **settings: int) -> ParameterMove:
        """The move that sets ``settings`` (``ParameterMove.of(block=512, warps=4)``)."""
        return cls(tuple(settings.items()))

    @property
    def text(self) -> str:
        """``block=512, warps=4``: the form prompts and reports show."""
        return ", ".join(f"{knob}={value}" for knob, value in self.settings)

    def to_json(self) -> dict[str, int]:
        """``{"block": 512, "warps": 4}``."""
        return dict(self.settings)


@dataclass(frozen=True)
class StructuralMove:
    """A rewrite no single knob expresses, by its name in :data:`STRUCTURAL_MOVES`."""

    name: str
    kind: ClassVar[MoveKind] = MoveKind.STRUCTURAL

    def __post_init__(self) -> None:
        if self.name not in STRUCTURAL_MOVES:
            raise ValueError(f"unknown structural move {self.name!r}; known: {sorted(STRUCTURAL_MOVES)}")

    @property
    def description(self) -> str:
        """The sentence that says what the rewrite does."""
        return STRUCTURAL_MOVES[self.name]

    @property
    def text(self) -> str:
        """The name: the form prompts and reports show."""
        return self.name

    def to_json(self) -> str:
        """The name."""
        return self.name


Move = ParameterMove | StructuralMove


def move_from_json(value: Move | Mapping[str, int] | str) -> Move:
    """The move whose JSON form is ``value`` (a ``{knob: value}`` object or a structural move's
    name, as stored by :meth:`ParameterMove.to_json` and :meth:`StructuralMove.to_json`); a move
    is returned as it is.

    Raises:
        ValueError: ``value`` is outside the vocabulary.
    """
    if isinstance(value, (ParameterMove, StructuralMove)):
        return value
    if isinstance(value, str):
        return StructuralMove(value)
    if isinstance(value, Mapping):
        return ParameterMove(tuple(value.items()))
    raise ValueError(f"a move is a {{knob: value}} object or a structural move's name, not {value!r}")


def moves_text(moves: Iterable[Move]) -> str:
    """The moves' text forms joined by ``"; "`` (``warps=4; fuse_kernels``), as a finding's note
    carries them; :func:`parse_moves` reads it back."""
    return "; ".join(move.text for move in moves)


def parse_moves(text: str) -> list[Move]:
    """The moves of a :func:`moves_text` line, in order; a part outside the vocabulary is skipped."""
    out: list[Move] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        try:
            if "=" in part:
                settings = [item.partition("=") for item in part.split(",")]
                out.append(ParameterMove(tuple((k.strip(), int(v)) for k, _, v in settings)))
            else:
                out.append(StructuralMove(part))
        except ValueError:
            continue
    return out
