"""KernelBench's own harness and loopwise's judge on the same candidates: verdicts, speedups, time.

For each (problem, candidate) pair of ``bench/agreement_set.py`` (12 level-1 problems x correct /
wrong / exploit candidates under ``bench/candidates/``):

(a) KernelBench: ``eval_kernel_against_ref`` (seed 42, 5 correctness trials, 100 timed trials,
    backend "triton", excessive-speedup check on), imported from ``third_party/KernelBench/src``, in
    a fresh subprocess per candidate. It is called twice in that subprocess; the second call finds
    the Triton kernels compiled, so its wall time is KernelBench's time without compilation.
(b) loopwise: ``LocalJudge(...).evaluate`` in this process, one LocalJudge per problem, statistic "mean" like
    KernelBench, energy off; time without compilation = ``eval_s - compile_s``.

Rows are written as they finish to ``$OUT/agreement.csv`` and to a mirror under
``$LOOPWISE_CACHE_DIR/bench/``; a later run skips pairs already done (``--fresh`` redoes them), so
a run stopped by ``--budget-s`` or a time limit resumes where it stopped.

    source bench/remote_prelude.sh && python3 bench/kernelbench_agreement.py --budget-s 480
    python3 bench/kernelbench_agreement.py --problems 19_ReLU,1 --skip-kb
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import agreement_report as report  # noqa: E402
import agreement_set as aset  # noqa: E402

KB_SRC = aset.KERNELBENCH / "src"
MARK = "@@KB_RESULT@@"
# Modules kernelbench's package import needs (kernelbench/__init__ -> utils, eval, timing).
KB_MODULES = ("torch", "numpy", "requests", "pydantic", "tqdm", "dotenv", "openai", "litellm")
# Of those, the ones used only by KernelBench's LLM-query helpers, never by eval_kernel_against_ref.
LLM_CLIENTS = ("dotenv", "openai", "litellm")


# ---------------------------------------------------------------------------------------------
# (a) KernelBench, in a child process


def missing_modules(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def install_llm_client_shims() -> list[str]:
    """Opt-in (--kb-shim-llm-clients): empty stand-ins for missing LLM-client modules only."""
    import types

    def unavailable(*_a, **_k):
        raise RuntimeError("placeholder module installed by kernelbench_agreement.py")

    fills = {"dotenv": {"load_dotenv": lambda *a, **k: False},
             "openai": {"OpenAI": unavailable}, "litellm": {"completion": unavailable}}
    installed = []
    for name in missing_modules(LLM_CLIENTS):
        module = types.ModuleType(name)
        module.__dict__.update(fills[name])
        sys.modules[name] = module
        installed.append(name)
    return installed


def import_kernelbench(shim: bool) -> tuple[object | None, dict]:
    """(eval_kernel_against_ref or None, facts about the import)."""
    facts = {"missing": missing_modules(KB_MODULES), "shims": install_llm_client_shims() if shim else []}
    sys.path.insert(0, str(KB_SRC))
    try:
        from kernelbench import utils  # noqa: F401 - eval imports it inside the call; fail here instead
        from kernelbench.eval import eval_kernel_against_ref
    except ImportError as exc:
        facts["error"] = f"{type(exc).__name__}: {exc}"
        return None, facts
    return eval_kernel_against_ref, facts


def kb_run_summary(result, wall_s: float) -> dict:
    if result is None:  # KernelBench returns None after a compile lock-file error ("please retry")
        return {"outcome": "none", "wall_s": wall_s}
    meta = result.metadata or {}
    error = next((f"{key}: {meta[key]}" for key in ("compilation_error", "runtime_error", "correctness_issue")
                  if key in meta), "")
    return {"outcome": "ok", "compiled": bool(result.compiled), "correct": bool(result.correctness),
            "runtime_ms": result.runtime, "ref_runtime_ms": result.ref_runtime,
            "excessive": bool(meta.get("excessive_speedup")), "error": str(error)[:300], "wall_s": wall_s}


def kb_child(args: argparse.Namespace) -> int:
    evaluate, facts = import_kernelbench(args.kb_shim_llm_clients)
    payload: dict = {"facts": facts}
    if evaluate is None:
        payload["status"] = "import_error"
    elif not args.kb_preflight:
        import torch

        ref_src = Path(args.problem_file).read_text(encoding="utf-8")
        cand_src = Path(args.candidate_file).read_text(encoding="utf-8")
        runs = []
        for _ in range(args.kb_runs):
            t0 = time.perf_counter()
            try:
                result = evaluate(ref_src, cand_src, seed_num=42, num_correct_trials=5, num_perf_trials=100,
                                  measure_performance=True, backend="triton", check_for_excessive_speedup=True,
                                  device=torch.device("cuda:0"))
            except Exception as exc:  # noqa: BLE001 - KernelBench let it escape; that is its verdict
                runs.append({"outcome": "exception", "error": f"{type(exc).__name__}: {exc}"[:300],
                             "wall_s": time.perf_counter() - t0})
                break
            runs.append(kb_run_summary(result, time.perf_counter() - t0))
        payload.update(status="ok", runs=runs)
    else:
        payload["status"] = "ok"
    print(MARK + json.dumps(payload, default=str), flush=True)
    return 0


def kb_command(args: argparse.Namespace, problem: Path | None = None, candidate: Path | None = None) -> list[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one-kb", "--kb-runs", str(args.kb_runs)]
    if problem is None:
        cmd.append("--kb-preflight")
    else:
        cmd += ["--problem-file", str(problem), "--candidate-file", str(candidate)]
    if args.kb_shim_llm_clients:
        cmd.append("--kb-shim-llm-clients")
    return cmd


def call_kb_child(cmd: list[str], timeout_s: float, log_path: Path | None) -> dict:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        text, code = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or "") + (exc.stderr or "") if isinstance(exc.stdout, str) else ""
        if log_path:
            log_path.write_text(text[-20000:])
        return {"status": "timeout", "message": f"no answer within {timeout_s:.0f} s"}
    if log_path:
        log_path.write_text(text[-20000:])
    for line in reversed(text.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = " | ".join(text.strip().splitlines()[-3:])[:400]
    return {"status": "crash", "message": f"exit status {code}: {tail}"}


def kb_unavailable_banner(answer: dict) -> str:
    facts = answer.get("facts", {})
    missing = ", ".join(facts.get("missing", [])) or "none reported"
    return ("\n" + "!" * 100 + "\nKernelBench's harness cannot be imported on this machine: "
            f"{facts.get('error') or answer.get('message')}\n  modules missing here: {missing}\n"
            "  kernelbench/__init__.py imports utils.py, which imports dotenv, openai and litellm at module\n"
            "  level (LLM clients; eval_kernel_against_ref does not call them). Nothing was stubbed.\n"
            "  KernelBench columns are marked 'unavailable'; --kb-shim-llm-clients inserts empty placeholder\n"
            "  modules for those three only, if you decide that is acceptable.\n" + "!" * 100 + "\n")


def kb_fields(answer: dict) -> dict:
    """The CSV fields of one KernelBench answer."""
    return _kb_fields(answer) | {"kb_shims": ",".join(answer.get("facts", {}).get("shims", []))}


def _kb_fields(answer: dict) -> dict:
    if answer.get("status") != "ok":
        return {"kb_status": answer.get("status", "crash"), "kb_note": answer.get("message") or
                answer.get("facts", {}).get("error", "")}
    runs = answer["runs"]
    last, first = runs[-1], runs[0]
    if last.get("outcome") == "exception":
        return {"kb_status": "error", "kb_note": last["error"], "kb_first_s": first["wall_s"]}
    if last.get("outcome") != "ok":
        return {"kb_status": "none", "kb_note": "eval returned None (compile lock-file retry)",
                "kb_first_s": first["wall_s"], "kb_s": last["wall_s"]}
    speedup = (last["ref_runtime_ms"] / last["runtime_ms"]
               if last["correct"] and last["runtime_ms"] > 0 and last["ref_runtime_ms"] > 0 else None)
    def positive(v):  # KernelBench reports -1.0 for "not measured"
        return v if isinstance(v, (int, float)) and v > 0 else None

    return {"kb_status": "ok", "kb_compiled": last["compiled"], "kb_correct": last["correct"],
            "kb_ms": positive(last["runtime_ms"]), "kb_ref_ms": positive(last["ref_runtime_ms"]),
            "kb_speedup": speedup, "kb_excessive": last["excessive"], "kb_first_s": first["wall_s"],
            "kb_s": last["wall_s"], "kb_runs": len(runs),
            "kb_runs_agree": len({r.get("correct") for r in runs}) == 1, "kb_note": last["error"]}


# ---------------------------------------------------------------------------------------------
# (b) loopwise's judge, in this process


def open_judge(problem_path: Path, device: str):
    from loopwise.kernels.config import EvalConfig
    from loopwise.kernels.evaluate.judge import LocalJudge
    from loopwise.kernels.problem import load_problem

    # Timeouts shortened from the defaults (600 s / 180 s) so a hanging candidate cannot eat a device call.
    cfg = EvalConfig(correct_trials=5, perf_trials=100, statistic="mean", energy=False,
                     compile_timeout_s=120, run_timeout_s=60)
    # One pool for the whole run, as a search would keep it: a sandbox is always started ahead.
    if device not in _POOLS:
        from loopwise.kernels.device import resolve_device
        from loopwise.kernels.evaluate.pool import SandboxPool

        settings = {"gpu_memory_fraction": cfg.gpu_memory_fraction, "host_memory_gb": cfg.host_memory_gb}
        _POOLS[device] = SandboxPool(resolve_device(device), settings, spares=2)
    return LocalJudge(load_problem(str(problem_path)), cfg, device=device, pool=_POOLS[device])


_POOLS: dict = {}


def our_fields(judge, source: str, name: str, evals_dir: Path) -> dict:
    ev = judge.evaluate(source, name)
    (evals_dir / f"{name}.json").write_text(ev.model_dump_json(indent=1, exclude={"log"}))
    if ev.log:
        (evals_dir / f"{name}.log").write_text(ev.log[-20000:])
    compile_s = ev.compile_s or 0.0
    return {"our_status": ev.status.value, "our_correct": ev.correct, "our_speedup": ev.speedup,
            "our_ms": ev.timing.mean_ms if ev.timing else None,
            "our_ref_ms": ev.reference_timing.mean_ms if ev.reference_timing else None,
            "our_compile_s": ev.compile_s, "our_eval_s": ev.eval_s,
            "our_s": (ev.eval_s - compile_s) if ev.eval_s is not None else None,
            "our_reasons": ";".join(dict.fromkeys(r.code for r in ev.reasons if r.severity == "reject")),
            "our_flags": ";".join(dict.fromkeys(r.code for r in ev.reasons if r.severity == "flag"))}


# ---------------------------------------------------------------------------------------------
# driver


def select(spec: str, universe: tuple[str, ...]) -> list[str]:
    """Stems named by a comma list of stems or numeric ids (``19_ReLU,1``); all when empty."""
    wanted = [w.strip() for w in spec.split(",") if w.strip()]
    if not wanted:
        return list(universe)
    picked = [s for s in universe if s in wanted or s.split("_")[0] in wanted]
    unknown = [w for w in wanted if not any(w in (s, s.split("_")[0]) for s in universe)]
    if unknown:
        raise SystemExit(f"unknown problem(s): {', '.join(unknown)}; known: {', '.join(universe)}")
    return picked


def needs(row: dict, part: str, skip: bool) -> bool:
    status = row.get(f"{part}_status") or ""
    return not skip and status in ("", "skipped", "unavailable")


class Run:
    """State of one invocation: options, rows, the open judge, the clock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out)
        self.mirror = Path(os.environ.get("LOOPWISE_CACHE_DIR") or aset.REPO / ".loopwise-cache") / "bench"
        for sub in ("logs", "evals"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        self.mirror.mkdir(parents=True, exist_ok=True)
        self.table = report.RowTable([self.out / "agreement.csv", self.mirror / "agreement.csv"],
                                     sizes=args.sizes, fresh=args.fresh)
        self.kb_ok = not args.skip_kb
        self.kb_unavailable: dict = {}
        self.t0 = time.perf_counter()
        self.judge, self.judge_stem = None, None

    def over_budget(self) -> bool:
        return self.args.budget_s > 0 and time.perf_counter() - self.t0 > self.args.budget_s

    def preflight_kb(self) -> None:
        answer = call_kb_child(kb_command(self.args), 300, self.out / "logs" / "kb_preflight.log")
        facts = answer.get("facts", {})
        print(f"KernelBench import: {answer.get('status')}  missing modules: {facts.get('missing')}  "
              f"shims: {facts.get('shims')}", flush=True)
        if answer.get("status") != "ok":
            print(kb_unavailable_banner(answer), flush=True)
            self.kb_ok, self.kb_unavailable = False, answer

    def judge_for(self, stem: str, problem: Path):
        if self.judge_stem != stem:
            self.close_judge()
            self.judge, self.judge_stem = open_judge(problem, self.args.device), stem
        return self.judge

    def close_judge(self) -> None:
        if self.judge is not None:
            self.judge.close()
        self.judge, self.judge_stem = None, None

    def pair(self, stem: str, kind: str, problem: Path) -> bool:
        """Runs what is missing for one pair; False when there was nothing to do."""
        row = self.table.get(stem, kind)
        do_kb = needs(row, "kb", self.args.skip_kb)
        do_ours = needs(row, "our", self.args.skip_ours)
        if not (do_kb or do_ours):
            return False
        cand = aset.candidate_path(stem, kind)
        name = f"{stem}__{kind}"
        t0 = time.perf_counter()
        if do_kb and self.kb_ok:
            answer = call_kb_child(kb_command(self.args, problem, cand), self.args.kb_timeout_s,
                                   self.out / "logs" / f"{name}.kb.log")
            row.update(kb_fields(answer))
        elif do_kb:
            row.update(kb_fields(self.kb_unavailable) | {"kb_status": "unavailable"})
        elif not row.get("kb_status"):
            row["kb_status"] = "skipped"
        if do_ours:
            judge = self.judge_for(stem, problem)
            row.update(our_fields(judge, cand.read_text(encoding="utf-8"), name, self.out / "evals"))
            if kind == "correct":  # again, warm: what each further candidate of a search costs
                again = our_fields(judge, cand.read_text(encoding="utf-8"), name + "__again", self.out / "evals")
                row["our_warm_s"] = again["our_s"]
        elif not row.get("our_status"):
            row["our_status"] = "skipped"
        row.update(report.derived(row))
        self.table.put(stem, kind, row)
        print(report.progress_line(row, time.perf_counter() - t0), flush=True)
        return True


def run(args: argparse.Namespace) -> int:
    stems = select(args.problems, aset.PROBLEMS)
    kinds = select(args.kinds, aset.KINDS)
    state = Run(args)
    print(f"{len(stems)} problems x {len(kinds)} kinds, sizes '{args.sizes}', device {args.device}, "
          f"budget {args.budget_s or 'none'} s, out {state.out}", flush=True)
    if not args.skip_kb:
        state.preflight_kb()
    if not args.skip_ours:
        from loopwise.kernels.evaluate.measure import cache_dir

        shutil.rmtree(cache_dir() / "baselines", ignore_errors=True)  # measure reference times afresh
    done, stopped = 0, ""
    try:
        for stem in stems:
            problem = aset.write_problem(stem, args.sizes, state.mirror / "problems" / args.sizes)
            for kind in kinds:
                if args.limit and done >= args.limit:
                    stopped = f"--limit {args.limit} reached"
                elif state.over_budget():
                    stopped = f"--budget-s {args.budget_s} reached"
                if stopped:
                    break
                done += state.pair(stem, kind, problem)
            if stopped:
                break
    finally:
        state.close_judge()
        for pool in _POOLS.values():
            pool.close()
        state.table.save()  # $OUT starts empty on the device: always leave the full table there
        report.write_markdown(state.out / "agreement.md", state.table.rows(), args, stopped)
    left_kb = sum(needs(state.table.get(s, k), "kb", args.skip_kb) for s in stems for k in kinds)
    left_ours = sum(needs(state.table.get(s, k), "our", args.skip_ours) for s in stems for k in kinds)
    print(f"\n{done} pair(s) run; still to do: KernelBench {left_kb}, loopwise {left_ours}"
          f"{' (' + stopped + '; run again to resume)' if stopped else ''}; "
          f"wrote {state.out / 'agreement.csv'} and agreement.md", flush=True)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="", help="comma-separated stems or ids (default: all 12)")
    p.add_argument("--kinds", default="", help="comma-separated subset of correct,wrong,exploit")
    p.add_argument("--limit", type=int, default=0, help="run at most this many pairs (0: no limit)")
    p.add_argument("--budget-s", type=float, default=480.0,
                   help="start no new pair after this many seconds (0: no budget); default fits a 10-min call")
    p.add_argument("--skip-kb", action="store_true", help="do not run KernelBench's harness")
    p.add_argument("--skip-ours", action="store_true", help="do not run loopwise's judge")
    p.add_argument("--kb-runs", type=int, default=2, help="KernelBench calls per candidate (last = no compile)")
    p.add_argument("--kb-timeout-s", type=float, default=120.0, help="per candidate (both calls)")
    p.add_argument("--kb-shim-llm-clients", action="store_true",
                   help="insert empty dotenv/openai/litellm modules when missing (off: nothing is stubbed)")
    p.add_argument("--sizes", choices=("reduced", "official", "tiny"), default="reduced",
                   help="input sizes (bench/agreement_set.py); tiny is for CPU tests")
    p.add_argument("--device", default="cuda", help="judge device; 'cpu' (with TRITON_INTERPRET=1) for tests")
    p.add_argument("--fresh", action="store_true", help="ignore rows of earlier runs")
    p.add_argument("--out", default=os.environ.get("OUT") or "./bench_out")
    # child-process mode
    p.add_argument("--one-kb", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kb-preflight", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--problem-file", help=argparse.SUPPRESS)
    p.add_argument("--candidate-file", help=argparse.SUPPRESS)
    return p.parse_args(argv)


if __name__ == "__main__":
    _args = parse_args()
    sys.exit(kb_child(_args) if _args.one_kb else run(_args))
