"""Instruction-level profile of compiled kernels: SASS from ``nvdisasm`` / ``cuobjdump``, parsed.

Why SASS: the source of a candidate says what the author meant, the SASS says what the GPU will
run. Narrow loads, local-memory spills, a tensor-core path in the wrong precision or no tensor-core
path at all are visible here without a GPU, for any kernel compiled ahead of time (a Triton cubin
for sm_90, or a CUDA extension build). The tools ship with the CUDA toolkit and with Triton.

This module holds the records and the parser of SASS text; :mod:`.sass_tools` finds and runs the
tools (and compiles Triton kernels ahead of time) and hands their output to it.
"""

from __future__ import annotations

import re
from collections import Counter

from pydantic import BaseModel, ConfigDict, Field


# ----------------------------------------------------------------------------------------------
# Records
# ----------------------------------------------------------------------------------------------

class TensorCoreOp(BaseModel):
    """One tensor-core instruction variant and how often it occurs.

    Attributes:
        opcode: ``HMMA`` (mma.sync), ``HGMMA`` (wgmma, fp16/bf16/tf32), ``IMMA`` / ``IGMMA`` (int8),
            ``QGMMA`` (fp8), ``DMMA`` (fp64), ...
        shape: the M×N×K the opcode names (``64x128x16``; ``16816`` for HMMA), if it does.
        accumulator: accumulator type, e.g. ``F32`` or ``F16``.
        inputs: operand type. The opcode omits it for fp16 (HMMA / HGMMA), so ``F16`` is filled in.
        variant: the opcode's full modifier string, e.g. ``HGMMA.64x128x8.F32.TF32``.
        count: static occurrences in the kernel.
    """

    model_config = ConfigDict(frozen=True)

    opcode: str
    shape: str | None
    accumulator: str | None
    inputs: str
    variant: str
    count: int


class Resources(BaseModel):
    """Per-thread and per-block resources of one kernel function.

    Attributes:
        registers: registers per thread (``cuobjdump -res-usage`` REG, or ptxas ``-v``).
        stack_bytes: stack frame per thread; non-zero with spills or local arrays.
        local_bytes: local memory per thread reported for the function.
        static_shared_bytes: shared memory declared in the cubin (``__shared__``).
        dynamic_shared_bytes: shared memory requested at launch (Triton's ``metadata.shared``).
        constant_bytes: constant bank 0 bytes (kernel parameters live there).
        spill_store_bytes / spill_load_bytes: from ptxas ``-v`` on the PTX; ``None`` if not run.
        sources: where the numbers came from (``res-usage``, ``ptxas``, ``triton-metadata``).
    """

    model_config = ConfigDict(frozen=True)

    registers: int | None = None
    stack_bytes: int | None = None
    local_bytes: int | None = None
    static_shared_bytes: int | None = None
    dynamic_shared_bytes: int | None = None
    constant_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    sources: tuple[str, ...] = ()

    @property
    def shared_bytes(self) -> int | None:
        """Shared memory a block needs: the larger of what the cubin declares and the launch asks."""
        known = [v for v in (self.static_shared_bytes, self.dynamic_shared_bytes) if v is not None]
        return max(known) if known else None

    @property
    def spills(self) -> bool | None:
        """Whether the compiler spilled registers to local memory (``None``: ptxas not run)."""
        if self.spill_store_bytes is None and self.spill_load_bytes is None:
            return None
        return bool(self.spill_store_bytes) or bool(self.spill_load_bytes)


class KernelSass(BaseModel):
    """Static instruction profile of one kernel function.

    Counts are static (instructions in the code, not executed ones): a loop body counts once. That
    is enough to tell *which* path a kernel takes; how often it runs needs a GPU profiler.

    Attributes:
        name: the function symbol (mangled for CUDA C++).
        instructions: instructions, without the ``NOP`` padding after the last ``EXIT``.
        opcodes: count per base opcode (``LDG``, ``FFMA``, ``HGMMA``, ...).
        families: count per family, see :data:`FAMILIES`.
        tensor_core: the tensor-core variants, most frequent first.
        global_loads / global_stores / shared_loads / shared_stores: bytes per thread access →
            count. ``{4: 12, 16: 3}`` means twelve 32-bit and three 128-bit accesses.
        async_copies: ``LDGSTS`` (cp.async global → shared) by bytes per access.
        tma_copies: bulk / TMA copies (``UTMALDG``, ``UBLKCP``, ...), whose width is a tile.
        local_loads / local_stores: ``LDL`` / ``STL`` counts (spills or local arrays).
        local_load_bytes / local_store_bytes: bytes per thread those instructions move.
        branches: ``BRA`` / ``BRX`` / ``JMP`` / ``CALL``; predicated_branches: those under ``@P``.
        resources: registers, shared memory, spills; ``None`` if they could not be read.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    instructions: int
    opcodes: dict[str, int]
    families: dict[str, int]
    tensor_core: tuple[TensorCoreOp, ...] = ()
    global_loads: dict[int, int] = Field(default_factory=dict)
    global_stores: dict[int, int] = Field(default_factory=dict)
    shared_loads: dict[int, int] = Field(default_factory=dict)
    shared_stores: dict[int, int] = Field(default_factory=dict)
    async_copies: dict[int, int] = Field(default_factory=dict)
    tma_copies: int = 0
    local_loads: int = 0
    local_stores: int = 0
    local_load_bytes: int = 0
    local_store_bytes: int = 0
    branches: int = 0
    predicated_branches: int = 0
    resources: Resources | None = None

    @property
    def tensor_core_instructions(self) -> int:
        """How many tensor-core (MMA) instructions the kernel has; zero means no tensor-core path."""
        return sum(op.count for op in self.tensor_core)

    @property
    def tensor_core_inputs(self) -> dict[str, int]:
        """Tensor-core instructions by operand type (``TF32``, ``F16``, ``BF16``, ``E4M3``, ...)."""
        out: Counter[str] = Counter()
        for op in self.tensor_core:
            out[op.inputs] += op.count
        return dict(out)

    def narrow_global_loads(self, below_bytes: int = 16) -> int:
        """Global loads (plain and cp.async) narrower than ``below_bytes`` per thread."""
        return sum(n for width, n in (*self.global_loads.items(), *self.async_copies.items())
                   if width < below_bytes)

    def wide_global_loads(self, at_least_bytes: int = 16) -> int:
        """Global loads (plain and cp.async) of at least ``at_least_bytes`` per thread."""
        return sum(n for width, n in (*self.global_loads.items(), *self.async_copies.items())
                   if width >= at_least_bytes)


class SassProfile(BaseModel):
    """Profile of every kernel function in one binary, and what producing it cost.

    Attributes:
        arch: the SASS target the binary holds, e.g. ``sm_90a``.
        kernels: one record per function with code.
        tool: the disassembler used (path).
        disassemble_s / parse_s: wall seconds of the two steps.
    """

    model_config = ConfigDict(frozen=True)

    arch: str | None
    kernels: tuple[KernelSass, ...]
    tool: str | None = None
    disassemble_s: float = 0.0
    parse_s: float = 0.0

    def kernel(self, name: str | None = None) -> KernelSass:
        """The record of ``name`` (exact or substring of a mangled name); the only one if omitted."""
        if name is None:
            if len(self.kernels) != 1:
                raise KeyError(f"{len(self.kernels)} kernels in the binary; name one of "
                               f"{[k.name for k in self.kernels]}")
            return self.kernels[0]
        for k in self.kernels:
            if k.name == name:
                return k
        matches = [k for k in self.kernels if name in k.name]
        if len(matches) == 1:
            return matches[0]
        raise KeyError(f"kernel {name!r} not found among {[k.name for k in self.kernels]}")


# ----------------------------------------------------------------------------------------------
# Finding the tools
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Disassembling
# ----------------------------------------------------------------------------------------------


# ----------------------------------------------------------------------------------------------
# Parsing SASS
# ----------------------------------------------------------------------------------------------

# Base opcode → family. Uniform-datapath variants (``UIADD3``, ``ULDC``) are looked up without
# their ``U`` when they are not listed themselves.
_FAMILY_OF: dict[str, str] = {}
FAMILIES: dict[str, tuple[str, ...]] = {
    "global_memory": ("LDG", "STG", "LDGSTS", "RED", "REDG", "ATOMG", "UTMALDG", "UTMASTG", "UTMAREDG",
                      "UTMAPF", "UBLKCP", "UBLKRED", "UBLKPF", "CCTL"),
    "shared_memory": ("LDS", "STS", "LDSM", "STSM", "ATOMS", "REDS"),
    "local_memory": ("LDL", "STL"),
    "generic_memory": ("LD", "ST", "ATOM", "SUST", "SULD", "TLD", "TEX"),
    "constant": ("LDC",),
    "fp32": ("FFMA", "FADD", "FMUL", "FMNMX", "FSETP", "FSET", "FSEL", "FCHK", "FSWZADD", "FFMA32I",
             "FADD32I", "FMUL32I"),
    "fp16_bf16": ("HADD2", "HMUL2", "HFMA2", "HMNMX2", "HSETP2", "HSET2", "HADD2_32I", "HMUL2_32I",
                  "HFMA2_32I"),
    "fp64": ("DADD", "DMUL", "DFMA", "DSETP", "DMNMX"),
    "tensor_core": ("HMMA", "HGMMA", "IMMA", "IGMMA", "BMMA", "BGMMA", "QGMMA", "DMMA", "OMMA", "QMMA",
                    "UTCHMMA", "UTCQMMA", "UTCIMMA", "UTCOMMA"),
    "integer": ("IMAD", "IADD3", "IADD", "IADD32I", "LOP3", "LOP", "SHF", "SHL", "SHR", "LEA", "ISETP",
                "IABS", "IMNMX", "VIMNMX", "VIADD", "VIADDMNMX", "POPC", "FLO", "BREV", "BMSK", "SGXT",
                "PRMT", "IDP", "IMUL", "XMAD", "ICMP", "IDP4A", "BFE", "BFI"),
    "conversion": ("F2F", "F2I", "I2F", "I2FP", "F2FP", "F2IP", "I2I", "I2IP", "FRND", "DFRND"),
    "special_function": ("MUFU",),
    "move": ("MOV", "MOV32I", "CS2R", "S2R", "S2UR", "R2UR", "SEL", "SHFL", "P2R", "R2P", "PLOP3",
             "PSETP", "VOTE", "VOTEU", "MATCH", "REDUX", "CREDUX", "LDCU", "UMOV", "ULDC", "UPRMT"),
    "control": ("BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "BREAK", "WARPSYNC",
                "YIELD", "BPT", "KILL", "NANOSLEEP", "ACQBULK", "ELECT", "ENDCOLLECTIVE"),
    "sync": ("BAR", "MEMBAR", "DEPBAR", "LDGDEPBAR", "WARPGROUP", "SYNCS", "FENCE", "ERRBAR", "ARRIVES",
             "CGAERRBAR", "UCGABAR_ARV", "UCGABAR_WAIT", "USETMAXREG", "WARPSYNC"),
}
for _family, _ops in FAMILIES.items():
    for _op in _ops:
        _FAMILY_OF.setdefault(_op, _family)

_BRANCHES = frozenset({"BRA", "BRX", "JMP", "JMX", "CALL"})
_TC_SHAPE = re.compile(r"^(?:\d+x\d+x\d+|\d{3,5})$")
_TC_TYPES = frozenset({"F32", "F16", "BF16", "TF32", "E4M3", "E5M2", "E2M1", "E3M2", "E2M3", "S8", "U8",
                       "S4", "U4", "F64", "B1"})
_TC_DEFAULT_INPUTS = {"HMMA": "F16", "HGMMA": "F16", "IMMA": "S8", "IGMMA": "S8", "DMMA": "F64",
                      "BMMA": "B1", "BGMMA": "B1"}

_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s*(?:\{\s*)?(@!?U?P(?:T|\d+)\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")
_NVDISASM_FUNCTION = re.compile(r"^//-+\s+\.text\.(\S+)\s+-+")
_CUOBJDUMP_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ARCH = re.compile(r"^\s*\.target\s+(sm_\w+)")


def family_of(opcode: str) -> str:
    """Family of an opcode (``LDG.E.128`` → ``global_memory``); ``other`` if not known."""
    base = opcode.split(".", 1)[0]
    family = _FAMILY_OF.get(base)
    if family is None and base.startswith("U") and len(base) > 1:
        family = _FAMILY_OF.get(base[1:])
    return family or "other"


def access_bytes(opcode: str) -> int:
    """Bytes per thread one load / store moves, from its width modifier (none means 32 bits)."""
    for mod in opcode.split(".")[1:]:
        if mod in ("128", "64", "32", "16", "8"):
            return int(mod) // 8
        if mod in ("U8", "S8"):
            return 1
        if mod in ("U16", "S16"):
            return 2
    return 4


def _tensor_core_op(opcode: str) -> tuple[str, str | None, str | None, str]:
    """``HGMMA.64x128x16.F32.BF16`` → (``HGMMA``, ``64x128x16``, ``F32``, ``BF16``).

    The first type after the shape is the accumulator; a second is the operand type; fp16 operands
    are implicit in HMMA / HGMMA, int8 in IMMA.
    """
    parts = opcode.split(".")
    base = parts[0]
    shape = next((p for p in parts[1:] if _TC_SHAPE.match(p)), None)
    types = [p for p in parts[1:] if p in _TC_TYPES]
    accumulator = types[0] if types else None
    if base in ("IMMA", "IGMMA") and types:  # IMMA.16832.S8.S8 names operands, accumulator is S32
        return base, shape, "S32", types[0]
    inputs = types[1] if len(types) > 1 else _TC_DEFAULT_INPUTS.get(base, "unknown")
    return base, shape, accumulator, inputs


class _KernelCounts:
    """Mutable tallies for one function while its lines are read."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.opcodes: Counter[str] = Counter()
        self.families: Counter[str] = Counter()
        self.tensor_core: Counter[str] = Counter()
        self.widths: dict[str, Counter[int]] = {k: Counter() for k in (
            "global_loads", "global_stores", "shared_loads", "shared_stores", "async_copies")}
        self.local = {"loads": 0, "stores": 0, "load_bytes": 0, "store_bytes": 0}
        self.tma = 0
        self.branches = 0
        self.predicated_branches = 0
        self.instructions = 0
        self.trailing_nops = 0

    def add(self, opcode: str, guard: str | None) -> None:
        """Count one instruction."""
        base = opcode.split(".", 1)[0]
        if base == "NOP":
            self.trailing_nops += 1
            self.instructions += 1
            self.opcodes[base] += 1
            return
        self.trailing_nops = 0
        self.instructions += 1
        self.opcodes[base] += 1
        family = family_of(opcode)
        self.families[family] += 1
        if family == "tensor_core":
            self.tensor_core[opcode] += 1
        self._memory(base, opcode)
        if base in _BRANCHES:
            self.branches += 1
            # ``@PT`` is always, ``@!PT`` never: only a guard on a real predicate makes it conditional.
            if guard and guard.strip().lstrip("@!") not in ("PT", "UPT"):
                self.predicated_branches += 1

    def _memory(self, base: str, opcode: str) -> None:
        """Widths of global / shared accesses and local-memory traffic."""
        width = access_bytes(opcode)
        slot = {"LDG": "global_loads", "STG": "global_stores", "LDS": "shared_loads",
                "STS": "shared_stores", "LDGSTS": "async_copies"}.get(base)
        if slot is not None:
            self.widths[slot][width] += 1
        elif base == "LDL":
            self.local["loads"] += 1
            self.local["load_bytes"] += width
        elif base == "STL":
            self.local["stores"] += 1
            self.local["store_bytes"] += width
        elif base.startswith(("UTMA", "UBLK")):
            self.tma += 1

    def record(self, resources: Resources | None) -> KernelSass:
        """The frozen record; NOPs after the last real instruction are alignment padding, not code."""
        opcodes = Counter(self.opcodes)
        opcodes["NOP"] -= self.trailing_nops
        tensor_core = []
        for variant, count in self.tensor_core.most_common():
            base, shape, acc, inputs = _tensor_core_op(variant)
            tensor_core.append(TensorCoreOp(opcode=base, shape=shape, accumulator=acc, inputs=inputs,
                                            variant=variant, count=count))
        families = Counter(self.families)
        if opcodes["NOP"] > 0:
            families["nop"] = opcodes["NOP"]
        return KernelSass(
            name=self.name, instructions=self.instructions - self.trailing_nops,
            opcodes={k: v for k, v in opcodes.most_common() if v > 0},
            families=dict(families.most_common()), tensor_core=tuple(tensor_core),
            **{k: dict(sorted(v.items())) for k, v in self.widths.items()},
            tma_copies=self.tma, local_loads=self.local["loads"], local_stores=self.local["stores"],
            local_load_bytes=self.local["load_bytes"], local_store_bytes=self.local["store_bytes"],
            branches=self.branches, predicated_branches=self.predicated_branches, resources=resources)


def parse_sass(text: str, resources: dict[str, Resources] | None = None) -> tuple[str | None, list[KernelSass]]:
    """Parse ``nvdisasm`` or ``cuobjdump -sass`` text into (arch, one record per function).

    ``resources`` (by function name) is attached to the matching record.
    """
    arch: str | None = None
    kernels: list[_KernelCounts] = []
    current: _KernelCounts | None = None
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            if current is None:
                current = _KernelCounts("<unnamed>")
                kernels.append(current)
            current.add(m.group(3), m.group(2))
            continue
        m = _NVDISASM_FUNCTION.match(line) or _CUOBJDUMP_FUNCTION.match(line)
        if m:
            current = _KernelCounts(m.group(1))
            kernels.append(current)
            continue
        if arch is None and (m := _ARCH.match(line)):
            arch = m.group(1)
    resources = resources or {}
    return arch, [k.record(resources.get(k.name)) for k in kernels if k.instructions]


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------


def merge_resources(base: Resources | None, extra: Resources) -> Resources:
    """Fields of ``extra`` that are set win over ``base``; sources are kept from both."""
    if base is None:
        return extra
    merged = base.model_dump()
    for key, value in extra.model_dump().items():
        if key != "sources" and value is not None:
            merged[key] = value
    merged["sources"] = tuple(dict.fromkeys((*base.sources, *extra.sources)))
    return Resources(**merged)


