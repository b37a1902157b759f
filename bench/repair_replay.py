"""Repair on vs off at the same budget, with a scripted model that replays recorded answers.

For each problem, ``loopwise kernels optimize`` runs twice through the exchange folder (``--repairs
1`` and ``--repairs 0``), same budget, same seed. The scripted agent answers improve requests with
the typical mistakes first, in this order: a typo (``tl.arang``), a wrong index (each element reads
its neighbour), no code block, a duplicate of an earlier answer, a plain ``tl.dot`` under the fp32
policy; then correct files (the honest candidate at other block sizes). It answers every repair
request (a prompt with "## The candidate that failed") with a correct file. The JSON written says
per arm and problem: candidates judged and correct, failures by status, repair requests and how
many of them gave a correct candidate (the repair rate), and the best speedup.

    python bench/repair_replay.py --out repair_replay.json                 # on CUDA: 2 problems
    TRITON_INTERPRET=1 python bench/repair_replay.py --smoke --out s.json  # CPU: 1 problem, tiny budget
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
    with the next improve answer (the last one again once a script is spent)."""

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


def run_arm(case: Case, repairs: int, budget: int, device: str, work: Path, perf_trials: int) -> dict:
    folder = work / f"{case.name}-repairs{repairs}"
    improve, repair = scripts(case)
    cmd = [sys.executable, "-m", "loopwise", "kernels", "optimize", str(case.problem), "--proposer", "exchange",
           "--exchange-dir", str(folder / "exchange"), "--exchange-timeout", "120", "--repairs", str(repairs),
           "--budget", str(budget), "--per-step", "1", "--profiling", "none", "--device", device,
           "--runs-dir", str(folder / "runs"), "--set", f"kernels.eval.perf_trials={perf_trials}", "--json"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    start = time.monotonic()
    with ReplayAgent(folder / "exchange", improve, repair) as agent:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode not in (0, 1):  # 1: a run that found no correct candidate
        raise SystemExit(f"{case.name} repairs={repairs}: exit {out.returncode}\n{out.stderr[-3000:]}")
    summary = json.loads(out.stdout)
    judged, fixed = repair_outcomes(folder / "runs" / summary["run_id"])
    proposals = summary["proposals"]
    return {"evaluations": summary["evaluations"], "correct": summary["evaluations"] - sum(summary["failures"].values()),
            "best_speedup": summary["best_speedup"],
            "timing_meaningful": summary["timing_meaningful"], "failures": summary["failures"],
            "repair_requests": proposals["repairs"], "repairs_judged": judged, "repairs_correct": fixed,
            "repair_rate": fixed / proposals["repairs"] if proposals["repairs"] else None,
            "reprompts": proposals["reprompts"], "duplicates": proposals["duplicates"],
            "answers_used": dict(agent.used), "seconds": round(time.monotonic() - start, 1),
            "run_id": summary["run_id"]}


def totals(arms: dict) -> dict:
    """Per arm over the problems: repair requests, correct repairs, the rate, and each best speedup."""
    out = {}
    for arm in ("on", "off"):
        rows = [problem[arm] for problem in arms.values()]
        asked = sum(r["repair_requests"] for r in rows)
        fixed = sum(r["repairs_correct"] for r in rows)
        out[arm] = {"repair_requests": asked, "repairs_correct": fixed, "repair_rate": fixed / asked if asked else None,
                    "best_speedup": {name: problem[arm]["best_speedup"] for name, problem in arms.items()},
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("repair_replay.json"))
    parser.add_argument("--smoke", action="store_true", help="one problem, budget 4, on the CPU (Triton interpreted)")
    parser.add_argument("--budget", type=int, default=None, help="candidates judged per arm (default 8; smoke 4)")
    parser.add_argument("--device", default=None, help="auto (default), cuda or cpu (smoke: cpu)")
    args = parser.parse_args(argv)
    cases = CASES[1:] if args.smoke else CASES
    budget = args.budget or (4 if args.smoke else 8)
    device = args.device or ("cpu" if args.smoke else "auto")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    perf_trials = 3 if args.smoke else 100
    with tempfile.TemporaryDirectory(prefix="lw-replay-") as work:
        arms = {case.name: {"on": run_arm(case, 1, budget, device, Path(work), perf_trials),
                            "off": run_arm(case, 0, budget, device, Path(work), perf_trials)} for case in cases}
    result = {"command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()), "budget": budget, "device_option": device,
              "smoke": args.smoke, **versions(), "totals": totals(arms), "problems": arms}
    args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
    print(json.dumps(result["totals"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
