"""The LLM-free expert proposer: templates plus moves, in the vocabulary an LLM is asked to use.

Every proposal is a complete ``ModelNew`` file. A pattern may have several template variants
(a matrix product: Triton, and CUTLASS where the dtype and alignment allow; see
:func:`generate.variants`); the moves carry which one (``moves["template"]``). From the reference it
proposes each variant with its default moves, so the search compares the backends as siblings,
then neighbours of those; from a candidate it made, it first tries the moves the profiling tools
suggest for it (a finding's ``moves`` evidence, highest-ranked finding first; structural ones such
as ``reduce_registers`` as steps of the template's knobs, :data:`STRUCTURAL`), then changes one
move at a time (tile size, warps) within the candidate's variant, or tries another variant's
defaults, with a little seeded randomness so the search has siblings to compare.
Problems no template covers give a typed failure with the reason, never wrong code.
"""

from __future__ import annotations

import random
import re

from loopwise.core.propose import (
    FailureReason,
    Proposal,
    ProposalFailure,
    ProposalRequest,
    ProposalRole,
    Proposer,
)
from loopwise.kernels.expert import matmul_variants
from loopwise.kernels.expert.capture import capture
from loopwise.kernels.expert.elementwise import Unsupported
from loopwise.kernels.expert.generate import default_moves, fits, render, variants
from loopwise.kernels.expert.inductor import standalone as seeded
from loopwise.kernels.expert.pattern import Pattern
from loopwise.kernels.moves import Move, ParameterMove, parse_moves

SPACE = {
    # channels_last: a convolution before the fused tail run NHWC (cuDNN's tensor-core layout)
    "elementwise": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16], "channels_last": [0, 1]},
    # the same knobs for every fused pass of a partitioned forward
    # (cudagraph: the whole forward replayed from a CUDA graph, for launch-bound ones)
    "graph": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16], "cudagraph": [0, 1]},
    # and each GroupNorm as Triton passes, the elementwise work only it reads as their prologue
    # (scan64: its cumsums, cumprods and logcumsumexps accumulate in float64, generate.wide_scans_pay)
    "graph_norm": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16], "cudagraph": [0, 1],
                   "scan64": [0, 1]},
    # and the Linears' GEMMs: tile = BM = BN, chunk = BK, their own warps
    # (cublas: the Linears in cuBLAS, TF32 under relaxed, their epilogues one Triton pass each)
    "graph_linear": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16], "tile": [64, 128],
                     "chunk": [16, 32, 64], "gemm_warps": [4, 8], "cudagraph": [0, 1], "cublas": [0, 1]},
    # and the convolutions' implicit GEMMs too (the same knobs; nhwc: read the input NHWC where a
    # convolution has 16 input channels or more, generate.NHWC_CHANNELS)
    "graph_conv": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16], "tile": [32, 64, 128],
                   "chunk": [16, 32, 64], "gemm_warps": [4, 8], "cudagraph": [0, 1], "nhwc": [0, 1]},
    "row_softmax": {"block": [512, 1024, 2048, 4096, 8192], "warps": [4, 8, 16]},
    # block: a row's classes per step (a row of at most block classes is read once, in registers)
    "cross_entropy": {"block": [512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16]},
    "layernorm": {"block": [512, 1024, 2048, 4096], "warps": [4, 8], "chunk": [4096, 8192, 16384, 32768, 65536]},
    "layernorm_welford": {"block": [512, 1024, 2048, 4096], "warps": [4, 8],
                          "chunk": [4096, 8192, 16384, 32768, 65536]},
    "attention": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [32, 64, 128]},
    # block: BM = BN output tile; chunk: BK, the K step (3 stages of fp32 tiles fit Hopper's shared memory)
    # split: K ranges per output tile (split-K, for few tiles and a long K); kmajor: copy an M- or
    # N-major fp32 operand K-major first (TF32 tensor-core operands are read K-major)
    "matmul": {"block": [64, 128], "warps": [4, 8], "chunk": [16, 32, 64], "split": [1, 2, 4, 8, 16, 32, 64],
               "kmajor": [0, 1]},
    "linear": {"block": [64, 128], "warps": [4, 8], "chunk": [16, 32, 64]},
    # a batch of products, one kernel: block and chunk as matmul's (no split-K, no K-major copies)
    "bmm": {"block": [64, 128], "warps": [4, 8], "chunk": [16, 32]},
    # relaxed: the GEMM in cuBLAS with TF32 (as eager + TF32), the epilogue one Triton pass (block:
    # elements per program)
    "linear_cublas": {"block": [256, 512, 1024, 2048, 4096], "warps": [2, 4, 8]},
    # block: inner columns per program; chunk: reduced rows per step (x16 elements for a last-dim row)
    "reduce": {"block": [16, 32, 64, 128, 256], "warps": [2, 4, 8], "chunk": [8, 16, 32, 64]},
    "scan": {"block": [256, 512, 1024, 2048, 4096], "warps": [2, 4, 8, 16], "scan64": [0, 1]},
    # block: a line's entries per chunk (each chunk costs k selections over it); warps per line
    "topk": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [1, 2, 4, 8]},
    # block: inner columns per program; chunk: reduced rows per step (x64 elements for a last-dim row)
    "norm": {"block": [16, 32, 64, 128, 256], "warps": [2, 4, 8], "chunk": [8, 16, 32, 64]},
    "pool": {"block": [128, 256, 512, 1024], "warps": [2, 4, 8]},
    # a recurrent module: block: hidden units per step of a time step (each gate's accumulator);
    # chunk: W_hh's columns (h's entries) per product
    "recurrent": {"block": [16, 32, 64, 128, 256], "warps": [2, 4, 8], "chunk": [16, 32, 64, 128]},
    # the same module launched once per time step: block: hidden units per program (a step's
    # programs: hidden / block per 16 batch rows and direction); cudagraph: the forward's launches
    # replayed as one CUDA graph
    "recurrent_steps": {"block": [16, 32, 64, 128], "warps": [2, 4, 8], "chunk": [16, 32, 64, 128], "cudagraph": [0, 1]},
    # block: output pixels = output channels per tile; chunk: (input channel, window) step; nhwc:
    # read the input NHWC (16 input channels or more)
    "conv2d": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [16, 32], "nhwc": [0, 1]},
    # block: output voxels per tile (output channels: as many, at most the output's rounded up to a
    # power of two); chunk: (input channel, window) step
    "conv3d": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [16, 32]},
    # the same for a transposed convolution (chunk: input channels of one window position per step)
    "conv_transpose": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [16, 32]},
    # a depthwise then pointwise convolution in one pass (chunk: channels of the intermediate per step)
    "separable_conv": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [16, 32, 64]},
    # CUTLASS: tile "MxNxK", cluster "MxN" and schedule (WGMMA, bf16 / fp16 / TF32, a matrix
    # product's or a batch's); tile, stages and split (mma.sync, 3xTF32 or one TF32 product). Not
    # every combination builds:
    # matmul_variants.valid says which do.
    **matmul_variants.SPACE,
    # Inductor's own code written out (the compiler-seeded root): block / warps shift every
    # kernel's block sizes and warps by a power of two; cudagraph replays the forward from a graph;
    # gemm launches its library GEMMs as Triton GEMMs and conv its library convolutions as
    # implicit-GEMM Triton convolutions, a pointwise kernel after one as its epilogue, and
    # gemm_tile picks their tile and stages
    "inductor": seeded.SPACE,
}
# both: the GEMMs' knobs and the norm plan's scans
SPACE["graph_full"] = {**SPACE["graph_linear"], "scan64": SPACE["graph_norm"]["scan64"]}


# Variants the measurements say lose where a sibling exists: left out of the first proposals from
# the reference (their budget goes to the sibling's moves), still tried now and then later and
# proposed first where they are the only variant. graph_conv (each Conv2d a tf32x3 implicit GEMM in
# Triton) lost to cuDNN on every problem measured that has the plain partition too, read NCHW or
# NHWC (docs/log/expert-notes.md).
LATER = frozenset({"graph_conv"})


class ExpertProposer(Proposer):
    """Template-and-moves proposer for one problem."""

    def __init__(self, problem, seed: int = 0, precision: str = "fp32", device: str = "",
                 record_source=None, bandwidth_source=None) -> None:
        self.problem, self.precision, self.device = problem, precision, device
        self._rng = random.Random(seed)
        self._pattern: Pattern | None = None
        self._moves_of: dict[str, dict] = {}
        # Inductor's record for the problem (None until asked; a reason when there is none), and
        # where it comes from: record_source(problem, device) -> InductorRecord (the device's by default)
        self._record = None
        self._record_source = record_source
        # the device's copy bandwidth in GB/s, or None where it is not known:
        # bandwidth_source(device) (the judge's cached ceilings by default)
        self._bandwidth_source = bandwidth_source or _cached_bandwidth

    @property
    def seed_reason(self) -> str:
        """Why the compiler-seeded root is not proposed ("" when it is, or was not asked for yet)."""
        return self._record if isinstance(self._record, str) else ""

    def _seeded(self) -> bool:
        """Whether Inductor's code for the problem can be written out here (extracted once)."""
        if self._record is None:
            from loopwise.kernels.expert.inductor.seed import inductor_record

            source = self._record_source or inductor_record
            try:
                record = source(self.problem, self.device)
                # it writes out (a record of library calls only, with them as Triton GEMMs)
                seeded.render_seed(record, self.problem, seeded.library_moves(record, self.precision), precision=self.precision)
                self._record = record
            except Unsupported as exc:
                self._record = str(exc)
        return not isinstance(self._record, str)

    def _move_summary(self, moves: dict) -> str:
        """What the seed's ``gemm`` and ``conv`` moves in ``moves`` do to its library calls (with the
        tile of its ``gemm_tile``); "" where they replace none."""
        texts = self.__dict__.setdefault("_move_texts", {})
        key = (moves.get("gemm", 0), moves.get("conv", 0), moves.get("gemm_tile", 0))
        if key not in texts:
            texts[key] = seeded.move_summary(self._record, moves, self.precision) if self._seeded() else ""
        return texts[key]

    def _render(self, moves: dict) -> str:
        if moves["template"] == "inductor":
            return seeded.render_seed(self._record, self.problem, moves, precision=self.precision)
        return render(self.pattern, moves, precision=self.precision)

    @property
    def pattern(self) -> Pattern:
        if self._pattern is None:
            self._pattern = capture(self.problem)
        return self._pattern

    def propose(self, request: ProposalRequest) -> list:
        if request.role is not ProposalRole.IMPROVE:  # its templates are correct by construction: nothing to repair
            fail = ProposalFailure(reason=FailureReason.NO_CODE, origin="expert",
                                   detail=f"the expert proposer declines {request.role.value} requests")
            return [fail] * request.n
        pattern = self.pattern
        kinds = variants(pattern, self.precision)
        if self.device and self._seeded():  # Inductor's own code first: the search starts from it
            # (where that code is library calls only, the seed is the gemm / conv moves' Triton
            # kernels, written as the expert's own templates write one: their first comes before it)
            at = min(1, len(kinds)) if seeded.library_only(self._record) else 0
            kinds = [*kinds[:at], "inductor", *kinds[at:]]
        if not kinds:
            seed = f"; no compiler seed: {self.seed_reason}" if self.seed_reason else ""
            fail = ProposalFailure(reason=FailureReason.NO_CODE, origin="expert",
                                   detail=f"no template covers this problem yet: {pattern.reason}{seed}")
            return [fail] * request.n
        current = self._moves_of.get(request.candidate) or self._parse_moves(request.candidate)
        if current is not None:
            current = {"template": kinds[0], **current}
            if current["template"] not in kinds:  # written under another policy: start from the reference
                current = None
        base = current or self._defaults(kinds[0])
        suggested = suggested_moves(request.findings, base["template"], base)
        wanted = self._next_moves(kinds, current, request.n, suggested)
        # From the reference, the first note says why there is no compiler seed, so the run records it.
        unseeded = f" (no compiler seed: {self.seed_reason})" if current is None and self.seed_reason else ""
        out = []
        for i, moves in enumerate(wanted):
            source = self._render(moves)
            self._moves_of[source] = moves
            note = self._note(current, moves) + (unseeded if i == 0 else "")
            if moves["template"] == "inductor" and (moves.get("gemm") or moves.get("conv")):  # what they did, call by call
                note += f" ({self._move_summary(moves)})"
            out.append(Proposal(content=source, origin="expert", note=note))
        return out

    def _next_moves(self, kinds: list[str], current: dict | None, n: int, suggested: list[dict] = ()) -> list[dict]:
        kind = current["template"] if current else kinds[0]
        base = dict(current or self._defaults(kind))
        seen = {_key(m) for m in self._moves_of.values()}
        first = [k for k in kinds if k not in LATER] or kinds  # from the reference
        # From the reference: every variant's defaults, so the backends meet as siblings.
        options = [] if current else [m for m in map(self._defaults, first) if _key(m) not in seen]
        if not current and first[0] == "inductor" and self._graph_pays():
            # The seed replayed as one CUDA graph, third (after the seed and the first template):
            # on small problems torch.compile's launches cost the host more than the GPU's work,
            # and the graph is the seed's one move that removes them.
            graph = {**self._defaults("inductor"), "cudagraph": 1}
            if _key(graph) not in seen:
                options.insert(min(2, len(options)), graph)
        if not current and first[0] == "inductor" and self._conv_pays():
            # The seed with its library convolutions as CUTLASS's 3xTF32 implicit GEMMs, second: a
            # float32 convolution with a long reduction runs on the CUDA cores in cuDNN under the
            # fp32 policy, and the move puts it on the tensor cores
            conv = {**self._defaults("inductor"), "conv": 3}
            if _key(conv) not in seen:
                options.insert(min(1, len(options)), conv)
        if not current and first[0] == "inductor" and self._gemm_pays():
            # The seed with its library GEMMs as Triton GEMMs, second (the graph stays after the
            # first template): an fp32 product large enough to fill the GPU runs on the CUDA cores
            # in cuBLAS under the fp32 policy, and the move puts it on the tensor cores (tf32x3)
            gemm = {**self._defaults("inductor"), "gemm": 1}
            if _key(gemm) not in seen:
                options.insert(min(1, len(options)), gemm)
        # The tools' suggestions come first, in their rank order, where the template has the knob
        # and the value is one it can take.
        space = SPACE[kind]
        for move in suggested:
            if move and all(k in space and v in space[k] for k, v in move.items()):
                candidate = {**base, **move}
                if candidate != base and _key(candidate) not in seen and candidate not in options \
                        and self._admissible(kind, candidate):
                    options.append(candidate)
        first_shuffled = len(options)
        for origin in ([base] if current else map(self._defaults, first)):
            options.extend(_neighbours(origin))
        if current:  # now and then another backend's defaults, when the search has not tried them
            options.extend(self._defaults(k) for k in kinds if k != kind)
        tail = options[first_shuffled:]
        self._rng.shuffle(tail)
        options[first_shuffled:] = tail
        fresh = []
        for m in options:
            if _key(m) not in seen and m not in fresh and self._fits(m):
                fresh.append(m)
        while len(fresh) < n:  # exploration: a random point of the space, one not tried yet where any is left
            avoid = seen | {_key(m) for m in fresh}
            fresh.append(self._random_moves(first[len(fresh) % len(first)] if current is None else kind, avoid))
        return fresh[:n]

    def _gemm_pays(self) -> bool:
        """Whether the seed's ``gemm`` move is one of the first candidates (:func:`gemm.pays`; not
        where the seed has it already, Inductor's code being library calls only)."""
        if "_gemm_first" not in self.__dict__:
            from loopwise.kernels.expert.inductor import gemm

            self._gemm_first = not seeded.library_only(self._record) and gemm.pays(self._sites(), self.precision)
        return self._gemm_first

    def _sites(self) -> list:
        """The library GEMMs and convolutions of the seed's record (:func:`gemm.find_sites`: a walk
        of its module), found once."""
        if "_found_sites" not in self.__dict__:
            from loopwise.kernels.expert.inductor import gemm

            self._found_sites = gemm.find_sites(self._record)
        return self._found_sites

    def _conv_pays(self) -> bool:
        """Whether the seed's ``conv`` move in its CUTLASS form is one of the first candidates
        (:func:`gemm.cutlass_pays`; not where the seed has it already, Inductor's code being
        library calls only)."""
        if "_conv_first" not in self.__dict__:
            from loopwise.kernels.expert.inductor import gemm

            self._conv_first = not seeded.library_only(self._record) and gemm.cutlass_pays(self._sites(), self.precision)
        return self._conv_first

    def _graph_pays(self) -> bool:
        """Whether the seed replayed as one CUDA graph can pay (:func:`cuda_graph.graph_pays`): the
        launches of Inductor's code against the copies of the forward's inputs at the device's
        bandwidth; proposed where the bandwidth is not known."""
        if "_pays" not in self.__dict__:
            from loopwise.kernels.expert.cuda_graph import graph_pays
            from loopwise.kernels.expert.inductor import calls

            bandwidth = self._bandwidth_source(self.device)
            self._pays = bandwidth is None or graph_pays(calls.launches(self._record), calls.input_bytes(self._record),
                                                         bandwidth)
        return self._pays

    def _defaults(self, kind: str) -> dict:
        """``kind``'s default moves for this problem (split-K for a long K over few tiles)."""
        if kind == "inductor":
            if "_library_moves" not in self.__dict__:  # (a walk of the record's sites where it has them)
                self._library_moves = seeded.library_moves(self._record, self.precision)
            return {"template": kind, **seeded.DEFAULTS, **self._library_moves}
        return {"template": kind, **default_moves(self.pattern, kind, self.precision)}

    def _random_moves(self, kind: str, avoid: set = frozenset()) -> dict:
        """A random combination of ``kind``'s knobs that CUTLASS builds (any, for Triton) and that
        suits the problem's shape (split-K's partials); one whose key is not in ``avoid`` unless 64
        draws find none (a small space runs out: a candidate judged again teaches the search nothing)."""
        fallback = None
        for _ in range(64):
            moves = {"template": kind, **{name: self._rng.choice(values) for name, values in SPACE[kind].items()}}
            if not self._admissible(kind, moves):
                continue
            if _key(moves) not in avoid:
                return moves
            fallback = fallback or moves
        while fallback is None:
            moves = {"template": kind, **{name: self._rng.choice(values) for name, values in SPACE[kind].items()}}
            fallback = moves if self._admissible(kind, moves) else None
        return fallback

    def _admissible(self, kind: str, moves: dict) -> bool:
        """Whether CUTLASS builds ``moves`` (any, for Triton) and they suit the problem's shape."""
        return matmul_variants.valid(kind, moves) and self._fits(moves)

    def _fits(self, moves: dict) -> bool:
        """Whether ``moves`` suit the problem's shape (the compiler seed's suit any: its kernels
        were written for it; its ``gemm`` and ``conv`` moves only where Inductor's code has a
        library GEMM or convolution the move replaces, and where that code has no kernel of its
        own, only with one of them; its ``gemm_tile`` only with one of them, whose kernels' tile
        it picks)."""
        if moves["template"] == "inductor":
            gemm, conv = moves.get("gemm"), moves.get("conv")
            if moves.get("gemm_tile") and not (gemm or conv):
                return False
            if seeded.library_only(self._record) and not (gemm or conv):  # it would re-call PyTorch only
                return False
            return (not gemm or bool(self._move_summary({"gemm": 1}))) and (not conv or bool(self._move_summary({"conv": conv})))
        return fits(self.pattern, moves)

    @staticmethod
    def _parse_moves(source: str) -> dict | None:
        """Moves of a source this proposer wrote in an earlier process (a resumed run), from its
        first line: ``matmul: block 128, 8 warps, chunk 32`` or
        ``matmul_cutlass: tile 128x256x64, cluster 2x1, schedule cooperative`` (a batch's
        ``bmm_cutlass: ...`` alike; 3xTF32's
        ``split`` is 1 where the note does not name it). A source whose
        first line names no template gives the block / warps / chunk it mentions, if any."""
        if (inductor := seeded.parse_note(source)) is not None:
            return inductor
        first = re.match(r'\s*"""(\w+): ([^\n]*)', source or "")
        if first and first.group(1) in matmul_variants.LIBRARY_KINDS:
            kind, moves = first.group(1), {"template": first.group(1)}
            for part in first.group(2).split(","):
                name, _, value = part.strip().partition(" ")
                numeric = all(isinstance(v, int) for v in SPACE[kind].get(name, ()))
                if name in SPACE[kind] and (value.isdigit() or not numeric):
                    moves[name] = int(value) if numeric else value
            if "split" in SPACE[kind]:  # the note names split-K only when it splits
                moves.setdefault("split", 1)
            return moves if set(moves) == {"template", *SPACE[kind]} else None
        found = re.search(r"block (\d+), (\d+) warps(?:, chunk (\d+))?(?:, split (\d+))?(?:, kmajor (\d+))?"
                          r"(?:, tile (\d+), (\d+) gemm warps)?(, cuda graph)?(, channels last)?(, nhwc)?(, cublas)?(, float64 scans)?",
                          source or "")
        if not found:
            return None
        moves = {"block": int(found.group(1)), "warps": int(found.group(2))}
        moves |= {"chunk": int(found.group(3))} if found.group(3) else {}
        moves |= {"tile": int(found.group(6)), "gemm_warps": int(found.group(7))} if found.group(6) else {}
        kind = first.group(1) if first and first.group(1) in SPACE else None
        if kind and "split" in SPACE[kind]:  # the note names split-K only when it splits
            moves["split"] = int(found.group(4) or 1)
        if kind and "kmajor" in SPACE[kind]:  # and the K-major copies only when it makes them
            moves["kmajor"] = int(found.group(5) or 0)
        if kind and "cudagraph" in SPACE[kind]:  # and the CUDA graph only when it replays one
            moves["cudagraph"] = int(bool(found.group(8)))
        if kind and "channels_last" in SPACE[kind]:  # and the layout only when it changes it
            moves["channels_last"] = int(bool(found.group(9)))
        if kind and "nhwc" in SPACE[kind]:  # and the NHWC reads only when it makes them
            moves["nhwc"] = int(bool(found.group(10)))
        if kind and "cublas" in SPACE[kind]:  # and cuBLAS's GEMMs only when it calls them
            moves["cublas"] = int(bool(found.group(11)))
        if kind and "scan64" in SPACE[kind]:  # and float64 scans only when it accumulates so
            moves["scan64"] = int(bool(found.group(12)))
        return ({"template": kind} if kind else {}) | moves

    @staticmethod
    def _note(current: dict | None, moves: dict) -> str:
        kind = moves["template"]
        knobs = sorted((k, v) for k, v in moves.items() if k != "template")
        if current is None or current["template"] != kind:
            prefix = f"{kind} template" if current is None else f"{current['template']} -> {kind} template"
            return f"{prefix}, " + ", ".join(f"{k} {v}" for k, v in knobs)
        changed = [f"{k} {current[k]}->{v}" for k, v in knobs if current.get(k) != v]
        return f"{kind}: " + (", ".join(changed) or "same moves")


def _cached_bandwidth(device: str) -> float | None:
    """The copy bandwidth in the judge's cached ceilings for ``device`` (GB/s), None where none is
    cached (measuring here would put the measurement's work in the search's process)."""
    try:
        from loopwise.kernels.roofline.ceilings import cache_path, read_ceilings

        ceilings = read_ceilings(cache_path(device))
    except Exception:  # noqa: BLE001 - no device to name: the bandwidth is not known
        return None
    return ceilings.bandwidth_gbs if ceilings is not None else None


def _key(moves: dict) -> tuple:
    return tuple(sorted(moves.items()))


def _neighbours(moves: dict) -> list[dict]:
    """``moves`` with one knob one value up or down in SPACE; where CUTLASS would not build that,
    with another knob moved as little as makes it build (a ping-pong schedule takes a smaller tile)."""
    kind = moves["template"]
    out = []
    for name, values in SPACE[kind].items():
        i = values.index(moves[name]) if moves[name] in values else 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(values):
                candidate = _repaired({**moves, name: values[j]}, keep=name)
                if candidate is not None:
                    out.append(candidate)
    return out


def _repaired(moves: dict, keep: str) -> dict | None:
    """``moves`` if valid, else the valid combination nearest to it that changes one other knob than
    ``keep`` (nearest in SPACE's order); None if there is none."""
    kind = moves["template"]
    if matmul_variants.valid(kind, moves):
        return moves
    for name, values in SPACE[kind].items():
        if name == keep or moves[name] not in values:
            continue
        i = values.index(moves[name])
        for j in sorted(range(len(values)), key=lambda j: (abs(j - i), j)):
            candidate = {**moves, name: values[j]}
            if matmul_variants.valid(kind, candidate):
                return candidate
    return None


# Structural moves (a bare name in a finding's moves) as steps of a template's knobs: "down" / "up"
# is the next smaller / larger value of the knob in SPACE. Fewer registers per thread: a smaller
# tile, or a shorter K step (less of A and B held per stage); wider loads: more elements per program
# (a matrix product: operands copied K-major, which its 16-byte copies need).
# CUTLASS 3's WGMMA kernel sizes its pipeline to whatever shared memory its tile leaves, so only
# the mma.sync kernels (stages as a knob) have a shared-memory move.
STRUCTURAL: dict[str, dict[str, tuple[dict[str, str], ...]]] = {
    "reduce_registers": {"matmul": ({"block": "down"}, {"chunk": "down"}), "linear": ({"block": "down"}, {"chunk": "down"}),
                         "bmm": ({"block": "down"}, {"chunk": "down"}),
                         "conv2d": ({"block": "down"}, {"chunk": "down"}), "conv3d": ({"block": "down"}, {"chunk": "down"}),
                         "conv_transpose": ({"block": "down"}, {"chunk": "down"}),
                         "separable_conv": ({"block": "down"}, {"chunk": "down"}),
                         "elementwise": ({"block": "down"},),
                         "layernorm": ({"block": "down"},), "layernorm_welford": ({"block": "down"},),
                         "attention": ({"block": "down"}, {"chunk": "down"}),
                         "row_softmax": ({"block": "down"},), "cross_entropy": ({"block": "down"},),
                         "reduce": ({"block": "down"},), "norm": ({"block": "down"},), "pool": ({"block": "down"},),
                         "scan": ({"block": "down"},), "topk": ({"block": "down"},),
                         "recurrent": ({"block": "down"}, {"chunk": "down"}),
                         "recurrent_steps": ({"chunk": "down"}, {"block": "down"}), "matmul_cutlass": ({"tile": "down"},),
                         "matmul_cutlass_tf32": ({"tile": "down"},), "bmm_cutlass": ({"tile": "down"},),
                         "bmm_cutlass_tf32": ({"tile": "down"},),
                         "matmul_3xtf32": ({"tile": "down"},), "matmul_1xtf32": ({"tile": "down"},),
                         "graph": ({"block": "down"},), "graph_norm": ({"block": "down"},),
                         "graph_linear": ({"tile": "down"}, {"chunk": "down"}, {"block": "down"}),
                         "graph_full": ({"tile": "down"}, {"chunk": "down"}, {"block": "down"}),
                         "graph_conv": ({"tile": "down"}, {"chunk": "down"}, {"block": "down"}),
                         "inductor": ({"block": "down"},)},
    # the seed's library GEMMs as Triton GEMMs (tf32x3 on the tensor cores under fp32), with the
    # pointwise kernel after each as its epilogue
    "fuse_kernels": {"inductor": ({"gemm": "up"},)}, "use_tf32x3": {"inductor": ({"gemm": "up"},)},
    "reduce_shared_memory": {"matmul": ({"chunk": "down"},), "linear": ({"chunk": "down"},), "bmm": ({"chunk": "down"},),
                             "conv2d": ({"chunk": "down"},), "conv3d": ({"chunk": "down"},),
                             "conv_transpose": ({"chunk": "down"},), "separable_conv": ({"chunk": "down"},),
                             "matmul_3xtf32": ({"stages": "down"}, {"tile": "down"}),
                             "matmul_1xtf32": ({"stages": "down"}, {"tile": "down"}),
                             "graph_linear": ({"chunk": "down"},), "graph_full": ({"chunk": "down"},),
                             "graph_conv": ({"chunk": "down"},),
                             "attention": ({"chunk": "down"},), "recurrent": ({"chunk": "down"}, {"block": "down"}),
                             "recurrent_steps": ({"chunk": "down"}, {"block": "down"})},
    # an fp32 matmul's narrow cp.async copies: an MN-major operand staged for the K-major TF32 products
    "vectorize_loads": {"matmul": ({"kmajor": "up"},),
                        "elementwise": ({"block": "up"},), "pool": ({"block": "up"},), "scan": ({"block": "up"},),
                        "graph": ({"block": "up"},), "graph_norm": ({"block": "up"},), "graph_linear": ({"block": "up"},),
                        "graph_full": ({"block": "up"},), "graph_conv": ({"block": "up"},), "inductor": ({"block": "up"},)},
    "split_k": {"matmul": ({"split": "up"},), "matmul_3xtf32": ({"split": "up"},), "matmul_1xtf32": ({"split": "up"},)},
    # the launch_bound tool: a partitioned forward replayed from a CUDA graph
    "use_cuda_graphs": {"graph": ({"cudagraph": "up"},), "graph_norm": ({"cudagraph": "up"},), "graph_linear": ({"cudagraph": "up"},),
                        "graph_full": ({"cudagraph": "up"},),
                        "graph_conv": ({"cudagraph": "up"},), "inductor": ({"cudagraph": "up"},),
                        "recurrent_steps": ({"cudagraph": "up"},)},
}


def _size(value: int | str) -> int:
    """A knob value's magnitude: the number, or a tile's M*N*K (``"128x256x64"``)."""
    if isinstance(value, int):
        return value
    size = 1
    for extent in matmul_variants.dims(value):
        size *= extent
    return size


def _step(kind: str, knob: str, current: dict, direction: str) -> int | str | None:
    """The value after ``current[knob]`` in SPACE towards ``direction`` that is strictly smaller
    (down) or larger (up) and builds with the other knobs; None at the end of the range."""
    values, value = SPACE.get(kind, {}).get(knob), current.get(knob)
    if not values or value not in values:
        return None
    step, size = (1 if direction == "up" else -1), _size(value)
    i = values.index(value) + step
    while 0 <= i < len(values):
        moved = _size(values[i]) > size if step > 0 else _size(values[i]) < size
        if moved and matmul_variants.valid(kind, {**current, knob: values[i]}):
            return values[i]
        i += step
    return None


def suggested_moves(findings, kind: str | None = None, current: dict | None = None) -> list[dict]:
    """Parameter moves the findings suggest, in their order: each finding's ``moves`` evidence
    (``"warps=8; block=512, warps=4; reduce_registers"``, see ``Finding.as_note``) read back into
    the move vocabulary (:func:`~loopwise.kernels.moves.parse_moves`). A parameter move gives its
    settings; a structural move becomes the template's knob steps from ``current`` where
    :data:`STRUCTURAL` knows it for ``kind``, and is skipped otherwise."""
    out: list[dict] = []
    for note in findings or ():
        text = (getattr(note, "evidence", None) or {}).get("moves")
        if not isinstance(text, str):
            continue
        for move in parse_moves(text):
            for m in _settings(move, kind, current):
                if m not in out:
                    out.append(m)
    return out


def _settings(move: Move, kind: str | None, current: dict | None) -> list[dict]:
    """The knob settings ``move`` stands for on template ``kind`` at ``current``."""
    if isinstance(move, ParameterMove):
        return [move.to_json()]
    if not kind or not current:
        return []
    out = []
    for steps in STRUCTURAL.get(move.name, {}).get(kind, ()):
        stepped = {k: _step(kind, k, current, d) for k, d in steps.items() if k in current}
        if stepped and all(v is not None for v in stepped.values()):
            out.append(stepped)
    return out
