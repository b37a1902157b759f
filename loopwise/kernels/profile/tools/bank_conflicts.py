"""Shared-memory bank conflicts: extra wavefronts because a warp's threads hit the same bank.

Why it matters: shared memory has 32 banks of 4 bytes; threads of a warp that touch different words
of one bank are served one after the other, each pass a further wavefront. An N-way conflict makes
one access cost N wavefronts, and shared memory is on the critical path of tiled kernels (matmul,
transposes, reductions).

Evidence (ncu): ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum`` / ``_op_st.sum``
(conflicting wavefronts) against ``l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum`` /
``_op_st.sum`` (all wavefronts). When the wavefronts are missing, the requests
``l1tex__t_requests_pipe_lsu_mem_shared_op_ld.sum`` / ``_op_st.sum`` plus the conflicts stand in for
them (each request is one wavefront without conflicts). Fires when conflicts are 20% of the
wavefronts or more (1.25 wavefronts per access). Score: 0.6 times that share.

Metric names: the conflict and wavefront sums (``_op_ld``, ``_op_st``) are present in the recorded
H200 fixtures (``tests/kernels/profile_fixtures/recorded/*/ncu.csv``). The request sums
``l1tex__t_requests_pipe_lsu_mem_shared_op_{ld,st}.sum`` are spelled as in public ncu scripts and
are not in those fixtures; they are read only when the wavefronts are missing, and when both are
missing that direction is skipped (no finding without either). Note that ncu's bank
conflict counter is known to include conflicts of some non-LDS/STS shared traffic (``ldgsts``,
``ldmatrix`` variants count separately under ``op_ldgsts`` etc.), which is not read here.
"""

from __future__ import annotations

from loopwise.kernels.moves import Move, StructuralMove
from loopwise.kernels.profile.findings import Finding, ToolInput
from loopwise.kernels.profile.tool import Tool
from loopwise.kernels.profile.tools._common import metric

CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum"
WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum"
REQUESTS = "l1tex__t_requests_pipe_lsu_mem_shared_op_{op}.sum"
MIN_SHARE = 0.2
WEIGHT = 0.6


class BankConflictsTool(Tool):
    name = "shared_bank_conflicts"
    needs = frozenset({"ncu"})
    applies_to = frozenset({"compute_bound", "underutilized"})
    summary = "shared-memory bank conflicts as a share of shared wavefronts"

    def inspect(self, inp: ToolInput) -> list[Finding]:
        conflicts = wavefronts = 0.0
        evidence: dict[str, float | int | str | bool] = {}
        for op in ("ld", "st"):
            c = metric(inp, CONFLICTS.format(op=op))
            if c is None:
                continue
            w = metric(inp, WAVEFRONTS.format(op=op))
            if w is None:
                r = metric(inp, REQUESTS.format(op=op))
                if r is None:
                    continue
                w = r + c
            if w <= 0:
                continue  # no shared traffic of this kind
            conflicts, wavefronts = conflicts + c, wavefronts + w
            evidence[f"bank_conflicts_{op}"] = c
            evidence[f"wavefronts_{op}"] = w
        if wavefronts <= 0:
            return []
        share = min(1.0, conflicts / wavefronts)
        if share < MIN_SHARE:
            return []
        ways = wavefronts / max(wavefronts - conflicts, 1.0)
        evidence.update({"conflict_share": round(share, 4), "wavefronts_per_access": round(ways, 3)})
        moves: list[Move] = [StructuralMove("swizzle_shared_memory")]
        guidance = (f"{share:.0%} of the {wavefronts:,.0f} shared-memory wavefronts are bank-conflict replays "
                    f"({ways:.1f} wavefronts per access instead of 1), so pad or swizzle the shared tile "
                    f"so a warp's threads fall in distinct banks.")
        return [Finding.make(self.name, guidance, evidence, WEIGHT * share, moves)]


TOOL = BankConflictsTool()
