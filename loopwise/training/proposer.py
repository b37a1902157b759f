"""Stage transitions from a language model or an exchange folder, through the shared proposer
interface (:mod:`loopwise.core.propose`): the same request the expert rules answer, asked as a
prompt; the reply's ``{"changes": {...}}`` becomes the next stage's config, clamped to the bounds.

The answer format is the one every engine's exchange uses (see :mod:`loopwise.core.propose.exchange`):
a ``Move:`` line, then one ```json block. A reply without it, with broken JSON, an unknown knob, a
value of the wrong type or a config the schema rejects is not used: it is a recorded failed
proposal with its parse error, asked again with that error like a malformed kernel answer; when
fewer usable transitions come back than asked for, the expert rules fill the rest (a recorded
``fallback``), so the search always has siblings.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence

from pydantic import ValidationError

from loopwise.training import metrics as M
from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig
from loopwise.training.findings import as_note
from loopwise.training.transitions import Bounds, Transition, propose_transitions

FIXED = ("steps", "prompts_per_step", "num_iterations", "max_grad_norm")  # the comparison fixes these


def _summary(trace: Sequence[Mapping], tune: float | None) -> str:
    rows = [r for r in trace if M.REWARD in r]
    if not rows:
        return f"held-out reward {tune:.3f}" if tune is not None else "not trained yet (the base policy)"

    def ends(key: str) -> str:
        values = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
        return f"{values[0]:.3g} -> {values[-1]:.3g}" if values else "n/a"

    parts = [f"{len(rows)} steps", f"reward {ends(M.REWARD)}", f"entropy {ends(M.ENTROPY)}",
             f"zero-variance groups {ends(M.FRAC_ZERO_STD)}", f"truncated {ends(M.CLIPPED)}"]
    if any(M.KL in r for r in rows):
        parts.append(f"KL {ends(M.KL)}")
    evals = [r for r in trace if M.EVAL_REWARD in r]
    if evals:
        parts.append(f"held-out reward {evals[-1][M.EVAL_REWARD]:.3f} (train prompts "
                     f"{evals[-1].get(M.TRAIN_EVAL_REWARD, float('nan')):.3f})")
    return "; ".join(parts) + "."


def _traces(trace: Sequence[Mapping], images: bool) -> tuple[str, tuple]:
    """What the request says of the per-step traces, and the images it carries: a plot for a model
    that accepts images, else a table in the text."""
    from loopwise.training.trace_view import trace_png, trace_table

    table = trace_table(trace)
    if not table:
        return "", ()
    if images:
        from loopwise.core.propose import Image

        caption = "the stage's per-step traces (reward, entropy, KL, completion length, ...) against the step"
        return f"The plot attached shows {caption}.", (Image(data=trace_png(trace), caption=caption),)
    return f"Per-step traces:\n\n{table}", ()


def request_for(task: str, config: StageConfig, findings, trace, tune: float | None, path: Sequence, bounds: Bounds,
                n: int, images: bool = False):
    """The request for ``n`` next stages; ``images``: the per-step traces as an attached plot
    rather than a table in the text."""
    from loopwise.core.propose import ProposalRequest

    ranges = ", ".join(f"{k} {getattr(bounds, k)[0]:g}..{getattr(bounds, k)[1]:g}" for k in CAPACITY + REGULARIZATION)
    text = (f"{task}\n\nKnobs you may change, with their ranges: {ranges}. Capacity knobs: "
            f"{', '.join(CAPACITY)}; regularization knobs: {', '.join(REGULARIZATION)}.")
    memory = "\n".join(f"- stage {i + 1}: " + ", ".join(f"{k} {v:g}" for k, v in c.model_dump().items()
                                                         if k in CAPACITY + REGULARIZATION)
                       + (f"; held-out reward {r:.3f}" if r is not None else "") for i, (c, r) in enumerate(path))
    traces, attached = _traces(trace, images)
    return ProposalRequest(task=text, candidate=json.dumps(config.model_dump(), indent=1, sort_keys=True),
                           evaluation="\n\n".join(filter(None, (_summary(trace, tune), traces))),
                           findings=tuple(as_note(f) for f in findings), memory=memory, n=n, kind="training",
                           images=attached)


def parse_transition(content: str, config: StageConfig, bounds: Bounds, note: str = "") -> Transition:
    """The transition a reply's JSON describes. Raises ValueError naming what is wrong."""
    data = json.loads(content)
    changes = data.get("changes", data) if isinstance(data, dict) else None
    if not isinstance(changes, dict) or not changes:
        raise ValueError('expected {"changes": {KNOB: VALUE, ...}} with at least one knob')
    allowed = set(CAPACITY + REGULARIZATION)
    unknown = sorted(set(changes) - allowed)
    if unknown:
        fixed = [k for k in unknown if k in FIXED]
        raise ValueError(f"knob(s) {', '.join(unknown)} " + ("are fixed by the comparison" if fixed else
                                                              f"unknown; known: {', '.join(sorted(allowed))}"))
    current = config.model_dump()
    new = dict(current)
    for knob, value in changes.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{knob}: {value!r} is not a number")
        lo, hi = getattr(bounds, knob)
        value = min(max(value, lo), hi)
        new[knob] = int(round(value)) if isinstance(current[knob], int) else float(value)
    try:
        nxt = StageConfig(**new)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"]) from None
    diff = {k: (current[k], new[k]) for k in new if new[k] != current[k]}
    if not diff:
        raise ValueError("the reply changes nothing (after clamping to the ranges)")
    return Transition(nxt, diff, note or "proposed by the model")


class ModelTransitions:
    """A transition source for :func:`loopwise.training.search.tree_search` backed by a proposer
    (``LLMProposer`` or ``ExchangeProposer``); the expert rules fill what it does not give.

    Every decision is an event in the run (``record(kind, payload)``, the store's ``append``):
    ``proposal`` for each reply used, ``proposal_failed`` for each that was not (its reason and
    parse error), ``reprompt`` for each malformed reply asked again with what was wrong (at most
    ``REPROMPT_ROUNDS`` rounds, as in kernels), and ``fallback`` when the rules fill in.

    Args:
        proposer: the model or the exchange folder.
        task: the task in a few lines.
        name: who the proposer is in the record (``llm`` or ``exchange``).
        record: where events go; None keeps them in :attr:`events` only.
        images: the model accepts images: the per-step traces go as a PNG plot, else as a table.
    """

    def __init__(self, proposer, task: str, name: str = "model", record=None, images: bool = False) -> None:
        self.proposer, self.task, self.name, self.images = proposer, task, name, images
        self._record = record
        self.failures: list[str] = []
        self.events: list[tuple[str, dict]] = []
        self.used = 0

    def _event(self, kind: str, payload: dict) -> None:
        self.events.append((kind, payload))
        if self._record is not None:
            self._record(kind, payload)

    def _fail(self, reason: str, detail: str, origin: str) -> None:
        self.failures.append(f"{reason}: {detail}")
        self._event("proposal_failed", {"reason": reason, "detail": detail, "origin": origin, "by": self.name})

    def _take(self, results, config: StageConfig, bounds: Bounds, out: list[Transition]) -> list[str]:
        """Adds the usable replies to ``out``; returns what was wrong with each malformed one."""
        from dataclasses import replace

        from loopwise.core.propose import REPROMPTABLE, FailureReason

        retry = []
        for result in results:
            if not result.ok:
                self._fail(str(result.reason), result.detail, result.origin)
                if result.reason in REPROMPTABLE:
                    retry.append(result.detail)
                continue
            try:
                t = parse_transition(result.content, config, bounds, result.note)
            except (ValueError, json.JSONDecodeError) as exc:
                self._fail(str(FailureReason.INVALID), str(exc), result.origin)
                retry.append(f"{exc}")
                continue
            if all(t.config != o.config for o in out):
                out.append(replace(t, by=self.name))
                self.used += 1
                self._event("proposal", {"by": self.name, "origin": result.origin, "note": t.rationale,
                                         "changes": {k: list(v) for k, v in t.changes.items()}})
        return retry

    def __call__(self, config: StageConfig, findings, rng: random.Random, n: int, bounds: Bounds, *,
                 reward: float | None = None, trace: Sequence[Mapping] = (), path: Sequence = ()) -> list[Transition]:
        from dataclasses import replace

        from loopwise.core.propose import REPROMPT_ROUNDS

        out: list[Transition] = []
        first_failure = len(self.failures)
        request = request_for(self.task, config, findings, trace, reward, path, bounds, n, self.images)
        retry = self._take(self.proposer.propose(request), config, bounds, out)
        for _ in range(REPROMPT_ROUNDS):
            again: list[str] = []
            for feedback in retry:
                if len(out) >= n:
                    break
                self._event("reprompt", {"feedback": feedback, "by": self.name})
                again += self._take(self.proposer.propose(replace(request, n=1, feedback=feedback)), config, bounds,
                                    out)
            retry = again
        if len(out) < n:
            from_model, filled = len(out), 0
            for t in propose_transitions(config, list(findings), rng, n + len(out), bounds):
                if len(out) >= n:
                    break
                if all(t.config != o.config for o in out):
                    out.append(replace(t, by="rule fallback"))
                    filled += 1
            self._event("fallback", {"wanted": n, "from_model": from_model, "from_rules": filled,
                                     "why": self.failures[first_failure:] or ["the replies repeated each other"]})
        return out[:n]


def expert_rules(**context: object) -> None:
    """The training engine's LLM-free proposer: its expert rules, which need no proposer object
    (the search calls :func:`~loopwise.training.transitions.propose_transitions` itself), so None."""
    return None
