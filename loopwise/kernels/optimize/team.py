"""Who answers a kernel run's requests: the proposers of its roles, and the hybrid's hand-over.

A run has a coder (which also repairs) and, when switched on, an analyst that picks the move of
each model step before the coder is asked, and a reviewer asked about every candidate the judge
found suspicious (rejected as an exploit, or correct with a flag such as an excessive speedup).
The analyst's plan and the reviewer's explanation are events of the run (``analysis``,
``review``; ``analysis_failed``, ``review_failed`` with the reason when no usable answer came).

``--proposer hybrid`` has two: the expert expands the first steps, the model the later ones; the
model's first step expands the best node so far (recorded as a ``handover`` event), so it starts
from the expert's best; a step the expert has nothing for goes to the model at once.
"""

from __future__ import annotations

from dataclasses import replace

from loopwise.core.propose import ProposalRequest, ProposalRole, Snippet
from loopwise.core.propose.factory import make_proposer
from loopwise.core.propose.roles import Plan, Review, parse_plan, parse_review

ANALYST_OPTIONS = 8  # moves the analyst is offered to choose from (the findings' first, then broad ones)


def build_proposers(settings, store, cfg, judge, problem):
    """The run's model-or-expert proposer and, for hybrid, the expert beside it (else None)."""
    context = {"problem": problem, "seed": settings.seed, "precision": cfg.kernels.eval.precision,
               "device": judge.device}
    main = make_proposer(settings.model_proposer(), "kernels", store=store, exchange_dir=settings.exchange_dir,
                         exchange_timeout_s=settings.exchange_timeout, llm=settings.llm,
                         role_models=settings.role_models or None, **context)
    expert = make_proposer("expert", "kernels", **context) if settings.proposer == "hybrid" else None
    return main, expert


def step_proposer(run, repair: bool) -> tuple[str, object]:
    """The name and the proposer of this step: the expert for a hybrid's first steps (never for
    a repair), else the run's model (or its expert, for an expert run)."""
    if run.expert is not None and not repair and run.expert_steps < run.s.hybrid_expert_steps:
        return "expert", run.expert
    return run.s.model_proposer(), run.proposer


def handover_parent(run, asked: int, name: str) -> int:
    """The node a hybrid's model expands in its first step: the best correct node so far (the
    expert's best) instead of the one the search asked for; ``asked`` otherwise."""
    if run.expert is None or name == "expert" or run.handed_over:
        return asked
    run.handed_over = True
    best = run.best()
    parent = best if best is not None else asked
    run.store.append("handover", {"asked": asked, "node": parent})
    return parent


def profiling_tools() -> dict[str, str]:
    """The installed micro-profiling tools an analyst may ask for: name -> what it looks for."""
    from loopwise.kernels.profile.registry import load_tools

    return {tool.name: tool.summary for tool in load_tools()}


def plan_step(run, parent: int, request: ProposalRequest, name: str, proposer) -> ProposalRequest:
    """Asks the analyst (when it plays) which move the coder should make from ``parent`` and which
    profiling tools to run on the result (kept in ``run.plans``: a child of ``parent`` is profiled
    with them too); returns the coder's request steered by the plan (its first direction and its
    own prompt section), or the request unchanged when no usable plan came."""
    if "analyst" not in run.s.roles or name == "expert":
        return request
    from loopwise.kernels.optimize.context import directions_for

    tools = profiling_tools()
    listing = Snippet(title="Profiling tools you may ask for", language="text",
                      code="\n".join(f"- {tool}: {summary}" for tool, summary in tools.items()))
    ask = replace(request, role=ProposalRole.ANALYST, n=1, snippets=(listing,),
                  directions=directions_for(request.findings, ANALYST_OPTIONS))
    run._record_request(parent, ask, [], proposer=name)
    [result] = proposer.propose(ask)
    plan = parse_plan(result.content) if result.ok else result
    by = f"{name}/analyst"
    if not isinstance(plan, Plan):
        run.store.append("analysis_failed", {"node": parent, "reason": str(plan.reason), "detail": plan.detail,
                                             "origin": result.origin, "by": by})
        return request
    known = [t for t in plan.tools if t in tools]
    run.store.append("analysis", {"node": parent, "move": plan.move, "rationale": plan.rationale, "tools": known,
                                  "unknown_tools": [t for t in plan.tools if t not in tools],
                                  "origin": result.origin, "by": by})
    run.plans[parent] = tuple(known)
    plan = replace(plan, tools=tuple(known))
    others = tuple(d for d in request.directions if d != plan.move)
    directions = (plan.move, *others)[:request.n] if request.n > 1 else ()
    return replace(request, plan=plan.as_text(), directions=directions)


def suspicious(data: dict) -> bool:
    """Whether a verdict calls for a review: rejected as an exploit, or correct with a flag."""
    status = data.get("status")
    flagged = any(r.get("severity") == "flag" for r in data.get("reasons") or ())
    return status == "exploit" or (status == "correct" and flagged)


def review(run, node: int) -> None:
    """Asks the reviewer (when it plays) to explain ``node``'s suspicious verdict; records its
    answer as a ``review`` event (or why none came as ``review_failed``), once per node."""
    data = run.evaluations[node]["data"]
    if "reviewer" not in run.s.roles or node in run.reviews or not suspicious(data):
        return
    from loopwise.kernels.optimize.prompt import judged_context, target

    summary, reasons = judged_context(data)
    note = run.search.node(node).note
    request = ProposalRequest(task=run.problem.source, candidate=run.sources[node],
                              candidate_summary=f"Node {node}" + (f" ({note})" if note else "") + ".",
                              evaluation=summary, findings=reasons, rules=run._rules(),
                              target=target(run.reference or {}, run.evaluations), kind="kernels",
                              role=ProposalRole.REVIEW)
    name = run.s.model_proposer()
    run._record_request(node, request, [], proposer=name)
    [result] = run.proposer.propose(request)
    found = parse_review(result.content) if result.ok else result
    by = f"{name}/reviewer"
    if not isinstance(found, Review):
        failed = {"node": node, "reason": str(found.reason), "detail": found.detail, "origin": result.origin,
                  "by": by}
        run.store.append("review_failed", failed)
        run.reviews[node] = failed
        return
    event = {"node": node, "status": data.get("status"), "verdict": found.verdict,
             "explanation": found.explanation, "origin": result.origin, "by": by}
    run.store.append("review", event)
    run.reviews[node] = event
