"""Findings of the micro-profiling tools, what the tools may read, and the moves they may suggest.

A tool looks at one kernel through what was measured or disassembled (a SASS record, ncu metrics,
the roofline class, the launch configuration) and says what it saw as a :class:`Finding`: one
sentence a person can act on, with the numbers behind it, a severity, a score to rank findings of
different tools against each other, and moves in the vocabulary the expert proposer speaks. The
moves are the bridge to the search: a finding that cannot be turned into a proposal is a report,
not guidance.

The moves are :mod:`loopwise.kernels.moves`' typed vocabulary; JSON objects and names (how runs
store them) are read into it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    InstanceOf,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)

from loopwise.core.records import SEVERITIES, Severity, severity_for
from loopwise.core.records import Finding as CoreFinding
from loopwise.kernels.moves import Move, ParameterMove, StructuralMove, move_from_json, moves_text
from loopwise.kernels.profile.classify import Classification, KernelClass
from loopwise.kernels.profile.ncu import KernelMetrics
from loopwise.kernels.profile.sass import KernelSass

__all__ = [
    "H200",
    "INPUTS",
    "KERNEL_CLASSES",
    "SEVERITIES",
    "DeviceFacts",
    "Finding",
    "LaunchConfig",
    "ProblemHints",
    "Severity",
    "KernelSummary",
    "ToolInput",
    "severity_for",
]

KERNEL_CLASSES: tuple[KernelClass, ...] = ("memory_bound", "compute_bound", "latency_bound", "underutilized")
InputName = Literal["sass", "ncu", "classification", "launch", "kernels"]
INPUTS: tuple[InputName, ...] = ("sass", "ncu", "classification", "launch", "kernels")


# A move held typed; its JSON form (and schema) is the {knob: value} object or the name.
_TypedMove = Annotated[InstanceOf[ParameterMove] | InstanceOf[StructuralMove], WithJsonSchema(
    {"anyOf": [{"additionalProperties": {"type": "integer"}, "type": "object"}, {"type": "string"}]})]


class Finding(CoreFinding):
    """What one tool saw in one kernel: the core finding, whose evidence is required and whose
    moves are checked against the kernel move vocabulary.

    Attributes:
        tool: the tool's registered name.
        evidence: the numbers behind the guidance (at least one).
        severity: follows ``score`` (:func:`severity_for`).
        score: 0..1, the estimated fraction of the kernel's time recoverable by acting on it (1.0
            for a precision violation, which no speed-up excuses); ranks findings across tools.
        moves: what to try, in the move vocabulary (:mod:`loopwise.kernels.moves`); given as moves or
            in their JSON form (``{"warps": 8}``, ``"vectorize_loads"``), stored in the JSON form.
    """

    evidence: dict[str, float | int | str | bool]
    moves: tuple[_TypedMove, ...] = ()

    @field_validator("evidence")
    @classmethod
    def _evidence_present(cls, value: dict) -> dict:
        if not value:
            raise ValueError("a finding needs the numbers it is based on")
        return value

    @field_validator("moves", mode="before")
    @classmethod
    def _moves_in_vocabulary(cls, value) -> tuple[Move, ...]:
        return tuple(move_from_json(move) for move in value)

    @field_serializer("moves")
    def _moves_as_json(self, moves: tuple[Move, ...]) -> list[dict[str, int] | str]:
        return [move.to_json() for move in moves]

    @classmethod
    def make(cls, tool: str, guidance: str, evidence: dict[str, float | int | str | bool], score: float,
             moves: list[Move] | tuple[Move, ...] = ()) -> Finding:
        """A finding whose severity follows its score (clamped to 0..1)."""
        score = min(1.0, max(0.0, score))
        return cls(tool=tool, guidance=guidance, evidence=evidence, severity=severity_for(score),
                   score=round(score, 4), moves=tuple(moves))

    def as_note(self):
        """The finding as a proposer reads it (an LLM prompt, the exchange folder): severity, tool
        and guidance as text; the evidence and the suggested moves as evidence."""
        from loopwise.core.propose import FindingNote

        moves = moves_text(self.moves)
        evidence = dict(self.evidence) | ({"moves": moves} if moves else {})
        return FindingNote(text=f"[{self.severity}] {self.tool}: {self.guidance}", evidence=evidence)


class DeviceFacts(BaseModel):
    """Per-SM limits that decide how many blocks are resident at once.

    Defaults are the H100 / H200 (sm_90) values: 132 SMs on the SXM parts; 64 Ki 32-bit registers,
    228 KB shared memory (227 KB usable by one block), 64 resident warps, 32 resident blocks and
    at most 255 registers per thread, from the NVIDIA Hopper tuning guide and the compute-capability
    9.0 column of the CUDA C++ Programming Guide's table of technical specifications. Allocation
    granularities are those of the CUDA occupancy calculator for 9.0: registers per warp in units
    of 256, shared memory in units of 128 bytes, plus 1 KB per block that the runtime reserves.
    """

    model_config = ConfigDict(frozen=True)

    name: str = "NVIDIA H200"
    sm_count: int = 132
    registers_per_sm: int = 65_536
    max_registers_per_thread: int = 255
    register_allocation_unit: int = 256
    shared_bytes_per_sm: int = 228 * 1024
    max_shared_bytes_per_block: int = 227 * 1024
    shared_allocation_unit: int = 128
    reserved_shared_bytes_per_block: int = 1024
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    max_threads_per_block: int = 1024
    warp_size: int = 32
    l2_bytes: int = 62_914_560  # 60 MiB: the H200's, as cudaDevAttrL2CacheSize reports it


H200 = DeviceFacts()


class LaunchConfig(BaseModel):
    """How the kernel is launched.

    Attributes:
        grid_blocks: programs (thread blocks) in the grid, all dimensions multiplied.
        num_warps: warps per block; ``block_threads`` is derived from it when not given.
        block_threads: threads per block.
        block: the proposer's ``block`` move in effect (elements or tile per program), if known;
            tools suggest concrete neighbours of it.
    """

    model_config = ConfigDict(frozen=True)

    grid_blocks: int | None = Field(default=None, ge=1)
    num_warps: int | None = Field(default=None, ge=1)
    block_threads: int | None = Field(default=None, ge=1)
    block: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> LaunchConfig:
        if self.num_warps is not None and self.block_threads is not None:
            if self.num_warps != -(-self.block_threads // 32):
                raise ValueError(f"{self.block_threads} threads per block are not {self.num_warps} warps")
        return self

    @property
    def threads(self) -> int | None:
        """Threads per block, from either field."""
        if self.block_threads is not None:
            return self.block_threads
        return None if self.num_warps is None else self.num_warps * 32

    @property
    def warps(self) -> int | None:
        """Warps per block, from either field."""
        if self.num_warps is not None:
            return self.num_warps
        return None if self.block_threads is None else -(-self.block_threads // 32)


class ProblemHints(BaseModel):
    """What the problem says about the kernel that its binary does not.

    Attributes:
        matmul_shaped: the kernel computes a matrix product (or a convolution lowered to one), so a
            tensor-core path exists for it.
        precision: ``fp32``: results must keep fp32 accuracy (no tf32/fp16/bf16 operands without
            compensation); ``relaxed``: tf32, bf16 and fp16 tensor-core inputs are acceptable.
        input_dtype: element type of the kernel's matmul inputs (``fp32``, ``fp16``, ``bf16``), if known.
        min_dram_bytes: the fewest DRAM bytes the work can move (each input read once, each output
            written once), if known: the byte budget a kernel (or one forward call) is held to.
        compensated: the candidate's source asks for a compensated tensor-core product (Triton's
            ``input_precision="tf32x3"``, a 3xTF32 or bf16x3 split), whose tf32 / bf16 operands keep
            fp32 accuracy: SASS shows the same operand types as a plain tf32 product. A claim, not a
            proof: the judge's precision check is what rejects a plain product under ``fp32``.
    """

    model_config = ConfigDict(frozen=True)

    matmul_shaped: bool = False
    precision: Literal["fp32", "relaxed"] = "fp32"
    input_dtype: Literal["fp32", "fp16", "bf16"] | None = None
    min_dram_bytes: float | None = Field(default=None, gt=0)
    compensated: bool = False


class KernelSummary(BaseModel):
    """One kernel launch of a forward call, as the cross-kernel tools see it.

    Attributes:
        name: kernel name.
        duration_s: its GPU time, seconds.
        dram_bytes: DRAM bytes read plus written, if measured.
        grid_blocks: blocks launched, if known.
        kernel_class: its roofline class, if classified.
        gap_before_s: host-side idle time between the end of the previous kernel and the start of this
            one (launch overhead, Python), if known; ``None`` for the first kernel or when unknown.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    duration_s: float = Field(gt=0)
    dram_bytes: float | None = Field(default=None, ge=0)
    grid_blocks: int | None = Field(default=None, ge=1)
    kernel_class: KernelClass | None = None
    gap_before_s: float | None = Field(default=None, ge=0)


class ToolInput(BaseModel):
    """Everything a tool may read about one kernel; every part is optional.

    Attributes:
        sass: the kernel's static SASS record (``SassProfile.kernel(...)``).
        ncu: measured metrics of one launch.
        classification: its roofline verdict.
        launch: its launch configuration.
        hints: what the problem says (matmul-shaped, precision policy, byte budget).
        device: per-SM limits (H200 by default).
        kernels: every kernel launch of one forward call, in launch order, for the cross-kernel tools.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    sass: KernelSass | None = None
    ncu: KernelMetrics | None = None
    classification: Classification | None = None
    launch: LaunchConfig | None = None
    hints: ProblemHints = Field(default_factory=ProblemHints)
    device: DeviceFacts = H200
    kernels: tuple[KernelSummary, ...] | None = None

    def has(self, name: InputName) -> bool:
        """Whether the input ``name`` (one of :data:`INPUTS`) is present."""
        return getattr(self, name) is not None

    def has_all(self, names: frozenset[str] | set[str] | tuple[str, ...]) -> bool:
        """Whether every input of ``names`` is present."""
        return all(getattr(self, n) is not None for n in names)
