"""Repair on vs off at the same budget, with a scripted model that replays recorded answers.

For each problem, ``loopwise kernels optimize`` runs twice through the exchange folder (``--repairs
1`` and ``--repairs 0``), same budget, same seed. The scripted agent answers improve requests with
the typical mistakes first, in this order: a typo (``tl.arang``), a wrong index (each element reads
its neighbour), no code block, a duplicate of an earlier answer, a plain ``tl.dot`` under the fp32
policy; then correct files (the honest candidate at other block sizes). It answers every repair
request (a prompt with "## The candidate that failed") with a correct file. The JSON written says
per arm and problem: candidates judged and correct, failures by status, repair requests and how
many of them gave a correct candidate (the repair rate), and the best speedup.

The arms run one after another under a total time limit (``--budget-s``): each gets at most twice
its even share of the time left (:func:`arm_limit`); no step starts in its last ``STEP_RESERVE_S``
(``--time-limit``; an arm cut short says ``time_limited`` and its problem is left out of the
totals), and at its limit it is stopped (SIGTERM, then SIGKILL), its row holding what its store
recorded. Progress lines with a UTC timestamp and the
seconds since the start go to stdout as each arm starts and ends, and the JSON is rewritten after
every arm (``complete`` false until the last), so a run killed from outside keeps what it finished.
Each arm's ``timing`` splits its wall time by what the run was doing, from its store's event times:
starting the process, starting the judge and measuring the reference, waiting for answers, judging,
and closing.

    python bench/repair_replay.py --out repair_replay.json                 # on CUDA: 2 problems
    TRITON_INTERPRET=1 python bench/repair_replay.py --smoke --out s.json  # CPU: 1 problem, tiny budget
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = re.compile(r"^prompt-(\d+)\.md$")
REPAIR_MARK = "## The candidate that failed"
BLOCKS = ("512", "2048", "256", "4096", "128", "8192")  # the honest candidate's other block sizes
# Candidates judged per arm. 6 is where both arms judge all three replayed mistakes (on: each
# repaired; off: followed by three honest answers) and no more than the scripts hold (at 8 the off
# arm's improve script runs out after 6 judged and it re-prompts on duplicates until it stops).
BUDGET, SMOKE_BUDGET = 6, 4
BUDGET_S, SMOKE_BUDGET_S = 240.0, 600.0  # seconds for all arms together
STEP_RESERVE_S = 10.0  # of an arm's seconds: no step starts in the last ones (the one under way finishes)
MIN_ARM_S = 20.0  # an arm with less time than this left is not started
KILL_GRACE_S = 15.0  # after SIGTERM, before SIGKILL
DOT = '''

@triton.jit
def unused_dot_kernel(a_ptr, b_ptr, c_ptr):
    r = tl.arange(0, 16)
    a = tl.load(a_ptr + r[:, None] * 16 + r[None, :])
    b = tl.load(b_ptr + r[:, None] * 16 + r[None, :])
    tl.store(c_ptr + r[:, None] * 16 + r[None, :], tl.dot(a, b))
'''


@dataclass(frozen=True)
class Case:
    """A problem, its honest Triton candidate, and the text the wrong-index mistake replaces."""

    name: str
    problem: Path
    honest: Path
    index: tuple[str, str]  # (correct load, load of the neighbour)


CASES = (
    Case("scaled_gelu", ROOT / "loopwise/kernels/examples/scaled_gelu_problem.py",
         ROOT / "loopwise/kernels/examples/scaled_gelu_triton.py", ("x_ptr + offs,", "x_ptr + (offs ^ 1),")),
    Case("relu", ROOT / "tests/kernels/candidates/problems/relu.py", ROOT / "tests/kernels/candidates/triton_relu.py",
         ("x_ptr + offsets,", "x_ptr + (offsets ^ 1),")),
)


def answer(code: str, move: str) -> str:
    return f"Move: {move}\n\n```python\n{code}```\n"


def scripts(case: Case) -> tuple[list[str], list[str]]:
    """The improve answers (mistakes first, then honest variants) and the repair answers."""
    good = case.honest.read_text(encoding="utf-8")
    for text in ("tl.arange(0, BLOCK)", case.index[0], "1024"):
        assert text in good, f"{case.honest} has no {text!r}: the replayed mistakes need it"
    typo = good.replace("tl.arange(0, BLOCK)", "tl.arang(0, BLOCK)")
    variants = [good.replace("1024", block) for block in BLOCKS]
    improve = [answer(typo, "one fused kernel"), answer(good.replace(*case.index), "one fused kernel, new indexing"),
               "I would fuse the whole forward into one kernel with wider loads.",
               answer(typo, "one fused kernel"), answer(good + DOT, "fused kernel with a tensor-core dot")]
    improve += [answer(code, f"block size {block}") for code, block in zip(variants[1::2], BLOCKS[1::2])]
    repair = [answer(code, f"fixed, block size {block}") for code, block in zip(variants[::2], BLOCKS[::2])]
    return improve, repair


class ReplayAgent:
    """Answers each new prompt in ``folder``: a repair prompt with the next repair answer, any other
    with the next improve answer (the last one again once a script is spent), each marked complete
    with its ``.done`` file."""

    def __init__(self, folder: Path, improve: list[str], repair: list[str]) -> None:
        self.folder, self.improve, self.repair = folder, improve, repair
        self.used = {"improve": 0, "repair": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ReplayAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _next(self, kind: str) -> str:
        script = self.repair if kind == "repair" else self.improve
        text = script[min(self.used[kind], len(script) - 1)]
        self.used[kind] += 1
        return text

    def _loop(self) -> None:
        while not self._stop.is_set():
            names = sorted(p.name for p in self.folder.iterdir()) if self.folder.is_dir() else []
            for name in names:
                m = PROMPT.match(name)
                if not m or (self.folder / f"answer-{m[1]}.md").exists():
                    continue
                prompt = (self.folder / name).read_text(encoding="utf-8")
                tmp = self.folder / f"answer-{m[1]}.md.tmp"
                tmp.write_text(self._next("repair" if REPAIR_MARK in prompt else "improve"), encoding="utf-8")
                os.replace(tmp, self.folder / f"answer-{m[1]}.md")
                # the marker says the answer is complete: read at the proposer's next poll, not
                # after two unchanged polls (or the settling time of an answer without code)
                (self.folder / f"answer-{m[1]}.md.done").touch()
            time.sleep(0.05)


def repair_outcomes(run_dir: Path) -> tuple[int, int]:
    """(repair candidates judged, those judged correct), read from the run's events."""
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        by, status, node = {}, {}, 0
        for kind, payload in db.execute("SELECT kind, payload FROM events ORDER BY seq"):
            p = json.loads(payload)
            if kind == "proposal":
                node += 1
                by[node] = p.get("by", "")
            elif kind == "evaluation" and "node" in p:
                status[p["node"]] = p["evaluation"]["status"]
    finally:
        db.close()
    repaired = [n for n, who in by.items() if "/repair" in who and n in status]
    return len(repaired), sum(1 for n in repaired if status[n] == "correct")


def candidate_rows(events: list[tuple[float, str, dict]]) -> list[dict]:
    """One row per judged candidate, in order: its node, who proposed it, its status, its speedup
    and the times it came from (the candidate's and the reference's KernelBench-clock medians,
    and the GPU-clock and launch medians of the queued pass), so a best speedup can be traced to
    the clock that made it."""
    by, node, rows = {}, 0, []
    for _, kind, p in events:
        if kind == "proposal":
            node += 1
            by[node] = p.get("by", "")
        elif kind == "evaluation" and "node" in p:
            e = p["evaluation"]
            t, r = e.get("timing") or {}, e.get("reference_timing") or {}
            rows.append({"node": p["node"], "by": by.get(p["node"], ""), "status": e["status"],
                         "speedup": e.get("speedup"), "ms": t.get("median_ms"),
                         "gpu_ms": t.get("gpu_median_ms"), "launch_ms": t.get("launch_median_ms"),
                         "reference_ms": r.get("median_ms"), "reference_gpu_ms": r.get("gpu_median_ms")})
    return rows


def _events(run_dir: Path) -> list[tuple[float, str, dict]]:
    """The run's events as (time, kind, payload), in order; none when its store was never written."""
    if not (run_dir / "run.sqlite").is_file():
        return []
    db = sqlite3.connect(run_dir / "run.sqlite")
    try:
        return [(ts, kind, json.loads(payload))
                for ts, kind, payload in db.execute("SELECT ts, kind, payload FROM events ORDER BY seq")]
    finally:
        db.close()


PHASE_OF = {"reference": "reference_s", "evaluation": "judging_s", "precompile": "judging_s",
            "proposal": "proposing_s", "proposal_failed": "proposing_s", "proposal_duplicate": "proposing_s"}
"""The phase the time before an event of this kind went to (the judge starting and the reference
measured before ``reference``; an answer awaited before a proposal; a candidate judged before its
``evaluation``)."""


def arm_timing(events: list[tuple[float, str, dict]], started: float, ended: float) -> dict:
    """Where an arm's wall time went: ``startup_s`` (interpreter, imports, the run created),
    ``reference_s``, ``proposing_s``, ``judging_s``, ``other_s`` (the search's own bookkeeping)
    and ``closing_s`` (after the last event: the judge closed, the best file written); each in
    seconds of the wall clock, summing to ``wall_s``."""
    out = dict.fromkeys(("startup_s", "reference_s", "proposing_s", "judging_s", "other_s", "closing_s"), 0.0)
    if not events:
        out["startup_s"] = ended - started
    else:
        out["startup_s"] = max(events[0][0] - started, 0.0)
        for (before, _, _), (ts, kind, _) in zip(events, events[1:]):
            out[PHASE_OF.get(kind, "other_s")] += ts - before
        out["closing_s"] = max(ended - events[-1][0], 0.0)
    out = {k: round(v, 1) for k, v in out.items()}
    out["wall_s"] = round(ended - started, 1)
    out["judged"] = sum(1 for _, kind, _ in events if kind == "evaluation")
    if out["judged"]:
        out["judging_s_per_candidate"] = round(out["judging_s"] / out["judged"], 2)
    return out


def arm_command(case: Case, repairs: int, budget: int, device: str, folder: Path, perf_trials: int,
                time_limit: float) -> list[str]:
    return [sys.executable, "-m", "loopwise", "kernels", "optimize", str(case.problem), "--proposer", "exchange",
            "--exchange-dir", str(folder / "exchange"), "--exchange-timeout", "120", "--repairs", str(repairs),
            "--budget", str(budget), "--per-step", "1", "--profiling", "none", "--device", device,
            "--runs-dir", str(folder / "runs"), "--set", f"kernels.eval.perf_trials={perf_trials}",
            "--set", "kernels.baseline.compile=false",  # the arms compare speedups over eager only
            "--time-limit", f"{time_limit:.0f}", "--json"]


def run_within(cmd: list[str], env: dict, limit_s: float) -> tuple[int, str, str, bool]:
    """Runs ``cmd`` for at most ``limit_s`` seconds: (exit status, stdout, stderr, killed). Past the
    limit it gets SIGTERM (a run stops cleanly and closes its judge), then its whole process group
    SIGKILL ``KILL_GRACE_S`` later, so no sandbox is left holding the GPU."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit_s)
        return proc.returncode, stdout, stderr, False
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        stdout, stderr = proc.communicate(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
    return proc.returncode, stdout, stderr, True


def run_arm(case: Case, repairs: int, budget: int, device: str, work: Path, perf_trials: int,
            limit_s: float) -> dict:
    """One arm, given ``limit_s`` seconds: no step starts in its last ``STEP_RESERVE_S``, and the run
    is stopped at ``limit_s`` (its row then holds what its store recorded, with ``killed`` true)."""
    folder = work / f"{case.name}-repairs{repairs}"
    improve, repair = scripts(case)
    cmd = arm_command(case, repairs, budget, device, folder, perf_trials, max(limit_s - STEP_RESERVE_S, 1.0))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.time()
    with ReplayAgent(folder / "exchange", improve, repair) as agent:
        returncode, stdout, stderr, killed = run_within(cmd, env, limit_s)
    ended = time.time()
    runs = sorted((folder / "runs").glob("*/run.sqlite")) if (folder / "runs").is_dir() else []
    events = _events(runs[-1].parent) if runs else []
    row = {"seconds": round(ended - started, 1), "time_limit_s": round(limit_s, 1), "killed": killed,
           "timing": arm_timing(events, started, ended), "answers_used": dict(agent.used)}
    if killed:
        return row | {"time_limited": True, "evaluations": row["timing"]["judged"],
                      "run_id": runs[-1].parent.name if runs else None}
    if returncode not in (0, 1):  # 1: a run that found no correct candidate
        raise SystemExit(f"{case.name} repairs={repairs}: exit {returncode}\n{stderr[-3000:]}")
    summary = json.loads(stdout)
    judged, fixed = repair_outcomes(folder / "runs" / summary["run_id"])
    proposals = summary["proposals"]
    return row | {
        "evaluations": summary["evaluations"], "correct": summary["evaluations"] - sum(summary["failures"].values()),
        "best_speedup": summary["best_speedup"], "time_limited": bool(summary.get("stopped_by_time_limit")),
        "timing_meaningful": summary["timing_meaningful"], "failures": summary["failures"],
        "repair_requests": proposals["repairs"], "repairs_judged": judged, "repairs_correct": fixed,
        "repair_rate": fixed / proposals["repairs"] if proposals["repairs"] else None,
        "reprompts": proposals["reprompts"], "duplicates": proposals["duplicates"], "run_id": summary["run_id"],
        "candidates": candidate_rows(events)}


def totals(arms: dict) -> dict:
    """Per arm over the problems whose two arms both finished uncut: repair requests, correct
    repairs, the rate, and each best speedup (a cut or killed arm is not compared)."""
    done = {name: problem for name, problem in arms.items()
            if all(arm in problem and not problem[arm]["time_limited"] for arm in ("on", "off"))}
    out = {"problems_compared": sorted(done)}
    for arm in ("on", "off"):
        rows = [problem[arm] for problem in done.values()]
        asked = sum(r["repair_requests"] for r in rows)
        fixed = sum(r["repairs_correct"] for r in rows)
        out[arm] = {"repair_requests": asked, "repairs_correct": fixed, "repair_rate": fixed / asked if asked else None,
                    "best_speedup": {name: problem[arm]["best_speedup"] for name, problem in done.items()},
                    "correct_candidates": sum(r["correct"] for r in rows),
                    "problems_solved": sum(1 for r in rows if r["best_speedup"])}
    return out


def versions() -> dict:
    import torch

    info = {"python": sys.version.split()[0], "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    return info


def arm_limit(left_s: float, arms_left: int) -> float:
    """The seconds the next arm may take: up to twice its even share of what is left (the first arms
    pay one-time costs: caches, the device's ceilings), keeping ``MIN_ARM_S`` for each later arm and
    ``KILL_GRACE_S`` for stopping the last, so the whole stays within ``--budget-s``."""
    left_s -= KILL_GRACE_S
    return min(2 * left_s / arms_left, left_s - MIN_ARM_S * (arms_left - 1))


def progress(t0: float, text: str) -> None:
    """One progress line on stdout: UTC time, seconds since the start, what happened."""
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())} +{time.monotonic() - t0:6.1f}s] {text}", flush=True)


def arm_line(row: dict) -> str:
    t = row["timing"]
    where = ", ".join(f"{k.removesuffix('_s')} {t[k]:.1f}" for k in
                      ("startup_s", "reference_s", "proposing_s", "judging_s", "other_s", "closing_s"))
    if row["killed"]:
        return f"killed at {row['seconds']:.1f} s after {row['evaluations']} judged ({where} s)"
    rate = f"{row['repairs_correct']}/{row['repair_requests']}" if row["repair_requests"] else "none asked"
    cut = ", cut by its time limit" if row["time_limited"] else ""
    return (f"{row['seconds']:.1f} s{cut}: {row['evaluations']} judged, {row['correct']} correct, repairs {rate}, "
            f"best {row['best_speedup'] or 0:.3g}x ({where} s)")


def write(path: Path, result: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("repair_replay.json"))
    parser.add_argument("--smoke", action="store_true", help="one problem, budget 4, on the CPU (Triton interpreted)")
    parser.add_argument("--budget", type=int, default=None,
                        help=f"candidates judged per arm, the same for both (default {BUDGET}; smoke {SMOKE_BUDGET})")
    parser.add_argument("--budget-s", type=float, default=None,
                        help=f"seconds for all arms together (default {BUDGET_S:g}; smoke {SMOKE_BUDGET_S:g})")
    parser.add_argument("--device", default=None, help="auto (default), cuda or cpu (smoke: cpu)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the arms' runs and exchange folders here (default: a temporary folder)")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    cases = CASES[1:] if args.smoke else CASES
    budget = args.budget or (SMOKE_BUDGET if args.smoke else BUDGET)
    budget_s = args.budget_s or (SMOKE_BUDGET_S if args.smoke else BUDGET_S)
    if budget < 1 or not budget_s > 0:
        parser.error("--budget and --budget-s must be above 0")
    device = args.device or ("cpu" if args.smoke else "auto")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    perf_trials = 3 if args.smoke else 100
    result = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "budget": budget, "budget_s": budget_s,
              "device_option": device, "smoke": args.smoke, **versions(), "complete": False, "problems": {}}
    progress(t0, f"{len(cases)} problem(s) x 2 arms, budget {budget} candidates per arm, {budget_s:g} s in all "
                 f"on {result['device']}")
    arms = [(case, arm) for case in cases for arm in ("on", "off")]
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lw-replay-")))
        for index, (case, arm) in enumerate(arms):
            limit = arm_limit(budget_s - (time.monotonic() - t0), len(arms) - index)
            if limit < MIN_ARM_S:
                progress(t0, f"{case.name} repairs {arm}: skipped, {limit:.0f} s left for it")
                continue
            progress(t0, f"{case.name} repairs {arm}: start, {limit:.0f} s for it")
            row = run_arm(case, 1 if arm == "on" else 0, budget, device, work, perf_trials, limit)
            result["problems"].setdefault(case.name, {})[arm] = row
            result["totals"] = totals(result["problems"])
            write(args.out, result)
            progress(t0, f"{case.name} repairs {arm}: {arm_line(row)}")
    result["complete"] = all(len(result["problems"].get(case.name, {})) == 2 for case in cases)
    result["seconds"] = round(time.monotonic() - t0, 1)
    result["totals"] = totals(result["problems"])
    write(args.out, result)
    progress(t0, f"done: {args.out}")
    print(json.dumps(result["totals"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
