"""`loopwise training search / baselines` from the user's side: every method spends the same
stage budget from the same base, a killed run resumes without training a stage twice and ends
where an uninterrupted one does, and mistakes are one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loopwise.core.store import SqliteRunStore
from loopwise.errors import UserError
from loopwise.training import search, session
from loopwise.training.compute import Budget, Compute, stage_compute
from loopwise.training.report_data import stages_text
from loopwise.training.run import Settings, TrainingRun

TINY = session.Preset("smoke", stage_steps=2, prompts_per_step=4, num_generations=4, eval_n=16, pool_n=120,
                     warm_max_steps=40, warm_check_every=20, probe_n=8)


# stages long enough for the tree's signal probes to pay (learning_signal.probe_groups): a first
# step of 16 groups, topped up to a verdict's 29 where a stop is still possible
PROBED = session.Preset("smoke", stage_steps=3, prompts_per_step=16, num_generations=2, eval_n=16, pool_n=120,
                        warm_max_steps=40, warm_check_every=20, probe_n=8)


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(session.PRESETS, "smoke", TINY)


@pytest.fixture
def probed(monkeypatch):
    monkeypatch.setitem(session.PRESETS, "smoke", PROBED)


def _summary(results: dict) -> dict:
    return {m: (r["tune_reward"], r["test_reward"], r["stages_used"], r["configs"]) for m, r in results.items()}


def test_every_method_spends_the_same_sample_budget_from_the_same_base(probed, tmp_path):
    stage = PROBED.stage_steps * PROBED.prompts_per_step * PROBED.num_generations  # a default stage's samples
    budget = 5 * stage + 10
    methods = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
    run = TrainingRun.start(Settings("arithmetic", methods, budget=4, depth=2, difficulty=0, budget_samples=budget),
                            str(tmp_path))
    results = run.run()
    run.close()
    assert set(results) == {"tree", "fixed", "staged", "grid", "random", "tpe", "pbt"}
    assert len({(r["base_tune_reward"], r["base_test_reward"]) for r in results.values()}) == 1
    staged = results["staged"]["configs"]
    assert len(staged) == 2 and staged[0] == staged[1]  # staging alone: the same config, a fresh trainer each stage
    assert len(results["fixed"]["configs"]) == 1 and results["fixed"]["configs"][0]["steps"] == 2 * PROBED.stage_steps
    assert len(results["tree"]["configs"]) <= 2
    for r in results.values():
        assert 0.0 <= r["test_reward"] <= 1.0 and 0.0 <= r["tune_reward"] <= 1.0
        assert r["budget"] == {"unit": "samples", "amount": budget}
    # compute: every stage a method trained and every signal probe that stopped a transition, and
    # the top-up of every probe that admitted one (its first step is its stage's), re-derived from
    # the stage events' configs and traces and the probe events' counts
    store = SqliteRunStore.open(str(tmp_path), run.store.meta.run_id)
    stages = [e.payload for e in store.events(kind="stage")]
    probes = [e.payload for e in store.events(kind="probe")]
    assert probes and {p["method"] for p in probes} == {"tree"}  # the baselines apply no transitions
    for m, r in results.items():
        own = [p for p in stages if p["method"] == m]
        mine = [p for p in probes if p["method"] == m]
        samples = sum(p["config"]["steps"] * p["config"]["prompts_per_step"] * p["config"]["num_generations"]
                      for p in own) + sum(p["samples"] - p["first_samples"] * p["learnable"] for p in mine)
        assert all(p["first_samples"] == p["config"]["prompts_per_step"] * p["config"]["num_generations"]
                   for p in mine)
        tokens = sum(round(row["completions/mean_length"] * p["config"]["prompts_per_step"]
                           * p["config"]["num_generations"]) for p in own for row in p["trace"] if "reward" in row)
        tokens += sum(p["tokens"] - p["first_tokens"] * p["learnable"] for p in mine)
        assert (r["samples"], r["tokens"]) == (samples, tokens), m
        # the share of groups without reward variance: per stage of the pick, and over every stage trained
        assert len(r["zero_variance"]) == len(r["configs"]) and all(0 <= z <= 1 for z in r["zero_variance"]), m
        groups = sum(p["config"]["steps"] * p["config"]["prompts_per_step"] for p in own)
        zero = sum(row["frac_reward_zero_std"] * p["config"]["prompts_per_step"] for p in own for row in p["trace"]
                   if "reward" in row)
        assert r["zero_variance_groups"]["groups"] == groups and r["zero_variance_groups"]["zero"] == round(zero), m
        assert all(p["zero_variance_share"] is not None for p in own), m
        # within the budget, and short of it by less than one of the method's runs (two default stages)
        # and, where a method draws the group size, less than one step of each stage it trained
        slack = sum(p["config"]["prompts_per_step"] * p["config"]["num_generations"] for p in own
                    ) if m in ("random", "tpe", "pbt") else 0
        assert budget - 2 * stage - slack < r["samples"] <= budget, m
    tree = [p for p in stages if p["method"] == "tree"]
    assert len(tree) == results["tree"]["stages_used"] > len(results["tree"]["configs"])  # every node counts
    # the grid's points trained on equal shares: each within a step's samples of the share
    grid = [p["config"] for p in stages if p["method"] == "grid"]
    share = budget // len(grid)
    for c in grid:
        per_step = c["prompts_per_step"] * c["num_generations"]
        assert share - per_step < c["steps"] * per_step <= share


def _step_caps(store, method: str, notes: list[str]) -> int:
    """The most tokens one step of the method could spend: the largest step, at the cap, of the
    stages it trained or (the tree's stop note) would have trained next."""
    import re

    caps = [c["prompts_per_step"] * c["num_generations"] * c["max_completion_length"]
            for c in (e.payload["config"] for e in store.events(kind="stage") if e.payload["method"] == method)]
    for note in notes:
        if (m := re.search(r"a step of (\d+) completions of up to (\d+) tokens", note)):
            caps.append(int(m.group(1)) * int(m.group(2)))
    return max(caps)


TOKEN_RUN = dict(budget=4, depth=2, difficulty=0, budget_tokens=950)  # staged cuts its last stage


@pytest.mark.slow
def test_a_token_budget_is_spent_to_within_one_step_and_never_exceeded(tiny, tmp_path):
    methods = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
    run = TrainingRun.start(Settings("arithmetic", methods, **TOKEN_RUN), str(tmp_path))
    results = run.run()
    store = SqliteRunStore.open(str(tmp_path), run.store.meta.run_id)
    run.close()
    budget = TOKEN_RUN["budget_tokens"]
    for m, r in results.items():
        assert r["budget"] == {"unit": "tokens", "amount": budget}, m
        assert budget - _step_caps(store, m, r["notes"]) < r["tokens"] <= budget and r["samples"] > 0, m
        # the tokens are those generated: the stages' rows, not their configs' caps
        own = [e.payload for e in store.events(kind="stage") if e.payload["method"] == m]
        assert all(p["config"]["steps"] == sum("reward" in row for row in p["trace"]) for p in own), m
        # what ran, as the stage events have it: samples and tokens (and the tree's signal probes'),
        # stages (a run of the run-based methods standing for `depth` of them), and those an
        # allowance stopped short of, or ran past, the steps they were planned with
        spent = sum((stage_compute(p["trace"], p["config"]) for p in own), Compute())
        spent += sum((Compute(p["samples"] - p["first_samples"] * p["learnable"],
                              p["tokens"] - p["first_tokens"] * p["learnable"])
                      for e in store.events(kind="probe") if (p := e.payload)["method"] == m), Compute())
        assert (r["samples"], r["tokens"]) == (spent.samples, spent.tokens), m
        planned = [(p.get("planned_steps", p["config"]["steps"]), p["config"]["steps"]) for p in own]
        assert r["trained"] == {"stages": len(own), "steps": sum(ran for _, ran in planned),
                                "cut": sum(ran < plan for plan, ran in planned),
                                "longer": sum(ran > plan for plan, ran in planned)}, m
        if m != "grid":  # the grid counts its points' steps in default stages
            assert r["stages_used"] == len(own) * (1 if m in ("tree", "staged", "pbt") else TOKEN_RUN["depth"]), m
    staged = results["staged"]
    assert staged["trained"]["cut"] == 1 and staged["trained"]["longer"] == 0
    assert stages_text(staged["stages_used"], staged["trained"]) == f"{staged['stages_used'] - 1} + 1 cut"


@pytest.mark.slow
def test_at_the_smoke_preset_every_method_spends_4000_tokens_to_within_one_of_its_steps(tmp_path):
    methods = ("tree", "fixed", "staged", "grid", "random", "tpe", "pbt")
    run = TrainingRun.start(Settings("arithmetic", methods, budget_tokens=4000), str(tmp_path))
    results = run.run()
    store = SqliteRunStore.open(str(tmp_path), run.store.meta.run_id)
    run.close()
    for m, r in results.items():
        assert 4000 - _step_caps(store, m, r["notes"]) < r["tokens"] <= 4000, m


def _cut_in_staged(method: str, result, seen: list) -> bool:
    """staged's stage that the allowance cut short (its last repetition's)."""
    return method == "staged" and result.config.steps < TINY.stage_steps


def _third_of_pbt(method: str, result, seen: list) -> bool:
    """pbt's third stage: its first round done, its runs each trained to a share of the budget."""
    return seen.count("pbt") == 3


@pytest.mark.parametrize("kill_at", [_cut_in_staged, pytest.param(_third_of_pbt, marks=pytest.mark.slow)])
def test_a_killed_token_run_resumes_to_the_same_rows(tiny, tmp_path, kill_at):
    settings = Settings("arithmetic", ("tree", "staged", "random", "pbt"), **TOKEN_RUN)
    straight = TrainingRun.start(settings, str(tmp_path / "a"))
    expected = straight.run()
    straight_id = straight.store.meta.run_id
    straight.close()

    seen = []

    def kill_when(method, result):
        seen.append(method)
        return kill_at(method, result, seen)

    results, run_id = _killed_then_resumed(settings, tmp_path / "b", kill_when)
    for m in settings.methods:
        same = ("configs", "tune_reward", "test_reward", "samples", "tokens", "stages_used", "notes", "traces")
        assert {k: results[m][k] for k in same} == {k: expected[m][k] for k in same}, m
    # the stages trained again on the resume are not recorded twice (the report's spend reads them)
    assert _stage_keys(tmp_path / "b", run_id) == _stage_keys(tmp_path / "a", straight_id)


class _Killed(Exception):
    """Stops a run from its stage callback, as a crash would."""


def _killed_then_resumed(settings, runs_dir, kill_when, on_resume=None):
    """A run of ``settings`` stopped after the stage where ``kill_when(method, result)`` first says
    so, then resumed to its end (``on_resume`` its stage callback): its results and run id."""

    def kill(method, done, result):
        if kill_when(method, result):
            raise _Killed

    first = TrainingRun.start(settings, str(runs_dir))
    with pytest.raises(_Killed):
        first.run(on_stage=kill)
    run_id = first.store.meta.run_id
    first.close()
    resumed = TrainingRun.resume(str(runs_dir), run_id)
    results = resumed.run(on_stage=on_resume)
    resumed.close()
    return results, run_id


def _stage_keys(runs_dir, run_id) -> list[str]:
    store = SqliteRunStore.open(str(runs_dir), run_id)
    keys = sorted(e.payload["key"] for e in store.events(kind="stage"))
    store.close()
    return keys


def test_a_killed_run_resumes_without_training_a_stage_twice(tiny, tmp_path):
    settings = Settings("arithmetic", ("tree", "staged"), budget=4, depth=2, difficulty=0)
    straight = TrainingRun.start(settings, str(tmp_path / "a"))
    once = []
    expected = _summary(straight.run(on_stage=lambda m, d, r: once.append(m)))
    straight.close()

    trained, again = [], []

    def kill_after_three(method, result):
        trained.append(method)
        return len(trained) == 3

    results, _ = _killed_then_resumed(settings, tmp_path / "b", kill_after_three,
                                      on_resume=lambda m, d, r: again.append(m))
    assert _summary(results) == expected
    assert len(trained) + len(again) == len(once)  # none trained twice


@pytest.mark.parametrize("reference", ["initial", "stage"])
def test_the_kl_reference_is_the_base_policy_or_the_stages_start(tiny, reference):
    """A second stage after a drifting first one: anchored at the base it starts far from its
    reference; anchored at its own start it starts at it."""
    s = session.Session("arithmetic", "smoke", difficulty=0, kl_reference=reference)
    s.prepare()
    drift = s.default_config().model_copy(update={"learning_rate": 3e-3, "steps": 4})
    first = s.run_stage(s.base_state, drift, seed=1)
    second = s.run_stage(first.state, drift.model_copy(update={"learning_rate": 1e-7}), seed=2)
    kl = [row["kl"] for row in second.trace if "kl" in row]
    assert second.config.kl_reference == reference and len(kl) == 4
    assert (min(kl) > 1e-3) if reference == "initial" else (max(kl) < 1e-4)
    with pytest.raises(UserError, match="unknown KL reference 'parent'"):
        session.Session("arithmetic", "smoke", kl_reference="parent")


def test_mistakes_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="unknown method"):
        Settings("arithmetic", ("tree", "hyperband"))
    with pytest.raises(UserError, match="at least the depth"):
        Settings("arithmetic", budget=2, depth=3)
    with pytest.raises(UserError, match="not both"):
        Settings("arithmetic", budget_samples=100, budget_tokens=100)
    with pytest.raises(UserError, match="below the schedule depth"):
        search.run_method("staged", session.Session("arithmetic", "smoke"), Budget("samples", 10), depth=1)
    with pytest.raises(UserError, match="unknown task 'chess'"):
        TrainingRun.start(Settings("chess"), str(tmp_path))
    with pytest.raises(UserError, match="unknown preset"):
        TrainingRun.start(Settings("arithmetic", preset="huge"), str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "chess", "--runs-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().startswith("error: unknown task 'chess'")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_smoke_preset_runs_from_the_command_line(tmp_path):
    """What CI runs: the real smoke preset, the tree search against staging alone, as JSON."""
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "baselines", "arithmetic", "--methods",
                           "tree,staged", "--budget-stages", "2", "--depth", "1", "--difficulty", "0", "--json",
                           "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert set(out["results"]) == {"tree", "staged"} and out["settings"]["preset"] == "smoke"
    smoke = session.PRESETS["smoke"]
    budget = 2 * smoke.stage_steps * smoke.prompts_per_step * smoke.num_generations  # 2 default stages, in samples
    assert all(r["budget"] == {"unit": "samples", "amount": budget} for r in out["results"].values())
    assert all(0 < r["samples"] <= budget for r in out["results"].values())
    assert out["results"]["staged"]["stages_used"] == 2
    assert 0 < out["warm_start"]["steps"] <= session.PRESETS["smoke"].warm_max_steps


def test_a_smoke_search_diagnoses_its_nodes_and_says_why_each_stage_of_its_pick(tmp_path):
    """The real smoke preset, as the user runs it: stages long enough that every node's diagnosis is
    recorded (findings, or an explicit "no finding"), nodes below the first level expanded from it,
    the settings naming the difficulty trained at, each stage of the pick saying why it was
    proposed, and the knob directions, from the default config, of the pick and of every node's
    path counted (re-derived here from the stage events)."""
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "arithmetic", "--preset", "smoke",
                           "--json", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["settings"]["difficulty"] == 1 and out["settings"]["kl_reference"] == "initial"
    stages = [e.payload for e in SqliteRunStore.open(str(tmp_path), out["run_id"]).events(kind="stage")]
    judged = {p["node"]: p for p in stages if p["diagnosis_status"] in ("findings", "no finding")}
    assert len(judged) == len(stages) >= 3
    assert all((p["diagnosis_status"] == "findings") == bool(p["diagnosis"]) for p in stages)
    # every finding asks for moves, but the one that says the probe cannot tell a stall from slow learning
    assert all(f["moves"] or f["kind"] == "progress_undecided" for p in stages for f in p["diagnosis"])
    assert all(isinstance(f["evidence"], dict) for p in stages for f in p["diagnosis"])  # the numbers behind each
    assert any(p["parent"] in judged for p in stages)  # expanded from a diagnosed node
    tree = out["results"]["tree"]
    assert len(tree["reasons"]) == len(tree["configs"]) and all(tree["reasons"])
    default = next(p["config"] for p in stages if p["parent"] == 0 and p["by"] == "default")
    nodes = {p["node"]: p for p in stages}

    def path(n: int) -> list[dict]:
        return path(nodes[n]["parent"]) + [nodes[n]["config"]] if n else [default]

    def changes(configs: list[dict], knob: str) -> list[bool]:  # True: up
        return [b[knob] > a[knob] for a, b in zip(configs, configs[1:]) if b[knob] != a[knob]]

    def kind(ups: list[bool]) -> str:
        return ("constant" if not ups else "oscillating" if len(set(ups)) == 2
                else "monotone_up" if ups[0] else "monotone_down")

    knobs = tree["directions"]
    assert len(knobs) == 9 and knobs == {k: kind(changes([default] + tree["configs"], k)) for k in knobs}
    counted, paths = tree["path_directions"], [path(n) for n in nodes]
    assert counted["paths"] == len(paths) == tree["stages_used"]
    assert counted["long_enough"] == sum(len(p) >= 3 for p in paths)
    for knob in knobs:
        kinds = [kind(changes(p, knob)) for p in paths]
        assert counted["knobs"][knob] == {c: kinds.count(c) for c in ("monotone_up", "monotone_down", "oscillating",
                                                                      "constant")} | {
            "moved_twice": sum(len(changes(p, knob)) >= 2 for p in paths)}, knob


@pytest.mark.slow  # a comparison run twice, once on two workers: about 20 s
def test_methods_on_two_workers_give_the_results_of_one_process(tmp_path):
    """--workers cpu,cpu trains the methods at once in two worker processes, from the same base;
    on the CPU (deterministic) every method ends exactly where the in-process run ends."""
    def go(*extra):
        done = subprocess.run([sys.executable, "-m", "loopwise", "training", "baselines", "arithmetic", "--methods",
                               "tree,staged", "--budget-stages", "2", "--depth", "1", "--difficulty", "0", "--json",
                               "--device", "cpu", "--runs-dir", str(tmp_path), *extra],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    here, there = go(), go("--workers", "cpu,cpu")
    assert _summary(there["results"]) == _summary(here["results"])
    assert {r["worker"] for r in there["results"].values()} == {"worker-0:cpu", "worker-1:cpu"}


def test_the_table_shows_each_methods_compute(capsys, monkeypatch):
    from types import SimpleNamespace

    from loopwise.training.cli import _table

    monkeypatch.setenv("COLUMNS", "220")
    config = {"steps": 3, "learning_rate": 1e-4, "beta": 0.0, "temperature": 1.0, "difficulty": None,
              "max_completion_length": 6, "num_generations": 4, "entropy_coef": 0.0, "epsilon_high": 0.28}
    common = {"base_tune_reward": 0.2, "base_test_reward": 0.25, "tune_reward": 0.3, "test_reward": 0.3,
              "stages_used": 2, "seconds": 1.0, "directions": {}}
    results = {"tree": {**common, "configs": [config, {**config, "num_generations": 8}], "samples": 12345,
                        "tokens": 67890, "zero_variance": [0.25, 1.0],
                        "zero_variance_groups": {"zero": 100, "groups": 400, "share": 0.25},
                        "notes": ["node 1: not applied (difficulty 1 -> 3): 8 of 8 probe groups (100%) had no "
                                  "reward variance (mean reward 0.000)",
                                  "node 2: cut after 3 of 8 steps (the budget)"]},
               "staged": {**common, "configs": [config, config]}}  # a result without compute
    run = SimpleNamespace(session=SimpleNamespace(warm={"steps": 10, "pass_rate": 0.3}),
                          settings=SimpleNamespace(task="custom"))
    _table(run, results)
    out = capsys.readouterr().out
    assert "samples" in out and "tokens" in out and "None" not in out
    tree = next(line for line in out.splitlines() if "│ tree" in line)
    staged = next(line for line in out.splitlines() if "│ staged" in line)
    assert "12,345" in tree and "67,890" in tree and "num_generations 4->8" in tree
    assert [c.strip() for c in staged.split("│")][2:5] == ["2", "-", "-"]
    said = " ".join(out.split())
    assert "tree: 25% of its 400 groups had no reward variance (its pick's stages: 25%, 100%)" in said
    assert "1 guard note(s): node 1: not applied" in said and "staged: " not in said
    assert "; node 2: cut after 3 of 8 steps (the budget)" in said  # where a token budget cut it


def test_the_table_says_the_directions_of_the_pick_and_of_every_tree_path(capsys, monkeypatch):
    from types import SimpleNamespace

    from loopwise.training.cli import _table
    from loopwise.training.config import CAPACITY, REGULARIZATION, StageConfig
    from loopwise.training.transitions import path_directions

    monkeypatch.setenv("COLUMNS", "220")
    start = StageConfig(learning_rate=1e-4)
    up = start.model_copy(update={"learning_rate": 2e-4})
    paths = [[start, start], [start, up], [start, up, start]]
    config = up.model_dump()
    common = {"base_tune_reward": 0.2, "base_test_reward": 0.25, "tune_reward": 0.3, "test_reward": 0.3,
              "stages_used": 3, "seconds": 1.0, "configs": [config]}
    constant = dict.fromkeys(CAPACITY + REGULARIZATION, "constant")
    results = {"tree": {**common, "directions": constant | {"learning_rate": "monotone_up"},
                        "path_directions": path_directions(paths)},
               "fixed": {**common, "directions": constant}}
    _table(SimpleNamespace(session=SimpleNamespace(warm={}), settings=SimpleNamespace(task="custom")), results)
    said = " ".join(capsys.readouterr().out.split())
    assert "tree: knob directions from the default config along its pick (1 stage): learning_rate monotone_up" in said
    assert "fixed: knob directions from the default config along its pick (1 stage): all constant" in said
    assert ("tree: knob directions over its 3 root-to-node paths (1 move: 2, 2 moves: 1; 1 of the 3 paths have the "
            "two or more moves a reversal needs): learning_rate up 1, down 0, oscillating 1 (changed twice on 1), "
            "constant 1; constant on every path: ") in said


def test_every_preset_runs_stages_long_enough_to_diagnose():
    from loopwise.training.trace_stats import MIN_STEPS

    assert all(p.stage_steps >= MIN_STEPS for p in session.PRESETS.values())


@pytest.mark.slow
def test_seeds_run_whole_comparisons_and_report_paired_differences(tmp_path):
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "baselines", "arithmetic", "--methods",
                           "tree,staged", "--budget-stages", "1", "--depth", "1", "--difficulty", "0", "--seeds", "2",
                           "--json", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert [r["settings"]["seed"] for r in out["runs"]] == [0, 1]
    stats = {s["method"]: s for s in out["statistics"]}
    assert set(stats) == {"tree", "staged"} and stats["tree"]["versus_tree"] is None
    tests = [r["results"]["staged"]["test_reward"] for r in out["runs"]]
    assert stats["staged"]["test"]["mean"] == pytest.approx(sum(tests) / 2) and stats["staged"]["test"]["n"] == 2
    diffs = [r["results"]["tree"]["test_reward"] - r["results"]["staged"]["test_reward"] for r in out["runs"]]
    assert stats["staged"]["versus_tree"]["mean"] == pytest.approx(sum(diffs) / 2)
    assert stats["staged"]["verdict"] in ("higher", "lower", "no difference")
    for m in ("tree", "staged"):  # the share of groups without reward variance, pooled over the seeds
        tallies = [r["results"][m]["zero_variance_groups"] for r in out["runs"]]
        assert stats[m]["zero_variance"] == pytest.approx(sum(t["zero"] for t in tallies)
                                                          / sum(t["groups"] for t in tallies))


def test_a_stage_record_stores_overflowed_metrics_as_missing():
    from loopwise.core.store import finite

    trace = [{"step": 1, "loss": float("nan"), "kl": float("inf"), "reward": 0.5}, {"nested": [1.0, float("-inf")]}]
    assert finite(trace) == [{"step": 1, "loss": None, "kl": None, "reward": 0.5}, {"nested": [1.0, None]}]



def test_the_exchange_wait_is_set_from_the_command_line_and_kept_on_resume(tmp_path):
    """--exchange-timeout works for training as for kernels: checked as given, recorded with the
    run, and a resumed run waits as long."""
    bad = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "arithmetic", "--proposer",
                          "exchange", "--exchange-dir", str(tmp_path / "x"), "--exchange-timeout", "0",
                          "--runs-dir", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == ("error: --exchange-timeout 0: expected a positive "
                                                          "number of seconds"), bad.stderr[-2000:]
    settings = Settings("arithmetic", proposer="exchange", exchange_dir=str(tmp_path / "x"), exchange_timeout=7.5)
    assert Settings.from_dict(settings.to_dict()).exchange_timeout == 7.5  # what a resumed run reads back
    older = {k: v for k, v in settings.to_dict().items() if k != "exchange_timeout"}  # recorded before the option
    assert Settings.from_dict(older).exchange_timeout == 3600.0


@pytest.mark.slow  # a warm start and two smoke stages from the command line: about 30 s on a loaded 2-core CPU
def test_an_exchange_step_without_answers_times_out_and_the_summary_counts_it(tmp_path):
    """No agent answers: each step waits --exchange-timeout, the rules fill in, and the JSON summary
    counts the failed proposals by reason and the fallbacks, as the kernels summary does."""
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "arithmetic", "--proposer",
                           "exchange", "--exchange-dir", str(tmp_path / "x"), "--exchange-timeout", "0.2",
                           "--budget-stages", "2", "--depth", "1", "--difficulty", "0", "--device", "cpu",
                           "--runs-dir", str(tmp_path / "runs"), "--json"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    proposals = json.loads(done.stdout)["proposals"]
    failed = proposals["failed"]
    assert set(failed) == {"timeout"} and failed["timeout"] >= 1, proposals
    assert proposals["answered"] == 0 and proposals["reprompts"] == 0
    assert proposals["from_rules"] == failed["timeout"] and proposals["fallbacks"] >= 1
    assert proposals["first_failure"]["timeout"].startswith("no answer within 0.2 s")
