"""The whole context of one kernel proposal request, within a size budget.

A request carries the judge's rules, the device with its measured ceilings and the reference's
eager / torch.compile / floor times (``target``), the parent's code and verdict, the best code so
far, the parent's other children with their notes, verdicts and trimmed code, the profiling
findings, what the search memory learned, and one distinct approach per request of the step.
When the rendered prompt would pass ``PROMPT_BUDGET`` characters, the least useful context goes
first (see ``fit``) and what was cut is named, so the record says what the model saw.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources

from loopwise.core.propose import Attempt, ProposalRequest, render_prompt

PROMPT_BUDGET = 60_000  # characters of one rendered prompt, system and user (about 15k tokens)
SIBLING_CODE_BUDGET = 4_000  # characters of one sibling's code before trimming
BEST_CODE_BUDGET = 12_000  # characters of the best-so-far code before trimming
SIBLINGS_SHOWN = 6  # the parent's other children named, newest first
_GAP = "# [... {} lines trimmed ...]"


def trim_code(code: str, limit: int) -> str:
    """``code`` within ``limit`` characters: its head and its tail with a comment naming the lines
    left out between them (the head holds the imports and kernels, the tail the ``ModelNew``)."""
    if len(code) <= limit:
        return code
    lines = code.splitlines()
    head: list[str] = []
    tail: list[str] = []
    first, last, used = 0, len(lines) - 1, len(_GAP) + 12
    while first <= last:
        from_head = len(head) <= len(tail)
        line = lines[first] if from_head else lines[last]
        if used + len(line) + 1 > limit:
            break
        used += len(line) + 1
        if from_head:
            head.append(line)
            first += 1
        else:
            tail.insert(0, line)
            last -= 1
    return "\n".join([*head, _GAP.format(last - first + 1), *tail]) + "\n"


def default_directions() -> tuple[str, ...]:
    """The broad approach families asked for when the findings suggest fewer moves than requests
    (``prompts/directions.txt``, one a line)."""
    text = (resources.files("loopwise.kernels") / "prompts" / "directions.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


def directions_for(findings, n: int) -> tuple[str, ...]:
    """``n`` distinct approaches: the moves the findings suggest first (in their order), then the
    default families; none for a single request."""
    if n < 2:
        return ()
    from loopwise.kernels.moves import STRUCTURAL_MOVES

    out: list[str] = []
    for finding in findings:
        for move in str((finding.evidence or {}).get("moves", "")).split(";"):
            move = move.strip()
            if move:
                out.append(f"{move} ({STRUCTURAL_MOVES[move]})" if move in STRUCTURAL_MOVES else move)
    out += default_directions()
    return tuple(dict.fromkeys(out))[:n]


def attempt(node, ev: dict | None, source: str, code_limit: int) -> Attempt:
    """A node as the prompt shows it beside the current one: its move, its verdict, and its code
    (trimmed to ``code_limit``) when it was judged correct."""
    from loopwise.kernels.optimize.prompt import judged_context

    data = (ev or {}).get("data") or ({"status": ev["status"]} if ev else None)
    verdict = judged_context(data)[0] if data else "not judged yet"
    reasons = [r.get("code", "?") for r in (data or {}).get("reasons") or () if r.get("severity") == "reject"]
    if reasons:
        verdict += f" ({', '.join(reasons[:3])})"
    code = trim_code(source, code_limit) if (ev or {}).get("status") == "correct" and code_limit > 0 else ""
    return Attempt(label=f"node {node.node_id}", summary=f"{node.note or 'no note'}: {verdict}", code=code)


def siblings(search, parent: int, evaluations: dict, sources: dict, best: int | None = None) -> tuple[Attempt, ...]:
    """The parent's children proposed so far, newest first: the correct ones with their code, but
    for ``best``, whose code the prompt shows once, as the best so far."""
    children = [n for n in search.nodes() if n.parent_id == parent and n.node_id in sources]
    return tuple(attempt(n, evaluations.get(n.node_id), sources[n.node_id],
                         0 if n.node_id == best else SIBLING_CODE_BUDGET)
                 for n in reversed(children[-SIBLINGS_SHOWN:]))


def best_so_far(search, best: int | None, parent: int, evaluations: dict, sources: dict) -> Attempt | None:
    """The fastest correct candidate, unless it is the parent (its code is shown already)."""
    if best is None or best == parent or best not in sources:
        return None
    return attempt(search.node(best), evaluations.get(best), sources[best], BEST_CODE_BUDGET)


def size(request: ProposalRequest) -> int:
    """The characters of the longest of the request's ``n`` rendered prompts."""
    return max(len(render_prompt(request, i).as_markdown()) for i in range(request.n))


def _cuts(request: ProposalRequest):
    """Smaller versions of ``request``, least useful context first: the slowest sibling's code,
    each sibling (oldest first), the oldest memory lines, the last findings, the best's code, the
    snippets, the log (halved), and last of all the middle of the candidate's code."""
    r = request
    coded = [i for i, s in enumerate(r.siblings) if s.code]
    for i in reversed(coded):  # newest first in the list: the oldest code goes first
        r = replace(r, siblings=tuple(replace(s, code="") if j == i else s for j, s in enumerate(r.siblings)))
        yield r, f"code of {r.siblings[i].label}"
    while r.siblings:
        r = replace(r, siblings=r.siblings[:-1])
        yield r, "a sibling's note"
    lines = r.memory.splitlines()
    while len(lines) > 1:
        lines = lines[:1] + lines[2:]  # keep the totals line, drop the oldest note line
        r = replace(r, memory="\n".join(lines))
        yield r, "a search-memory line"
    while r.findings:
        r = replace(r, findings=r.findings[:-1])
        yield r, "a finding"
    if r.best is not None and r.best.code:
        r = replace(r, best=replace(r.best, code=""))
        yield r, "the best candidate's code"
    while r.snippets:
        r = replace(r, snippets=r.snippets[:-1])
        yield r, "a snippet"
    while len(r.log) > 200:
        r = replace(r, log=r.log[len(r.log) // 2:])
        yield r, "half of the log"
    limit = len(r.candidate)
    while limit > 500:
        limit //= 2
        r = replace(r, candidate=trim_code(request.candidate, limit))
        yield r, "part of the candidate's code"


def fit(request: ProposalRequest, budget: int = PROMPT_BUDGET) -> tuple[ProposalRequest, list[str]]:
    """``request`` cut until each of its prompts renders within ``budget`` characters, and what was
    cut (empty when it fitted). The problem, the rules and the target are never cut; a request that
    cannot fit with all else gone is returned as small as it gets."""
    if size(request) <= budget:
        return request, []
    cut: list[str] = []
    for smaller, what in _cuts(request):
        cut.append(what)
        if size(smaller) <= budget:
            return smaller, cut
        request = smaller
    return request, cut


def improve_request(run, node_id: int) -> tuple[ProposalRequest, list[str]]:
    """The request to improve ``node_id`` (the reference for 0) with everything the run knows,
    fitted to the budget; and what was cut to fit."""
    from loopwise.kernels.optimize.prompt import judged_context, target

    ev = run.evaluations.get(node_id)
    if node_id == 0:
        summary, findings = "the PyTorch reference", ()
    elif ev is None:
        summary, findings = "not judged", ()
    else:
        summary, findings = judged_context(ev.get("data") or {"status": ev["status"]})
    findings = tuple(findings) + run._profile_notes(node_id)
    n, best_id = run.s.per_step, run.best()
    best = best_so_far(run.search, best_id, node_id, run.evaluations, run.sources)
    request = ProposalRequest(
        task=run.problem.source, candidate=run.sources.get(node_id, ""), evaluation=summary, findings=findings,
        memory=run.search.memory.summary(), rules=run._rules(), target=target(run.reference or {}, run.evaluations),
        best=best, siblings=siblings(run.search, node_id, run.evaluations, run.sources, best_id),
        directions=directions_for(findings, n), n=n, kind="kernels")
    return fit(request)


def repair_request(run, node_id: int) -> tuple[ProposalRequest, list[str]]:
    """The request to repair failed ``node_id``: its verdict, reasons, failed trials and log,
    with the same context as an improvement; fitted to the budget."""
    from loopwise.core.propose import ProposalRole
    from loopwise.kernels.optimize.prompt import repair_context, target

    data = run.evaluations[node_id]["data"]
    summary, findings, log = repair_context(data, run.logs.get(node_id, ""))
    note = run.search.node(node_id).note
    request = ProposalRequest(
        task=run.problem.source, candidate=run.sources[node_id],
        candidate_summary=f"Node {node_id}" + (f" ({note})" if note else "") + ".", evaluation=summary,
        findings=findings, log=log, memory=run.search.memory.summary(), rules=run._rules(),
        target=target(run.reference or {}, run.evaluations),
        best=best_so_far(run.search, run.best(), node_id, run.evaluations, run.sources),
        n=1, kind="kernels", role=ProposalRole.REPAIR)
    return fit(request)
