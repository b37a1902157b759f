"""The judge's interface on an executor's workers: candidates judged in parallel, one per worker.

``ExecutorJudge`` stands where a local :class:`~loopwise.kernels.evaluate.judge.LocalJudge` stands in
the optimize loop. ``evaluate_many`` sends a batch of candidates to the executor (local workers or
Ray actors, one per GPU, one job at a time each: two timings never share a GPU) and returns the
verdicts in the batch's order, whatever order they finished in, so a run records them
deterministically. Each worker keeps one judge per problem (``worker_jobs``), so every worker
times the reference once on its own GPU and a candidate's speedup is against the reference on the
GPU that timed it.
"""

from __future__ import annotations

import hashlib
import itertools
import logging

from loopwise.core import stopping
from loopwise.core.execute import Job, JobResult
from loopwise.core.execute.dispatch import Dispatcher
from loopwise.kernels.evaluate.result import Evaluation, Reason, Status

log = logging.getLogger(__name__)
_ids = itertools.count()


class ExecutorJudge:
    """Judges candidates of one problem on an executor's workers (implements
    :class:`~loopwise.kernels.evaluate.Judge`)."""

    def __init__(self, problem, config, dispatcher: Dispatcher, device: str = "auto",
                 timeout_s: float | None = None) -> None:
        self.problem, self.cfg, self.dispatcher = problem, config, dispatcher
        self.timeout_s = timeout_s
        self._device = device
        # What a worker keys its judge by (worker_jobs): jobs of one problem go to a worker that
        # already holds that judge (the reference timed on its GPU) when it is free.
        digest = hashlib.sha256(f"{problem.sha256}{config.model_dump_json()}{device}".encode()).hexdigest()
        self.affinity = f"judge:{problem.name}:{digest[:16]}"
        workers = dispatcher.workers
        self.device_name = f"{type(dispatcher.executor).__name__}, {len(workers) or '?'} worker(s)"
        # Profiling in the loop runs in the driver only with a local CUDA device; on an executor the
        # candidates are judged elsewhere and this process may have no GPU at all.
        self.device = "remote"

    def job(self, source: str, name: str) -> Job:
        """The job that judges one candidate on a worker."""
        return Job(f"{name}#{next(_ids)}", "loopwise.kernels.evaluate.worker_jobs:evaluate",
                   {"problem_source": self.problem.source, "problem_name": self.problem.name, "device": self._device,
                    "config": self.cfg.model_dump(mode="json"), "candidate_source": source, "candidate_name": name},
                   affinity=self.affinity)

    def evaluate(self, source: str, name: str = "<candidate>") -> Evaluation:
        """The verdict on one candidate, judged on a worker."""
        return self.evaluate_many([(source, name)])[0]

    def evaluate_many(self, items: list[tuple[str, str]]) -> list[Evaluation]:
        """Verdicts for ``[(source, name), ...]`` in that order; a job the executor lost (its worker
        died past the retries, or it ran out of time) is a crash with the executor's reason."""
        futures = [(self.dispatcher.submit(self.job(source, name)), name) for source, name in items]
        stopping.wait([f for f, _ in futures], timeout=self.timeout_s)
        out = []
        for future, name in futures:
            result: JobResult | None = future.result() if future.done() else None
            if result is not None and result.ok:
                ev = Evaluation.model_validate(result.result)
                printed = result.log
                ev.log = f"[judged on {result.worker}]\n{ev.log}" + (f"\n[worker output]\n{printed}" if printed else "")
                out.append(ev)
                continue
            why = result.error.strip().splitlines()[0] if result is not None and result.error else "no result in time"
            out.append(self._lost(name, why, result))
        return out

    def _lost(self, name: str, why: str, result: JobResult | None) -> Evaluation:
        log.warning("evaluation of %s lost: %s", name, why)
        reason = Reason(code="executor_error", message=f"the executor lost this evaluation ({why}); "
                        "the candidate was not judged", evidence={"worker": result.worker if result else ""})
        return Evaluation(status=Status.CRASH, problem=self.problem.name, candidate=name, reasons=[reason],
                          policy=self.cfg.precision, tolerance=self.cfg.tolerance,
                          log=result.log if result else "")

    def reference_facts(self, compile: bool = False) -> dict:
        """What a worker's judge measures of the reference and its device (one job); a job the
        executor lost leaves every fact unknown, with its reason."""
        from loopwise.kernels.evaluate.reference_facts import unknown

        job = Job(f"reference:{self.problem.name}#{next(_ids)}", "loopwise.kernels.evaluate.worker_jobs:reference_facts",
                  {"problem_source": self.problem.source, "problem_name": self.problem.name, "device": self._device,
                   "config": self.cfg.model_dump(mode="json"), "compile": compile}, affinity=self.affinity)
        future = self.dispatcher.submit(job)
        stopping.wait([future], timeout=self.timeout_s)
        result: JobResult | None = future.result() if future.done() else None
        if result is not None and result.ok and isinstance(result.result, dict):
            return result.result
        why = result.error.strip().splitlines()[0] if result is not None and result.error else "no result in time"
        return unknown(self.device_name, f"the reference was not measured on a worker ({why})")

    def precompile(self, sources: list[str]) -> int:
        """Builds nothing here: each worker's own judge builds the candidates it is sent, on the
        machine that runs them. Returns 0."""
        return 0

    def close(self) -> None:
        """The dispatcher and its executor belong to whoever made them: nothing to release here."""


def worker_device(cfg) -> str:
    """The device a job names for its worker: a worker is pinned to its GPU, so "auto" is that GPU
    (or the CPU of a stand-in); only an explicit ``--device cpu`` keeps the work on the CPU."""
    return "cpu" if cfg.kernels.device == "cpu" else "auto"


def make_judge(problem, cfg, dispatcher: Dispatcher | None, spares: int = 2):
    """The judge a search of ``problem`` uses: on the dispatcher's workers when there is one, else
    a local judge on ``--device``."""
    if dispatcher is not None:
        return ExecutorJudge(problem, cfg.kernels.eval, dispatcher, device=worker_device(cfg))
    from loopwise.kernels.evaluate.judge import LocalJudge

    return LocalJudge(problem, cfg.kernels.eval, device=cfg.kernels.device, spares=spares)


def baseline_job(problem, cfg) -> Job:
    """The job that times ``problem``'s eager and torch.compile (default mode) on a worker."""
    compiled = cfg.model_copy(deep=True)
    compiled.kernels.baseline.compile, compiled.kernels.baseline.max_autotune = True, False
    return Job(f"baseline:{problem.name}#{next(_ids)}", "loopwise.kernels.evaluate.worker_jobs:baseline",
               {"problem_source": problem.source, "problem_name": problem.name, "device": worker_device(cfg),
                "config": compiled.model_dump(mode="json")})

