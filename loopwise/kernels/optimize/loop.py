"""The optimize loop: baseline, then ask -> propose -> judge -> tell until the budget.

Every step is an event in the run store, appended before the next step starts: the ask (which
node), each proposal (parent, key, note; the source as an artifact), each verdict. Resuming replays
those events into a fresh search of the same kind and seed, which is deterministic, so the tree
comes back exactly; children proposed but not judged when the run died are judged first. No
verdict is ever computed twice.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from loopwise.config import Config, dump_config
from loopwise.core.propose._base import REPROMPT_ROUNDS, REPROMPTABLE
from loopwise.kernels.optimize.prompt import notes_from, profile_notes, rules
from loopwise.kernels.optimize.settings import ENERGY_SLACK, Settings, Tally, make_search, source_key
from loopwise.kernels.optimize.status import KIND

if TYPE_CHECKING:
    from loopwise.kernels.evaluate import Judge

log = logging.getLogger(__name__)

# Steps in a row whose every request timed out (nothing answered, not even badly) after which the
# run stops: an agent that is gone would otherwise cost one full wait per open node.
SILENT_STEPS = 2


class OptimizeRun:
    """One optimization run: a search, a proposer, a judge and a store."""

    def __init__(self, settings: Settings, cfg: Config, store, judge: Judge, problem) -> None:
        self.s, self.cfg, self.store, self.judge, self.problem = settings, cfg, store, judge, problem
        self.search = make_search(settings)
        from loopwise.kernels.optimize.team import build_proposers

        # the model (or the expert, for an expert run), and a hybrid's expert beside it
        self.proposer, self.expert = build_proposers(settings, store, cfg, judge, problem)
        self.expert_steps = 0  # steps a hybrid's expert was asked for
        self.handed_over = False  # a hybrid's model has taken over from the best node
        self.reviews: dict[int, dict] = {}  # node -> the reviewer's reading of its suspicious verdict
        self.plans: dict[int, tuple] = {}  # node -> the profiling tools the analyst asked for on its children
        self.sources: dict[int, str] = {0: ""}
        self.evaluations: dict[int, dict] = {}
        self.logs: dict[int, str] = {}  # node -> its sandbox log (what a repair is shown)
        self.stopped = ""  # why the search ended before its budget, in one line ("" when it did not)
        self.tally = Tally()
        self.profiles: dict[int, tuple] = {}  # node -> FindingNotes of its profile (recorded, replayed)
        self.profiler = None  # profile(problem, candidate, out_dir, **kw) -> ProfileReport; None: the real one
        self.made_by: dict[int, str] = {}  # node -> "<proposer>/<role>" that proposed it
        self.reference: dict | None = None  # the judge's reference_facts, measured once, recorded, replayed

    # -- starting and resuming ----------------------------------------------------------------
    @classmethod
    def start(cls, settings: Settings, cfg: Config, runs_dir: str, judge: Judge, problem):
        from loopwise.core.run import create_run

        store = create_run(runs_dir, KIND, dump_config(cfg), settings=settings.__dict__)
        run = cls(settings, cfg, store, judge, problem)
        run.search.add_root("reference", payload={"node": "reference"})
        return run

    @classmethod
    def resume(cls, run_id: str, cfg: Config, runs_dir: str, judge_factory, problem_loader):
        from loopwise.core.run import open_run, recorded_settings

        store = open_run(runs_dir, run_id, KIND)
        recorded = recorded_settings(store)
        if recorded is None:
            store.close()
            from loopwise.errors import UserError

            raise UserError(f"run {run_id} is not an optimize run (no settings recorded)")
        settings = Settings(**{"repairs": 0, **recorded})  # a run from before repairs replays without them
        problem = problem_loader(settings.problem)
        run = cls(settings, cfg, store, judge_factory(problem), problem)
        run.search.add_root("reference", payload={"node": "reference"})
        run._replay()
        return run

    def _replay(self) -> None:
        for event in self.store.events():
            p = event.payload
            if event.kind == "ask":
                got = self.search.ask()
                if (got.node_id if got else None) != p["node"]:
                    raise RuntimeError("the search did not replay as recorded (changed loopwise version?)")
            elif event.kind == "proposal_failed":
                self.tally.propose(p.get("reason"), p.get("detail", ""))
            elif event.kind == "proposal_duplicate":
                self.tally.duplicate()
                if "note" in p:  # told to the search (its memory and pruning count it) since notes are recorded
                    self.search.add_child(p["parent"], p["key"], note=p["note"], move=p.get("move", ""))
            elif event.kind == "reprompt":
                self.tally.reprompts += 1
            elif event.kind == "repair":
                self.tally.repairs += 1
            elif event.kind == "proposal":
                self.tally.propose(None)
                source = self.store.get_artifact(p["source_sha256"]).decode()
                node = self.search.add_child(p["parent"], p["key"], payload={"node": p["key"][:12]}, note=p["note"],
                                             move=p.get("move", ""))
                self.sources[node] = source
                if p.get("by"):
                    self.tally.by[p["by"]] += 1
                    self.made_by[node] = p["by"]
            elif event.kind == "evaluation":
                self._tell(p["node"], p["evaluation"])
                if p.get("log_sha256"):
                    self.logs[p["node"]] = self.store.get_artifact(p["log_sha256"]).decode(errors="replace")
            elif event.kind == "close":
                self.search.close(p["node"])
            elif event.kind == "profile":
                self.profiles[p["node"]] = notes_from(p.get("notes") or [])
            elif event.kind == "reference":
                self.reference = p
            elif event.kind == "request" and p.get("proposer") == "expert" and self.expert is not None:
                self.expert_steps += 1
            elif event.kind == "handover":
                self.handed_over = True
            elif event.kind in ("review", "review_failed"):
                self.reviews[p["node"]] = p
            elif event.kind == "analysis":
                self.plans[p["node"]] = tuple(p.get("tools") or ())

    # -- the loop -----------------------------------------------------------------------------
    def pending(self) -> list[int]:
        return [n.node_id for n in self.search.nodes() if n.node_id and n.outcome is None]

    def run(self, progress=None, deadline: float | None = None, clock=time.monotonic, stop=None) -> bool:
        """Searches until the budget is spent or nothing is left to expand (True), or until
        ``deadline`` (a ``clock()`` value) has passed or ``stop`` (a ``threading.Event``) is set
        (False): no step starts after it, and the run stays resumable. The step under way finishes,
        unless ``stop`` is also its thread's stop event (``loopwise.core.stopping.bound``, as a
        bench's problems run): then it ends at its next wait on a sandbox or a worker, raising
        ``Stopped``, and a verdict it was waiting for is judged again on resume."""
        self._judge_batch(self.pending(), progress)  # proposed before a crash, never judged
        self._measure_reference()
        silent = 0
        while not self.search.budget_spent:
            if deadline is not None and clock() >= deadline:
                self.store.append("time_limit", {"evaluations": self.tally.evaluations})
                return False
            if stop is not None and stop.is_set():
                return False
            exp = self.search.ask()
            self.store.append("ask", {"node": exp.node_id if exp else None})
            if exp is None:
                self._stop_early()
                break
            before = (self.tally.answered, self.tally.proposal_failures["timeout"])
            parent, children = self._propose(exp.node_id, repair=exp.repair)
            timed_out = self.tally.proposal_failures["timeout"] > before[1]
            silent = silent + 1 if timed_out and self.tally.answered == before[0] else 0
            if silent >= SILENT_STEPS:
                self._stop_silent(silent)
                break
            if not children:
                self.search.close(parent)
                self.store.append("close", {"node": parent})
            self._judge_batch(children[:self.search.budget_left], progress)
        return True

    def _stop_early(self) -> None:
        """Says in one line why the search ended with budget left, and records it."""
        t = self.tally
        if t.evaluations == 0 and t.proposal_failures:
            failed = sum(t.proposal_failures.values())
            reason, detail = sorted(t.first_failure.items())[0]
            self.stopped = (f"no candidate was judged: all {failed} proposals failed ({reason}: {detail}), "
                            f"re-prompts included")
        else:
            self.stopped = (f"nothing left to expand after {t.evaluations} of {self.s.budget} candidates "
                            f"(every node closed or failed)")
        self.store.append("stopped", {"reason": self.stopped, "evaluations": t.evaluations})

    def _stop_silent(self, steps: int) -> None:
        """Stops a run whose model answered nothing for ``steps`` steps in a row (each request
        timed out), and records why; the run stays resumable."""
        detail = self.tally.first_failure.get("timeout", "")
        self.stopped = (f"the model answered none of the requests of the last {steps} steps, each timed out "
                        f"({detail}); `--resume {self.store.meta.run_id}` continues the run once it answers")
        self.store.append("stopped", {"reason": self.stopped, "evaluations": self.tally.evaluations})

    def _rules(self) -> tuple:
        ev = self.cfg.kernels.eval
        return rules(ev.precision, ev.atol, ev.rtol)

    def _measure_reference(self) -> None:
        """The device's ceilings and the reference's eager / torch.compile times and floor, asked of
        the judge once before the first step and recorded (a resumed run reads them back)."""
        if self.reference is None:
            self.reference = self.judge.reference_facts(compile=self.cfg.kernels.baseline.compile)
            self.store.append("reference", self.reference)

    def _device_name(self) -> str:
        return self.judge.device_name

    def _device(self) -> str:
        return self.judge.device or "cpu"

    def _profile_notes(self, node: int) -> tuple:
        """Findings of a profile of ``node`` (the reference for node 0), taken once when the search
        first expands it, recorded in the store and replayed on resume. Nothing on the CPU, for
        ``--profiling none``, or for a candidate that was not judged correct."""
        if node in self.profiles:
            return self.profiles[node]
        mode, device = self.s.profiling, self._device()
        if mode == "none" or not device.startswith("cuda"):
            return ()
        if node != 0 and (self.evaluations.get(node) or {}).get("status") != "correct":
            return ()
        behind = self._behind_the_best(node)
        if behind:
            self.store.append("profile", {"node": node, "mode": mode, "skipped": behind, "notes": []})
            self.profiles[node] = ()
            return ()
        from loopwise.errors import UserError

        folder = profile_dir(self.store.run_dir, node)
        folder.mkdir(parents=True, exist_ok=True)
        candidate = None
        if node != 0:
            candidate = folder / "candidate.py"
            candidate.write_text(self.sources[node], encoding="utf-8")
        profiler = self.profiler
        if profiler is None:
            from loopwise.kernels.profile.run import profile as profiler
        event: dict = {"node": node, "mode": mode}
        also = self.plans.get(self.search.node(node).parent_id, ()) if node != 0 else ()
        asked = {"also": also} if also else {}  # the tools the analyst asked for, besides the mode's
        if also:
            event["also"] = list(also)
        try:
            # No system trace in the loop: one child under ncu instead of two (a profile costs
            # several judgements); the kernels come from ncu, without their host gaps.
            report = profiler(self.problem, candidate, folder, device=device, mode=mode, ncu="auto",
                              precision=self.cfg.kernels.eval.precision, trace=False, **asked)
        except UserError as exc:  # the candidate would not run under the profiler
            event["error"] = str(exc)
            notes: tuple = ()
        except Exception as exc:  # noqa: BLE001 - profiling only informs the proposer: never stop the search
            log.exception("profiling node %s failed", node)
            event["error"] = f"profiling failed ({type(exc).__name__}: {exc})"
            notes = ()
        else:
            notes = profile_notes(report)
            event.update(costs=report.costs_s, kernels=len(report.kernels), notes_skipped=report.notes)
        event["notes"] = [{"text": n.text, "evidence": dict(n.evidence)} for n in notes]
        self.store.append("profile", event)
        self.profiles[node] = notes
        return notes

    def _behind_the_best(self, node: int) -> str:
        """Why ``node`` is not worth a profile (its speedup is below ``profile_within`` of the best
        so far), or "" when it is (the reference always is)."""
        if node == 0 or self.s.profile_within <= 0:
            return ""
        speedups = [e["speedup"] for e in self.evaluations.values() if e["status"] == "correct" and e["speedup"]]
        mine = (self.evaluations.get(node) or {}).get("speedup") or 0.0
        best = max(speedups, default=mine)
        if mine >= self.s.profile_within * best:
            return ""
        return (f"not profiled: {mine:.3g}x is below {self.s.profile_within:g} x the best so far "
                f"({best:.3g}x)")

    def _propose(self, asked: int, repair: bool = False) -> tuple[int, list[int]]:
        """Asks this step's proposer (``team.step_proposer``) for children of the node the search
        ``asked`` for (a repair of it when ``repair``); a hybrid's expert step that gives nothing
        goes to the model, whose first step expands the best node. Returns the node expanded and
        its new children."""
        from loopwise.kernels.optimize.team import handover_parent, step_proposer

        name, proposer = step_proposer(self, repair)
        if name == "expert" and self.expert is not None:
            self.expert_steps += 1
            children = self._ask(asked, False, name, proposer)
            if children:
                return asked, children
            name, proposer = self.s.model_proposer(), self.proposer  # the expert had nothing: the model's turn
        parent = asked if repair else handover_parent(self, asked, name)
        return parent, self._ask(parent, repair, name, proposer)

    def _ask(self, parent: int, repair: bool, name: str, proposer) -> list[int]:
        """Asks ``proposer`` (the analyst first, when it plays) for children of ``parent``, then
        asks again, with what was wrong, for each answer that had no usable code or repeated a node
        (at most ``REPROMPT_ROUNDS`` rounds)."""
        from loopwise.kernels.optimize.context import improve_request, repair_request
        from loopwise.kernels.optimize.team import plan_step

        request, cut = repair_request(self, parent) if repair else improve_request(self, parent)
        if not repair:
            request = plan_step(self, parent, request, name, proposer)
        self._record_request(parent, request, cut, proposer=name)
        if repair:
            self.tally.repairs += 1
            self.store.append("repair", {"node": parent})
        moves = [self._move(request, i, repair, name) for i in range(request.n)]
        children, retry = self._take(parent, proposer.propose(request), repair, False, name, moves)
        rounds = 0 if name == "expert" else REPROMPT_ROUNDS
        for _ in range(rounds):
            again = []
            for feedback, move in retry:
                self.tally.reprompts += 1
                self.store.append("reprompt", {"parent": parent, "feedback": feedback})
                again_request = replace(request, n=1, feedback=feedback, directions=())
                got, more = self._take(parent, proposer.propose(again_request), repair, True, name, [move])
                children, again = children + got, again + more
            retry = again
        return children

    @staticmethod
    def _move(request, index: int, repair: bool, name: str) -> str:
        """The kind of change answer ``index`` of ``request`` is counted under in the search memory:
        the expert's notes are already move names (""); a model's repair is a repair; a model's
        improvement is the approach its request asked for (its note is free text, one of a kind)."""
        if name == "expert":
            return ""
        return "repair" if repair else request.direction(index)

    def _record_request(self, parent: int, request, cut: list[str], proposer: str = "") -> None:
        """One ``request`` event per request sent: who was asked, its role, size, directions and
        template version."""
        from loopwise.core.propose import prompt_version
        from loopwise.kernels.optimize.context import size

        self.store.append("request", {"parent": parent, "role": str(request.role), "n": request.n,
                                      "proposer": proposer or self.s.proposer,
                                      "prompt_version": prompt_version("kernels"), "chars": size(request),
                                      "directions": list(request.directions), "cut": cut})

    @staticmethod
    def _by(name: str, repair: bool, reprompt: bool) -> str:
        """Who made a proposal and in which role: ``<proposer>/<improve|repair>[ re-prompt]``."""
        return f"{name}/{'repair' if repair else 'improve'}" + (" re-prompt" if reprompt else "")

    def _take(self, parent: int, results, repair: bool, reprompt: bool, name: str = "",
              moves: list[str] = ()) -> tuple[list[int], list[tuple[str, str]]]:
        """Records the proposer's results, each with who made it, in which role and under which
        move (``moves[i]`` for result ``i``, see :meth:`_move`); returns the new children and, for
        each answer worth asking again, what was wrong with it and its move."""
        children, retry = [], []
        by = self._by(name or self.s.proposer, repair, reprompt)
        for index, result in enumerate(results):
            move = moves[index] if index < len(moves) else ""
            if not result.ok:
                self.store.append("proposal_failed", {"parent": parent, "reason": str(result.reason),
                                                      "detail": result.detail, "origin": result.origin, "by": by})
                self.tally.propose(str(result.reason), result.detail)
                if result.reason in REPROMPTABLE:
                    retry.append((result.detail, move))
                continue
            key = source_key(result.content)
            same = self.search.find(key)
            note = f"repair of node {parent}: {result.note}" if repair else result.note
            if same is not None:  # the same code again: already in the tree
                self.store.append("proposal_duplicate", {"parent": parent, "key": key, "origin": result.origin,
                                                         "node": same, "note": note, "by": by, "move": move})
                self.search.add_child(parent, key, note=note, move=move)  # counted in the search memory and pruning
                self.tally.duplicate()
                status = (self.evaluations.get(same) or {}).get("status", "not judged yet")
                retry.append((f"its code is identical to node {same}'s, already in the search ({status}); "
                              "propose a different change", move))
                continue
            self.tally.propose(None)
            sha = self.store.put_artifact(result.content, name=f"candidate-{key[:12]}.py", media_type="text/x-python")
            self.store.append("proposal", {"parent": parent, "key": key, "note": note, "by": by, "move": move,
                                           "origin": result.origin, "source_sha256": sha})
            self.tally.by[by] += 1
            node = self.search.add_child(parent, key, payload={"node": key[:12]}, note=note, move=move)
            self.sources[node] = result.content
            self.made_by[node] = by
            children.append(node)
        return children, retry

    def _judge_batch(self, nodes: list[int], progress=None) -> None:
        """Judges ``nodes`` as one batch: a judge on an executor's workers judges them at once, a
        local one builds their native extensions first, then judges them one after another.
        Verdicts are recorded and told in node order either way, so a resumed run replays them the
        same."""
        from loopwise.kernels.eval_runs import record_evaluation

        if not nodes:
            return
        items = [(self.sources[n], f"node-{n}") for n in nodes]
        self._precompile(nodes, [source for source, _ in items])
        verdicts = self.judge.evaluate_many(items)
        from loopwise.kernels.optimize.team import review

        for node, ev in zip(nodes, verdicts):
            self.logs[node] = ev.log or ""
            self._tell(node, record_evaluation(self.store, ev, ev.candidate_key, node=node))
            review(self, node)
            if progress is not None:
                progress(self.tally.line(self.s.budget))

    def _precompile(self, nodes: list[int], sources: list[str]) -> None:
        """A judge on this machine builds a batch's native candidates at once before judging them
        one by one (their sandboxes then load the builds); the wall time is recorded. A judge on
        an executor's workers builds nothing here."""
        if len(sources) < 2:
            return
        t0 = time.perf_counter()
        built = self.judge.precompile(sources)
        if built:
            self.store.append("precompile", {"nodes": nodes, "built": built,
                                             "seconds": round(time.perf_counter() - t0, 1)})

    def _tell(self, node: int, data: dict) -> None:
        from loopwise.core.search import Outcome

        speedup = data.get("speedup") if data["status"] == "correct" else None
        if data["status"] == "correct" and not speedup:
            speedup = 1e-6  # correct but untimed (should not happen): worst possible speed
        self.evaluations[node] = {"status": data["status"], "speedup": speedup,
                                  "energy": data.get("energy_j_per_call"), "data": data}
        self.search.tell(node, Outcome(data["status"], speedup))
        self.tally.add(data["status"], speedup)

    # -- the result ---------------------------------------------------------------------------
    def best(self) -> int | None:
        correct = {n: e for n, e in self.evaluations.items() if e["status"] == "correct" and e["speedup"]}
        if not correct:
            return None
        fastest = max(correct, key=lambda n: correct[n]["speedup"])
        if self.s.objective == "speed":
            return fastest
        limit = correct[fastest]["speedup"] / ENERGY_SLACK
        near = {n: e for n, e in correct.items() if e["speedup"] >= limit and e["energy"]}
        return min(near, key=lambda n: near[n]["energy"]) if near else fastest

    def write_best(self, path: Path | None = None) -> Path | None:
        node = self.best()
        if node is None:
            return None
        path = path or (self.store.run_dir / "best_modelnew.py")
        e = self.evaluations[node]
        header = (f"# Best candidate of loopwise run {self.store.meta.run_id} for {self.problem.name}: "
                  f"{e['speedup']:.3f}x over eager ({self.cfg.kernels.eval.precision} policy, "
                  f"{self.cfg.kernels.eval.tolerance} tolerance).\n")
        if not self.timing_meaningful():
            from loopwise.kernels.device import NOT_MEANINGFUL

            header += f"# {NOT_MEANINGFUL}.\n"
        path.write_text(header + self.sources[node], encoding="utf-8")
        self.store.append("best", {"node": node, "path": str(path), "speedup": e["speedup"]})
        return path

    def timing_meaningful(self) -> bool:
        """Whether the run's speedups say anything about speed: none of them was timed on the CPU."""
        from loopwise.kernels.device import timing_meaningful

        return all(timing_meaningful(e["data"].get("device", "")) for e in self.evaluations.values() if e["speedup"])

    def summary(self) -> dict:
        node = self.best()
        return {"run_id": self.store.meta.run_id, "problem": self.problem.name, "settings": self.s.__dict__,
                "evaluations": self.tally.evaluations, "best_speedup": self.tally.best,
                "timing_meaningful": self.timing_meaningful(),
                "best_node": node, "failures": dict(self.tally.failures), "stopped": self.stopped,
                "proposals": {"answered": self.tally.answered, "failed": dict(self.tally.proposal_failures),
                              "first_failure": dict(self.tally.first_failure), "duplicates": self.tally.duplicates,
                              "reprompts": self.tally.reprompts, "repairs": self.tally.repairs,
                              "by": dict(self.tally.by)},
                "reference": self.reference,
                "reviews": {str(n): {k: r.get(k, "") for k in ("verdict", "explanation", "by")}
                            for n, r in sorted(self.reviews.items())},
                "best": json.loads(json.dumps(self.evaluations[node]["data"])) if node is not None else None}


def profile_dir(run_dir: Path, node: int) -> Path:
    """Where a run keeps the profile of one node (its trace, ncu CSV, roofline.png)."""
    return Path(run_dir) / "profiles" / f"node-{node}"
