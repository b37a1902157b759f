"""What an optimize run is started with (stored, so a resume continues the same way), the search
it builds from that, its proposer, and the tally of what it judged so far."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field

from loopwise.core.propose import EXCHANGE_TIMEOUT_S
from loopwise.errors import UserError

SEARCHES = ("mcts", "greedy", "beam", "random", "best-of-n")
PROPOSERS = ("expert", "llm", "exchange", "hybrid")
# hybrid: the expert expands the first ``hybrid_expert_steps`` steps (and any step a model would have
# nothing for), then the model (llm when --llm-model is given, else the exchange) takes over from
# the best node so far; one tree holds both's candidates.
# What the proposer is told about a candidate besides the judge's verdict (KernelPro's ablation arms):
# the findings of the tools its kernels' roofline classes select, of every tool, the measurements
# alone, or nothing. Profiling needs a CUDA device; on the CPU no profile is taken.
PROFILING = ("proactive", "all", "raw", "none")
ENERGY_SLACK = 1.03  # --objective energy: fewest joules among candidates within 3% of the best time


@dataclass
class Settings:
    """What a run was started with (stored, so a resume continues the same way)."""

    problem: str
    proposer: str = "expert"
    search: str = "mcts"
    budget: int = 20
    objective: str = "speed"
    seed: int = 0
    per_step: int = 2
    exchange_dir: str = ""
    exchange_timeout: float = EXCHANGE_TIMEOUT_S  # seconds the exchange proposer waits for the answers of one step
    # Repairs in a row a failed candidate of a model (llm, exchange) gets; the expert does not repair.
    repairs: int = 1
    llm: dict = field(default_factory=dict)
    profiling: str = "proactive"
    # Profile a candidate only when its speedup is at least this share of the best one so far
    # (the reference is always profiled; 0: every candidate the search expands). A profile costs
    # several judgements' time (docs/log/2026-11-30.md, 05:11 section): an expert profiles the contenders.
    profile_within: float = 0.9
    roles: list = field(default_factory=list)  # optional roles switched on: analyst, reviewer
    role_models: dict = field(default_factory=dict)  # role name -> the model that plays it (llm)
    hybrid_expert_steps: int = 2

    def model_proposer(self) -> str:
        """The proposer that plays the model's roles: ``llm`` or ``exchange`` (hybrid: whichever was
        given, the server first), or ``expert`` for a run without a model."""
        if self.proposer != "hybrid":
            return self.proposer
        return "llm" if self.llm.get("model") else "exchange"

    def check(self) -> None:
        if self.search not in SEARCHES:
            raise UserError(f"--search {self.search!r}: expected one of {', '.join(SEARCHES)}")
        if self.proposer not in PROPOSERS:
            raise UserError(f"--proposer {self.proposer!r}: expected one of {', '.join(PROPOSERS)}")
        if self.profiling not in PROFILING:
            raise UserError(f"--profiling {self.profiling!r}: expected one of {', '.join(PROFILING)}")
        if self.objective not in ("speed", "energy"):
            raise UserError(f"--objective {self.objective!r}: expected speed or energy")
        if not 0.0 <= self.profile_within <= 1.0:
            raise UserError(f"--profile-within {self.profile_within}: expected a share of the best speedup, 0 to 1")
        if self.budget < 1:
            raise UserError("--budget must be at least 1")
        if self.exchange_timeout <= 0:
            raise UserError(f"--exchange-timeout {self.exchange_timeout:g}: expected a positive number of seconds")
        if self.repairs < 0:
            raise UserError(f"--repairs {self.repairs}: expected 0 or more")
        if self.proposer == "exchange" and not self.exchange_dir:
            raise UserError("--proposer exchange needs --exchange-dir FOLDER")
        if self.proposer == "hybrid" and not (self.llm.get("model") or self.exchange_dir):
            raise UserError("--proposer hybrid needs a model: --llm-model (a server) or --exchange-dir (an agent)")
        if self.hybrid_expert_steps < 0:
            raise UserError(f"--hybrid-expert-steps {self.hybrid_expert_steps}: expected 0 or more")
        if self.roles and self.proposer == "expert":
            raise UserError(f"--roles {','.join(self.roles)}: the expert proposer plays no analyst or reviewer; "
                            "use --proposer llm, exchange or hybrid")
        if self.role_models and self.model_proposer() != "llm":
            raise UserError("--llm-role-model needs a model server: --proposer llm (or hybrid) with --llm-model")


def make_search(settings: Settings):
    from loopwise.core import search as s

    kinds = {"mcts": s.MCTS, "greedy": s.Greedy, "beam": s.Beam, "random": s.RandomSearch, "best-of-n": s.BestOfN}
    repairs = 0 if settings.proposer == "expert" else settings.repairs
    return kinds[settings.search](seed=settings.seed, max_evals=settings.budget, repairs=repairs)


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


@dataclass
class Tally:
    """Live numbers for the progress line and the summary."""

    evaluations: int = 0
    best: float | None = None
    failures: Counter = field(default_factory=Counter)
    answered: int = 0  # proposals the proposer answered with code (new or already in the tree)
    proposal_failures: Counter = field(default_factory=Counter)  # by reason
    first_failure: dict = field(default_factory=dict)  # reason -> the detail of its first failure
    duplicates: int = 0  # answers whose code was already in the tree
    reprompts: int = 0  # requests asked again because the answer had no usable code or was a duplicate
    repairs: int = 0  # repair requests made for failed candidates
    by: Counter = field(default_factory=Counter)  # new candidates by who made them: "<proposer>/<role>"

    def propose(self, reason: str | None, detail: str = "") -> None:
        """Counts one proposal: answered (``reason`` None) or failed for ``reason``."""
        if reason is None:
            self.answered += 1
            return
        self.proposal_failures[reason] += 1
        self.first_failure.setdefault(reason, detail)

    def duplicate(self) -> None:
        """Counts one answer whose code was already in the tree (answered, but nothing new)."""
        self.answered += 1
        self.duplicates += 1

    def add(self, status: str, speedup: float | None) -> None:
        self.evaluations += 1
        if status == "correct" and speedup is not None:
            self.best = speedup if self.best is None else max(self.best, speedup)
        else:
            self.failures[status] += 1

    def line(self, budget: int) -> str:
        best = f"{self.best:.2f}x" if self.best is not None else "-"
        fails = ", ".join(f"{k} {v}" for k, v in sorted(self.failures.items())) or "none"
        line = f"{self.evaluations}/{budget} judged · best {best} · failures: {fails}"
        noted = self.proposal_failures or self.duplicates or self.repairs
        return line + (f" · {self.proposals_line()}" if noted else "")

    def proposals_line(self) -> str:
        """``proposals: A answered, F failed (reason n, ...), D duplicates, P re-prompts, R repairs``."""
        failed = sum(self.proposal_failures.values())
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(self.proposal_failures.items()))
        line = f"proposals: {self.answered} answered, {failed} failed" + (f" ({reasons})" if reasons else "")
        extra = [f"{n} {name}" for n, name in ((self.duplicates, "duplicates"), (self.reprompts, "re-prompts"),
                                               (self.repairs, "repairs")) if n]
        return ", ".join([line, *extra])
