"""The LLM-free expert proposer: templates plus moves, in the vocabulary an LLM is asked to use.

Every proposal is a complete ``ModelNew`` file. From the reference it proposes the template with
its default moves and with neighbours of them; from a candidate it made, it first tries the moves
the profiling tools suggest for it (a finding's ``moves`` evidence, highest-ranked finding first;
structural ones such as ``reduce_registers`` as steps of the template's knobs, :data:`STRUCTURAL`),
then changes one move at a time (tile size, warps), with a little seeded randomness so the search
has siblings to compare.
Problems no template covers give a typed failure with the reason, never wrong code.
"""

from __future__ import annotations

import random
import re

from loopwise.core.propose import FailureReason, Proposal, ProposalFailure, ProposalRequest, Proposer
from loopwise.kernels.expert.capture import Pattern, capture
from loopwise.kernels.expert.generate import DEFAULT_MOVES, render

SPACE = {
    "elementwise": {"block": [256, 512, 1024, 2048, 4096, 8192], "warps": [2, 4, 8, 16]},
    "row_softmax": {"block": [512, 1024, 2048, 4096, 8192], "warps": [4, 8, 16]},
    "layernorm": {"block": [512, 1024, 2048, 4096], "warps": [4, 8], "chunk": [4096, 8192, 16384, 32768, 65536]},
    # block: BM = BN output tile; chunk: BK, the K step (3 stages of fp32 tiles fit Hopper's shared memory)
    "matmul": {"block": [64, 128], "warps": [4, 8], "chunk": [16, 32, 64]},
    "linear": {"block": [64, 128], "warps": [4, 8], "chunk": [16, 32, 64]},
    # block: inner columns per program; chunk: reduced rows per step (x16 elements for a last-dim row)
    "reduce": {"block": [16, 32, 64, 128, 256], "warps": [2, 4, 8], "chunk": [8, 16, 32, 64]},
    "scan": {"block": [256, 512, 1024, 2048, 4096], "warps": [2, 4, 8, 16]},
    # block: inner columns per program; chunk: reduced rows per step (x64 elements for a last-dim row)
    "norm": {"block": [16, 32, 64, 128, 256], "warps": [2, 4, 8], "chunk": [8, 16, 32, 64]},
    "pool": {"block": [128, 256, 512, 1024], "warps": [2, 4, 8]},
    # block: output pixels = output channels per tile; chunk: (input channel, window) step
    "conv2d": {"block": [32, 64, 128], "warps": [4, 8], "chunk": [16, 32]},
}


class ExpertProposer(Proposer):
    """Template-and-moves proposer for one problem."""

    def __init__(self, problem, seed: int = 0, precision: str = "fp32") -> None:
        self.problem, self.precision = problem, precision
        self._rng = random.Random(seed)
        self._pattern: Pattern | None = None
        self._moves_of: dict[str, dict] = {}

    @property
    def pattern(self) -> Pattern:
        if self._pattern is None:
            self._pattern = capture(self.problem)
        return self._pattern

    def propose(self, request: ProposalRequest) -> list:
        pattern = self.pattern
        if pattern.kind not in SPACE:
            fail = ProposalFailure(reason=FailureReason.NO_CODE, origin="expert",
                                   detail=f"no template covers this problem yet: {pattern.reason}")
            return [fail] * request.n
        current = self._moves_of.get(request.candidate) or self._parse_moves(request.candidate)
        suggested = suggested_moves(request.findings, pattern.kind, current or DEFAULT_MOVES[pattern.kind])
        wanted = self._next_moves(pattern.kind, current, request.n, suggested)
        out = []
        for moves in wanted:
            source = render(pattern, moves, precision=self.precision)
            self._moves_of[source] = moves
            out.append(Proposal(content=source, origin="expert", note=self._note(pattern.kind, current, moves)))
        return out

    def _next_moves(self, kind: str, current: dict | None, n: int, suggested: list[dict] = ()) -> list[dict]:
        base = dict(current or DEFAULT_MOVES[kind])
        seen = {tuple(sorted(m.items())) for m in self._moves_of.values()}
        options = []
        if current is None and tuple(sorted(base.items())) not in seen:
            options.append(base)
        # The tools' suggestions come first, in their rank order, where the template has the knob
        # and the value is one it can take.
        for move in suggested:
            if move and all(k in SPACE[kind] and v in SPACE[kind][k] for k, v in move.items()):
                candidate = {**base, **move}
                if candidate != base and tuple(sorted(candidate.items())) not in seen and candidate not in options:
                    options.append(candidate)
        first_shuffled = len(options)
        for name, values in SPACE[kind].items():
            i = values.index(base[name]) if base[name] in values else 0
            for j in (i - 1, i + 1):
                if 0 <= j < len(values):
                    options.append({**base, name: values[j]})
        tail = options[first_shuffled:]
        self._rng.shuffle(tail)
        options[first_shuffled:] = tail
        fresh = [m for m in options if tuple(sorted(m.items())) not in seen]
        while len(fresh) < n:  # exploration: a random point of the space
            fresh.append({name: self._rng.choice(values) for name, values in SPACE[kind].items()})
        return fresh[:n]

    @staticmethod
    def _parse_moves(source: str) -> dict | None:
        """Moves of a source this proposer wrote in an earlier process (a resumed run)."""
        found = re.search(r"block (\d+), (\d+) warps(?:, chunk (\d+))?", source or "")
        if not found:
            return None
        moves = {"block": int(found.group(1)), "warps": int(found.group(2))}
        return moves | ({"chunk": int(found.group(3))} if found.group(3) else {})

    @staticmethod
    def _note(kind: str, current: dict | None, moves: dict) -> str:
        if current is None:
            return f"{kind} template, " + ", ".join(f"{k} {v}" for k, v in sorted(moves.items()))
        changed = [f"{k} {current[k]}->{v}" for k, v in sorted(moves.items()) if current.get(k) != v]
        return f"{kind}: " + (", ".join(changed) or "same moves")


# Structural moves (a bare name in a finding's moves) as steps of a template's knobs: "down" / "up"
# is the next smaller / larger value of the knob in SPACE. Fewer registers per thread: a smaller
# tile, or a shorter K step (less of A and B held per stage); wider loads: more elements per program.
STRUCTURAL: dict[str, dict[str, tuple[dict[str, str], ...]]] = {
    "reduce_registers": {"matmul": ({"block": "down"}, {"chunk": "down"}), "linear": ({"block": "down"}, {"chunk": "down"}),
                         "conv2d": ({"block": "down"}, {"chunk": "down"}), "elementwise": ({"block": "down"},),
                         "layernorm": ({"block": "down"},), "row_softmax": ({"block": "down"},),
                         "reduce": ({"block": "down"},), "norm": ({"block": "down"},), "pool": ({"block": "down"},),
                         "scan": ({"block": "down"},)},
    "reduce_shared_memory": {"matmul": ({"chunk": "down"},), "linear": ({"chunk": "down"},),
                             "conv2d": ({"chunk": "down"},)},
    "vectorize_loads": {"elementwise": ({"block": "up"},), "pool": ({"block": "up"},), "scan": ({"block": "up"},)},
}


def _step(kind: str, knob: str, value: int, direction: str) -> int | None:
    values = SPACE.get(kind, {}).get(knob)
    if not values or value not in values:
        return None
    i = values.index(value) + (1 if direction == "up" else -1)
    return values[i] if 0 <= i < len(values) else None


def suggested_moves(findings, kind: str | None = None, current: dict | None = None) -> list[dict]:
    """Parameter moves the findings suggest, in their order: each finding's ``moves`` evidence
    (``"warps=8; block=512, warps=4; reduce_registers"``, see ``Finding.as_note``) gives one move
    per ``;``-separated part. A structural move (a bare name) becomes the template's knob steps from
    ``current`` where :data:`STRUCTURAL` knows it for ``kind``, and is skipped otherwise."""
    out: list[dict] = []
    for note in findings or ():
        text = (getattr(note, "evidence", None) or {}).get("moves")
        if not isinstance(text, str):
            continue
        for part in text.split(";"):
            moves: list[dict] = []
            move = {}
            for item in part.split(","):
                key, sep, value = item.strip().partition("=")
                if sep and value.strip().lstrip("-").isdigit():
                    move[key.strip()] = int(value)
                elif not sep and kind and current:
                    for steps in STRUCTURAL.get(key.strip(), {}).get(kind, ()):
                        stepped = {k: _step(kind, k, current.get(k), d) for k, d in steps.items() if k in current}
                        if stepped and all(v is not None for v in stepped.values()):
                            moves.append(stepped)
            moves = ([move] if move else []) + moves
            for m in moves:
                if m not in out:
                    out.append(m)
    return out
