"""``loopwise kernels bench kernelbench``: one search per problem of a KernelBench selection, many at
once on an executor's GPUs, aggregated into the benchmark table and an HTML report.

The bench is a run of its own (kind ``kernels.bench``) that records, per problem, the optimize run
it started (``problem_started``, before the search begins) and the problem's row when the search
and the baselines are done (``problem_result``). ``--resume`` skips finished problems and resumes
the optimize runs of unfinished ones, which judge nothing twice.

Table (per level and over all): problems, correct (a correct candidate found), geomean speedup of
the best candidate over eager and over torch.compile (a problem without a correct candidate counts
as the reference itself: 1.0x over eager, eager/compile over compile), and fast_p, KernelBench's
share of problems with a correct candidate faster than p times the denominator, at p = 0, 1, 1.5
and 2, against eager and against torch.compile; the problems below 0.97x torch.compile where
compile's own output passes the judge, the problems where it does not (its output judged by the
judge's rule against the reference's, see :mod:`loopwise.kernels.baseline`), and the
mean wall time of a problem (its search and its baselines, in the process that finished it; with
several problems at once on shared GPUs these overlap), the search's cost at the budget used. The
geomean over compile carries its 95% t-interval over the problems (where the whole selection's
geomean lies when the finished problems are a uniform sample of it: ``--order shuffled``), and where
eager with TF32 was timed (``kernels.baseline.tf32``), the ratio over the relaxed track's yardstick,
the faster of that and torch.compile.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from concurrent.futures import as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

from loopwise.core import stopping
from loopwise.errors import UserError

log = logging.getLogger(__name__)

KIND = "kernels.bench"
FAST_P = (0.0, 1.0, 1.5, 2.0)
RULES = "all | first:N | every:K (ids 1, 1+K, ...) | ids:L/I,L/I,..."
ORDERS = "id | shuffled:SEED"
# After Ctrl-C or SIGTERM, how long the bench waits for its problems' threads to stop (each stops at
# its next wait on a sandbox or a worker, within a poll); one held longer is left to the exit.
STOP_GRACE_S = 5.0


@dataclass
class BenchSettings:
    """What a bench was started with (stored, so a resume continues the same way)."""

    levels: list[int] = field(default_factory=lambda: [1, 2, 3])
    subset: str = "all"
    order: str = "id"
    budget: int = 8
    proposer: str = "expert"
    search: str = "mcts"
    seed: int = 0
    per_step: int = 2
    profiling: str = "none"
    compile: bool = True


def select_problems(root: str | Path, levels: list[int], rule: str) -> list[tuple[int, int, Path]]:
    """The problems of ``levels`` in the checkout ``root`` that ``rule`` picks, as (level, id, path)."""
    root = Path(root)
    base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
    if not any((base / f"level{lv}").is_dir() for lv in levels):
        raise UserError(f"{root} is not a KernelBench checkout (no level{levels[0]}/ folder in it or in "
                        "its KernelBench/); pass --kernelbench PATH")
    by_level: dict[int, list[tuple[int, Path]]] = {}
    for level in levels:
        found = []
        for path in sorted((base / f"level{level}").glob("*.py")):
            m = re.match(r"(\d+)_", path.name)
            if m:
                found.append((int(m.group(1)), path))
        by_level[level] = sorted(found)
    kind, _, arg = rule.partition(":")
    out = []
    try:
        if kind == "all":
            out = [(lv, i, p) for lv, items in by_level.items() for i, p in items]
        elif kind == "first":
            out = [(lv, i, p) for lv, items in by_level.items() for i, p in items[:int(arg)]]
        elif kind == "every":
            step = int(arg)
            if step < 1:
                raise ValueError(arg)
            out = [(lv, i, p) for lv, items in by_level.items() for i, p in items if (i - 1) % step == 0]
        elif kind == "ids":
            wanted = set()
            for item in arg.split(","):
                lv, _, pid = item.strip().partition("/")
                wanted.add((int(lv), int(pid)))
            out = [(lv, i, p) for lv, items in by_level.items() for i, p in items if (lv, i) in wanted]
            missing = wanted - {(lv, i) for lv, i, _ in out}
            if missing:
                raise UserError(f"--subset: not in the checkout (or not in --levels): "
                                f"{', '.join(f'{a}/{b}' for a, b in sorted(missing))}")
        else:
            raise ValueError(rule)
    except ValueError:
        raise UserError(f"--subset {rule!r}: expected {RULES}") from None
    if not out:
        raise UserError(f"--subset {rule!r} selects no problem of levels {levels}")
    return out


def order_problems(problems: list[tuple[int, int, Path]], order: str) -> list[tuple[int, int, Path]]:
    """``problems`` in the order a bench runs them: ``id`` (level, then id) or ``shuffled:SEED`` (one
    seeded random order over every level, the same on every machine), so that the problems a
    stopped bench has finished are a uniform sample of the selection, not its first ids."""
    import random

    if order == "id":
        return list(problems)
    seed = re.fullmatch(r"shuffled:(-?\d+)", order)
    if seed is None:
        raise UserError(f"--order {order!r}: expected {ORDERS}")
    out = sorted(problems)
    random.Random(int(seed.group(1))).shuffle(out)
    return out


# ---------------------------------------------------------------------------------------------
# the table


# A problem counts as below torch.compile under this ratio (above it, a tie within timing noise).
BELOW_COMPILE = 0.97


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _geomean_interval(values: list[float]) -> list[float] | None:
    """The 95% t-interval of the geomean of ``values`` (over their logs), taken as a sample of
    problems: the interval within which the whole selection's geomean lies when the problems
    finished are a uniform sample of it (``--order shuffled``). None below two values."""
    from loopwise.core.stats import mean_interval

    logs = [math.log(v) for v in values if v and v > 0]
    if len(logs) < 2:
        return None
    interval = mean_interval(logs)
    return [math.exp(interval.low), math.exp(interval.high)]


def aggregate(rows: list[dict]) -> list[dict]:
    """One line per level and one for all: the figures described in the module's docstring."""
    out = []
    levels = sorted({r["level"] for r in rows})
    for label, mine in [(f"level {lv}", [r for r in rows if r["level"] == lv]) for lv in levels] + [("all", rows)]:
        if not mine:
            continue
        line = {"group": label, "problems": len(mine), "correct": sum(1 for r in mine if r.get("best_speedup")),
                "evaluations": sum(r.get("evaluations") or 0 for r in mine)}
        over_eager = [r.get("best_speedup") or 1.0 for r in mine]
        over_compile = [r["over_compile"] for r in mine if r.get("over_compile")]
        line["geomean_over_eager"] = _geomean(over_eager)
        line["geomean_over_compile"] = _geomean(over_compile)
        line["geomean_over_compile_ci95"] = _geomean_interval(over_compile)
        line["compile_measured"] = len(over_compile)
        over_yardstick = [r["over_yardstick"] for r in mine if r.get("over_yardstick")]
        line["geomean_over_yardstick"] = _geomean(over_yardstick)
        line["geomean_over_yardstick_ci95"] = _geomean_interval(over_yardstick)
        line["yardstick_measured"] = len(over_yardstick)
        # below torch.compile only where compile's own output passes the judge (where it fails,
        # matching it is no bar); those problems are counted apart
        line["below_compile"] = sum(1 for r in mine if r.get("over_compile") and r["over_compile"] < BELOW_COMPILE
                                    and r.get("compile_correct") is not False)
        line["compile_wrong"] = sum(1 for r in mine if r.get("compile_correct") is False)
        seconds = [r.get("seconds") for r in mine]
        line["seconds_per_problem"] = sum(seconds) / len(seconds) if None not in seconds else None
        for k in ("kernelbench", "gpu", "steady"):  # problems with a correct candidate, same worker
            line[f"geomean_over_compile_{k}"] = _geomean([r[f"over_compile_{k}"] for r in mine
                                                          if r.get(f"over_compile_{k}")])
        for p in FAST_P:
            line[f"fast_{p:g}_eager"] = sum(1 for r in mine if r.get("best_speedup") and r["best_speedup"] > p) / len(mine)
            line[f"fast_{p:g}_compile"] = (sum(1 for r in mine if r.get("best_speedup") and r.get("over_compile")
                                               and r["over_compile"] > p) / len(mine))
        out.append(line)
    return out


def problem_row(level: int, pid: int, name: str, summary: dict, base: dict | None,
                seconds: float | None = None, same_gpu: bool = False) -> dict:
    """A problem's row from its optimize summary and its baseline (``worker_jobs.baseline``'s dict);
    ``seconds``: the problem's wall time (its search and its baseline), the search's cost;
    ``same_gpu``: the baseline was timed on the GPU that timed the search's candidates."""
    from loopwise.kernels.device import timing_meaningful

    best = summary.get("best") or {}
    best_ms = ((best.get("timing") or {}).get("median_ms")) if best else None
    eager_ms = ((best.get("reference_timing") or {}).get("median_ms")) if best else None
    comp = (base or {}).get("compile") or {}
    comp_ms = (comp.get("timing") or {}).get("median_ms") if comp.get("status") in (None, "ok") else None
    base_eager = (((base or {}).get("eager") or {}).get("timing") or {}).get("median_ms")
    row = {"level": level, "id": pid, "problem": name, "run_id": summary.get("run_id"),
           "evaluations": summary.get("evaluations", 0), "failures": summary.get("failures", {}),
           "best_speedup": summary.get("best_speedup") if best else None, "best_ms": best_ms,
           "eager_ms": eager_ms or base_eager, "compile_ms": comp_ms, "compile_status": comp.get("status"),
           "compile_correct": comp.get("correct"), "compile_message": comp.get("correct_message") or "",
           "seconds": seconds,
           "timing_meaningful": timing_meaningful(best.get("device") or (base or {}).get("device") or "")}
    # against torch.compile: on one GPU, compile's time over ours, both by the judge's clock; over
    # several, ours as a ratio to our eager (judge) times the baseline's eager/compile ratio, so two
    # GPUs' clocks never meet in one ratio (that product holds two timings of eager, and on a
    # launch-bound problem they can differ by a quarter)
    row["over_compile"] = _over(comp_ms, best_ms, base_eager, row["best_speedup"], same_gpu)
    # the relaxed track's yardstick (timed where kernels.baseline.tf32 is on): the faster of eager
    # with TF32 allowed and torch.compile
    tf32 = (base or {}).get("eager_tf32") or {}
    tf32_ms = (tf32.get("timing") or {}).get("median_ms") if tf32.get("status") in (None, "ok") else None
    row["eager_tf32_ms"] = tf32_ms
    yardstick = min(ms for ms in (comp_ms, tf32_ms) if ms) if tf32_ms else None
    row["over_yardstick"] = _over(yardstick, best_ms, base_eager, row["best_speedup"], same_gpu)
    row.update(clock_columns(best.get("timing") or {}, (comp.get("timing") or {}) if comp_ms else {}))
    return row


def _over(theirs_ms: float | None, best_ms: float | None, base_eager_ms: float | None, best_speedup: float | None,
          same_gpu: bool) -> float | None:
    """A baseline's time over ours (see :func:`problem_row`); no correct candidate counts as eager."""
    if theirs_ms and same_gpu and best_ms:
        return theirs_ms / best_ms
    if theirs_ms and base_eager_ms:
        return (best_speedup or 1.0) * theirs_ms / base_eager_ms
    return None


def clock_columns(best: dict, compile_: dict) -> dict:
    """The best candidate and torch.compile under each of the judge's clocks (medians, ms), and
    the ratios over compile they give: the KernelBench protocol's event time, the GPU's time with
    the call queued, the host's launch time, and ``steady`` (the larger of the last two)."""
    out: dict = {"clock": best.get("clock")}
    for who, t in (("best", best), ("compile", compile_)):
        for k in ("kernelbench", "gpu", "launch"):
            out[f"{who}_{k}_ms"] = t.get(f"{k}_median_ms")
    for k in ("kernelbench", "gpu", "steady"):
        ours, theirs = (_clock_ms(t, k) for t in (best, compile_))
        out[f"over_compile_{k}"] = theirs / ours if ours and theirs else None
    return out


def _clock_ms(t: dict, clock: str) -> float | None:
    if clock == "steady":
        gpu, launch = t.get("gpu_median_ms"), t.get("launch_median_ms")
        return max(gpu, launch) if gpu is not None and launch is not None else None
    return t.get(f"{clock}_median_ms")


# ---------------------------------------------------------------------------------------------
# the run


class Bench:
    """One bench: its store, the selected problems, and the searches it runs."""

    def __init__(self, settings: BenchSettings, cfg, store, console=None) -> None:
        self.s, self.cfg, self.store, self.console = settings, cfg, store, console
        self.lock = threading.Lock()
        self.rows: dict[str, dict] = {}
        self.started: dict[str, str] = {}
        for e in store.events():
            if e.kind == "problem_result":
                self.rows[e.key] = e.payload
            elif e.kind == "problem_started":
                self.started[e.key] = e.payload["run_id"]

    @classmethod
    def start(cls, settings: BenchSettings, cfg, console=None) -> Bench:
        from loopwise.config import dump_config
        from loopwise.core.run import create_run

        store = create_run(cfg.store.runs_dir, KIND, dump_config(cfg))
        store.append("bench_settings", asdict(settings))
        return cls(settings, cfg, store, console)

    @classmethod
    def resume(cls, run_id: str, cfg, console=None) -> Bench:
        from loopwise.core.run import open_run

        store = open_run(cfg.store.runs_dir, run_id, KIND, noun="a bench")
        (first,) = list(store.events(kind="bench_settings"))[:1] or [None]
        return cls(BenchSettings(**first.payload), cfg, store, console)

    def run(self, problems: list[tuple[int, int, Path]], dispatcher=None, progress=None) -> list[dict]:
        """Runs every unfinished problem (at once over the dispatcher's workers, else one by one)
        and returns every row, finished before or now."""
        todo = [(lv, i, p) for lv, i, p in problems if f"{lv}/{i}" not in self.rows]
        workers = max(1, len(dispatcher.workers)) if dispatcher is not None else 1
        stop = threading.Event()
        # two searches per worker keep it busy while the other search proposes
        threads = stopping.StoppableThreads(2 * workers if dispatcher is not None else 1, stop, name="loopwise-bench")
        try:
            futures = [threads.submit(self._finish, lv, i, p, dispatcher, stop) for lv, i, p in todo]
            for future in as_completed(futures):
                row = future.result()
                if progress is not None:
                    progress(row)
        except BaseException:
            # Ctrl-C or SIGTERM arrive in this thread, the problems run on the others: no queued
            # problem starts, and one under way stops at its next wait on a sandbox or a worker
            # (which ends that process's work) instead of running its verdict, its search and its
            # baselines to the end. Every finished problem is stored already (``_finish``).
            if not threads.stop(STOP_GRACE_S):
                log.warning("a problem's thread did not stop within %.0f s; left to the exit", STOP_GRACE_S)
            raise
        threads.shutdown()
        ordered = [self.rows[f"{lv}/{i}"] for lv, i, _ in problems if f"{lv}/{i}" in self.rows]
        self.store.append("summary", {"table": aggregate(ordered)})
        return ordered

    def _finish(self, level: int, pid: int, path: Path, dispatcher, stop: threading.Event) -> dict:
        """One problem's search and baselines, its row stored as soon as it is made (on the problem's
        own thread, so an interrupt of the main thread loses no finished problem)."""
        key = f"{level}/{pid}"
        try:
            row = self._one(level, pid, path, dispatcher, stop)
        except UserError as exc:
            row = {"level": level, "id": pid, "problem": key, "error": str(exc), "evaluations": 0,
                   "best_speedup": None, "over_compile": None}
        self.store.append("problem_result", row, key=key)
        with self.lock:
            self.rows[key] = row
        return row

    def _one(self, level: int, pid: int, path: Path, dispatcher, stop: threading.Event | None = None) -> dict:
        from loopwise.kernels.optimize import OptimizeRun, Settings
        from loopwise.kernels.problem import load_problem
        from loopwise.kernels.evaluate.workers import make_judge

        key = f"{level}/{pid}"

        def judge_for(problem):
            return make_judge(problem, self.cfg, dispatcher, spares=1)

        started = time.perf_counter()
        problem = load_problem(str(path))
        runs_dir = self.cfg.store.runs_dir
        if key in self.started and (Path(runs_dir) / self.started[key]).exists():
            run = OptimizeRun.resume(self.started[key], self.cfg, runs_dir, judge_for, lambda _spec: problem)
        else:
            settings = Settings(problem=str(path), proposer=self.s.proposer, search=self.s.search, budget=self.s.budget,
                                seed=self.s.seed, per_step=self.s.per_step, profiling=self.s.profiling)
            settings.check()
            run = OptimizeRun.start(settings, self.cfg, runs_dir, judge_for(problem), problem)
            self.store.append("problem_started", {"run_id": run.store.meta.run_id, "path": str(path)}, key=key)
        try:
            run.run(stop=stop)
            if stop is not None and stop.is_set():
                # stopped before its budget: not a finished problem (no row); a resumed bench
                # continues this search where it stopped
                raise stopping.Stopped()
            run.write_best()
            summary = run.summary()
        finally:
            run.judge.close()
            run.store.close()
        base = self._baseline(problem, dispatcher) if self.s.compile else None
        one_gpu = dispatcher is None or len(dispatcher.workers) == 1
        return problem_row(level, pid, problem.name, summary, base, seconds=time.perf_counter() - started,
                           same_gpu=one_gpu)

    def _baseline(self, problem, dispatcher) -> dict | None:
        """Eager and torch.compile of the problem: the same job on a worker when there is an
        executor, else in this process on ``--device``."""
        from loopwise.kernels.evaluate import worker_jobs
        from loopwise.kernels.evaluate.workers import baseline_job

        job = baseline_job(problem, self.cfg)
        if dispatcher is None:
            return worker_jobs.baseline({**job.payload, "device": self.cfg.kernels.device})
        future = dispatcher.submit(job)
        stopping.wait([future])
        result = future.result()
        return result.result if result.ok else None
