"""The training search's HTML report from synthetic run-store events (no training): a finished run,
an unfinished one, a baselines-only one and a sparse one all render a self-contained page that
names the methods, their test rewards, the tree's size and the knobs, and ``loopwise report``
writes it for a training run."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

get_plotlyjs = pytest.importorskip("plotly.offline").get_plotlyjs

from loopwise.core.store import SqliteRunStore
from loopwise.training.config import StageConfig
from loopwise.training.report_data import KNOBS, stages_text
from loopwise.training.report_html import build_report

BASE_TUNE, BASE_TEST = 0.25, 0.5
DEFAULT = {"max_completion_length": 6, "num_generations": 4, "prompts_per_step": 4, "steps": 3, "difficulty": 1}


def _cfg(**change) -> dict:
    return StageConfig(**(DEFAULT | change)).model_dump()


def _trace(steps: int, reward: float, tune: float) -> list[dict]:
    rows = [{"step": i, "reward": reward + 0.01 * i, "entropy": 1.0 - 0.1 * i, "frac_reward_zero_std": 0.5,
             "completions/clipped_ratio": 0.0, "clip_ratio/region_mean": 0.01} for i in range(1, steps + 1)]
    rows[0]["kl"] = 0.002  # a metric some steps lack
    return rows + [{"step": steps, "eval/reward": tune, "eval/train_reward": tune + 0.05}]


def _new(tmp_path, methods: list[str]) -> SqliteRunStore:
    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("settings", {"task": "arithmetic", "methods": methods, "budget": 6, "depth": 2, "preset": "smoke",
                              "seed": 0, "difficulty": 1})
    sha = store.put_artifact(b"weights", name="base.pt", media_type="application/octet-stream")
    store.append("base", {"state": sha, "tune": BASE_TUNE,
                          "warm": {"steps": 50, "pass_rate": 0.3, "in_target": True, "history": [[25, 0.1], [50, 0.3]]}},
                 key="base")
    return store


def _stage(store, config: dict, tune: float, **where) -> dict:
    trace = _trace(config["steps"], tune - 0.1, tune)
    store.append("stage", {"key": f"k{where}", "config": config, "trace": trace, "tune": tune, "train": tune + 0.05,
                           "seconds": 0.1, "state": "0" * 64, **where}, key=f"k{where}")
    return {"config": config, "trace": trace, "tune": tune}


def _result(store, method: str, path: list[dict], test: float, used: int, directions: dict | None = None) -> None:
    store.append("result", {"method": method, "configs": [p["config"] for p in path], "tune_reward": path[-1]["tune"],
                            "test_reward": test, "base_tune_reward": BASE_TUNE, "base_test_reward": BASE_TEST,
                            "stages_used": used, "seconds": 1.0, "directions": directions or {},
                            "traces": [p["trace"] for p in path]}, key=method)


def _tree(store, n_nodes: int = 5) -> list[dict]:
    """Nodes 1, 2 from the base; 3, 4 from 1; 5 from 4 (depth 3). Returns the best path 1 -> 4 -> 5."""
    finding = [{"kind": "entropy_collapse", "guidance": "Entropy fell to 0.1.", "score": 0.8},
               {"kind": "reward_plateau", "guidance": "Flat.", "score": 0.2}]
    spec = [(1, 0, 1, {}, 0.4), (2, 0, 1, {"learning_rate": 6e-4}, 0.3), (3, 1, 2, {"beta": 0.04}, 0.35),
            (4, 1, 2, {"difficulty": 2, "temperature": 0.8}, 0.55), (5, 4, 3, {"difficulty": 2, "num_generations": 8}, 0.6)]
    out = {}
    for node, parent, depth, change, tune in spec[:n_nodes]:
        extra = {"diagnosis": finding} if node == 4 else {}  # only some events carry a diagnosis
        out[node] = _stage(store, _cfg(**change), tune, method="tree", node=node, parent=parent, depth=depth, **extra)
    return [out[n] for n in (1, 4, 5) if n in out]


def _baselines(store, methods=("staged", "grid")) -> None:
    if "staged" in methods:
        path = [_stage(store, _cfg(), t, method="staged", rep=0, stage=i) for i, t in enumerate((0.3, 0.45))]
        _result(store, "staged", path, 0.5625, 4, {k: "constant" for k in KNOBS})
    for m, test in (("fixed", 0.53), ("grid", 0.4312), ("random", 0.47)):
        if m in methods:
            runs = [_stage(store, _cfg(steps=6, learning_rate=lr), tune, method=m, rep=i, stage=0)
                    for i, (lr, tune) in enumerate(((1e-4, 0.33), (1e-3, 0.42)))]
            _result(store, m, runs[1:], test, 4)


def _html(store) -> str:
    path = build_report(store)
    assert path == store.run_dir / "report.html" and path.is_file()
    html = path.read_text(encoding="utf-8")
    # self-contained: plotly.js inlined, and outside it (its own code links to plotly.com for the
    # logo) nothing is loaded from elsewhere when the page opens
    assert get_plotlyjs() in html and "Plotly.newPlot" in html
    page = html.replace(get_plotlyjs(), "")
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?(?:https?:)?//""", page, re.IGNORECASE)
    return html


def _figures(html: str) -> list[str]:
    return re.findall(r"<h2>([^<]*)</h2>\s*<div id=\"fig\d+\"", html)


def test_finished_run_with_tree_staged_and_grid(tmp_path):
    store = _new(tmp_path, ["tree", "staged", "grid"])
    best = _tree(store)
    _result(store, "tree", best, 0.625, 5, {"difficulty": "monotone_up", "learning_rate": "constant"})
    _baselines(store, ("staged", "grid"))
    html = _html(store)
    for method in ("tree", "staged", "grid"):
        assert f"<td>{method}</td>" in html
    for test in ("0.625", "0.562", "0.431"):
        assert f"<td>{test}</td>" in html
    assert "<td>+0.125 (+25.0%)</td>" in html  # tree vs the base's test reward
    assert "<td>+0.194 (+44.9%)</td>" in html  # tree vs grid
    assert "Stage tree: 5 nodes + the base" in html and "Tree nodes (5)" in html
    # each node's share of groups without reward variance, from its trace (these events do not carry it)
    assert "groups without reward variance" in html and html.count("<td>50%</td>") == 5
    for knob in KNOBS:
        assert knob in html
    assert "entropy_collapse: Entropy fell to 0.1." in html  # the top finding, not the lower-scored one
    assert "reward_plateau" not in html
    assert "learning_rate 0.0003→0.0006" in html  # node 2's change, vs the default config
    assert "difficulty 1→2→2" in html  # the best tree schedule's summary
    assert "↑ monotone_up" in html
    figures = _figures(html)
    assert len(figures) == 6, figures  # headline, rewards, tree, knobs, metrics, warm start
    assert "Other metrics per step of the best tree schedule, by stage" in figures


def test_directions_are_counted_over_every_tree_path_from_the_default_config(tmp_path):
    """Node 5's path (default, node 1, node 4, node 5) lowers the temperature and raises it back:
    the one of the five paths long enough to show it, among the three of two or more moves."""
    store = _new(tmp_path, ["tree"])
    _tree(store)
    html = _html(store)
    assert "Knob directions over the tree&#39;s 5 root-to-node paths" in html
    assert ("1 move: 2, 2 moves: 2, 3 moves: 1; 3 of the 5 paths have the two or more moves a reversal needs"
            in html)
    # knob, monotone_up, monotone_down, oscillating, constant, changed twice or more
    assert "<td>temperature</td><td>0</td><td>1</td><td>1</td><td>3</td><td>1</td>" in html
    assert "<td>difficulty</td><td>2</td><td>0</td><td>0</td><td>3</td><td>0</td>" in html


@pytest.mark.parametrize("used, trained, text", [
    (8, None, "8"),
    (8, {"stages": 2, "cut": 0, "longer": 0, "steps": 96}, "8"),
    (7, {"stages": 7, "cut": 1, "longer": 0, "steps": 75}, "6 + 1 cut"),
    (8, {"stages": 2, "cut": 1, "longer": 1, "steps": 101}, "8 (2 runs: 1 cut short, 1 longer than planned)"),
    (8, {"stages": 8, "cut": 3, "longer": 5, "steps": 190}, "8 (3 cut short, 5 longer than planned)"),
    (None, None, "-"),
])
def test_stages_are_reported_as_they_ran(used, trained, text):
    assert stages_text(used, trained) == text


def test_an_unfinished_method_counts_the_stages_its_events_say_were_cut(tmp_path):
    store = _new(tmp_path, ["staged"])
    _stage(store, _cfg(), 0.3, method="staged", rep=0, stage=0)
    _stage(store, _cfg(steps=1), 0.3, method="staged", rep=0, stage=1, planned_steps=3)
    assert re.search(r"<td>staged</td><td>unfinished</td><td>1 \+ 1 cut</td>", _html(store))


def test_unfinished_run_with_two_tree_stages_and_no_results(tmp_path):
    store = _new(tmp_path, ["tree", "fixed"])
    _tree(store, n_nodes=2)
    html = _html(store)
    assert "Stage tree: 2 nodes + the base" in html
    assert "unfinished: no method has a result yet" in html
    # compute from the stage events: 2 stages of 3 steps x 4 prompts x 4 completions, no token counts
    assert re.search(r"<td>tree</td><td>unfinished</td><td>2</td><td>96</td><td>0</td><td>0.400</td><td>-</td>", html)
    assert re.search(r"<td>fixed</td><td>not started</td><td>0</td><td>0</td><td>0</td><td>-</td><td>-</td>", html)
    assert "none yet" in html  # no directions before a result


def test_baselines_only(tmp_path):
    store = _new(tmp_path, ["fixed", "staged", "grid", "random"])
    _baselines(store, ("fixed", "staged", "grid", "random"))
    html = _html(store)
    assert "Stage tree" not in html and "Tree nodes" not in html
    for method, test in (("fixed", "0.530"), ("staged", "0.562"), ("grid", "0.431"), ("random", "0.470")):
        assert re.search(rf"<td>{method}</td><td>done</td><td>4</td><td>[0-9,]+</td><td>[0-9,]+</td><td>[0-9.]+</td>"
                         rf"<td>{test}</td>", html)
    assert "Other metrics per step of the best staged schedule, by stage" in html  # best tune among baselines
    assert "= constant" in html


def test_sparse_events_do_not_crash(tmp_path):
    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("stage", {"key": "a", "method": "tree", "node": 1})
    store.append("stage", {"key": "b", "method": "tree", "node": 2, "parent": 7, "tune": 0.0, "trace": [{"step": 1}]})
    store.append("result", {"method": "tree"}, key="tree")
    store.append("stage", {"key": "c", "method": "grid"})
    html = _html(store)
    assert "Stage tree: 2 nodes + the base" in html and "<td>grid</td>" in html


def test_malformed_values_do_not_crash(tmp_path):
    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("settings", {"methods": "tree"})
    store.append("base", {"warm": [1, 2], "tune": "high"})
    store.append("stage", {"method": "tree", "node": 1, "parent": [0], "config": [1], "trace": [1, {"step": "x"}],
                           "diagnosis": [{"score": "high"}, "plain text"]})
    store.append("stage", {"method": "tree", "node": "2", "parent": 1})
    store.append("stage", {"method": "staged", "rep": [0], "stage": None, "config": {"beta": 0.1}, "tune": 0.2})
    store.append("result", {"method": "staged", "configs": [None, {"beta": 0.1}], "traces": "x",
                            "directions": {"beta": ["up"]}, "test_reward": "0.3"}, key="staged")
    html = _html(store)
    assert "Stage tree: 1 node + the base" in html and "<td>staged</td><td>done</td>" in html


@pytest.mark.parametrize("as_json", [False, True])
def test_loopwise_report_writes_the_training_report(tmp_path, as_json):
    store = _new(tmp_path, ["tree"])
    _result(store, "tree", _tree(store), 0.625, 5)
    run_id, report = store.meta.run_id, store.run_dir / "report.html"
    store.close()
    cmd = [sys.executable, "-m", "loopwise", "report", run_id, "--runs-dir", str(tmp_path)] + (["--json"] * as_json)
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert str(report) in done.stdout and report.is_file()
    html = report.read_text(encoding="utf-8")
    # the training report, not the kernels'
    assert "Methods at an equal compute budget" in html and "<td>0.625</td>" in html


def test_compute_per_method_and_a_task_without_difficulty(tmp_path):
    """Samples and tokens: a result's own counts, else its stage events' (counted from their
    configs and mean lengths); a difficulty nobody set shows as "-", never "None"."""
    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("settings", {"task": "custom", "methods": ["tree", "staged"], "budget": 2, "depth": 1,
                              "preset": "smoke", "seed": 0, "difficulty": None})
    config = {**_cfg(), "difficulty": None}
    trace = [{"step": 1, "reward": 0.5, "completions/mean_length": 2.5, "completions/samples": 16,
              "completions/tokens": 40}, {"step": 2, "reward": 0.5, "completions/mean_length": 3.0},
             {"step": 2, "eval/reward": 0.4}]
    store.append("stage", {"key": "a", "method": "tree", "node": 1, "parent": 0, "depth": 1, "config": config,
                           "trace": trace, "tune": 0.4})
    store.append("stage", {"key": "b", "method": "staged", "rep": 0, "stage": 0, "config": config, "trace": trace,
                           "tune": 0.3})
    store.append("result", {"method": "tree", "configs": [config], "traces": [trace], "tune_reward": 0.4,
                            "test_reward": 0.5, "stages_used": 1, "samples": 1234, "tokens": 56789}, key="tree")
    store.append("result", {"method": "staged", "configs": [config], "traces": [trace], "tune_reward": 0.3,
                            "test_reward": 0.4, "stages_used": 1}, key="staged")
    html = _html(store)
    assert "None" not in html.replace(get_plotlyjs(), "")
    assert "<td>0 / -</td>" in html
    assert re.search(r"<td>tree</td><td>done</td><td>1</td><td>1,234</td><td>56,789</td>", html)
    assert re.search(r"<td>staged</td><td>done</td><td>1</td><td>32</td><td>88</td>", html)  # 16 + 40, 16 x 3.0


def test_the_report_states_each_methods_budget_in_samples(tmp_path):
    store = SqliteRunStore.create(tmp_path, "training.search", "{}")
    store.append("settings", {"task": "arithmetic", "methods": ["tree"], "budget": 6, "depth": 2, "preset": "smoke",
                              "seed": 0, "difficulty": 1, "budget_samples": 500})
    best = _tree(store, n_nodes=2)
    store.append("result", {"method": "tree", "configs": [p["config"] for p in best], "tune_reward": 0.4,
                            "test_reward": 0.5, "stages_used": 2, "samples": 96, "tokens": 300,
                            "budget": {"unit": "samples", "amount": 500}, "traces": [p["trace"] for p in best]},
                 key="tree")
    html = _html(store)
    assert "500 samples per method" in html and "budget 6 stages" not in html
    assert "equal compute budget" in html


def test_an_unfinished_default_budget_is_the_default_stages_in_samples(tmp_path):
    store = _new(tmp_path, ["tree"])
    html = _html(store)
    assert "6 default stages&#39; samples per method" in html


def test_the_tree_says_why_each_stage_of_its_pick_and_which_nodes_were_healthy(tmp_path):
    """The pick's stages carry the transition's reason, and a node judged healthy says "no
    finding" rather than nothing."""
    store = _new(tmp_path, ["tree"])
    best = _tree(store, n_nodes=5)
    store.append("stage", {"key": "k6", "config": _cfg(beta=0.01), "trace": _trace(3, 0.2, 0.3), "tune": 0.3,
                           "train": 0.3, "seconds": 0.1, "state": "0" * 64, "method": "tree", "node": 6, "parent": 2,
                           "depth": 2, "diagnosis": [], "diagnosis_status": "no finding"})
    reasons = ["the default config", "Answers too_easy: difficulty 1 -> 2.", "Continues unchanged: nothing found."]
    store.append("result", {"method": "tree", "configs": [p["config"] for p in best], "tune_reward": 0.6,
                            "test_reward": 0.55, "base_tune_reward": BASE_TUNE, "base_test_reward": BASE_TEST,
                            "stages_used": 6, "seconds": 1.0, "directions": {"difficulty": "monotone_up"},
                            "reasons": reasons, "traces": [p["trace"] for p in best]}, key="tree")
    html = _html(store)
    assert all(f"<td>{r}</td>" in html for r in ("the default config", "Answers too_easy: difficulty 1 -&gt; 2."))
    assert re.search(r"<td>6</td><td>2</td><td>2</td>.*?<td>no finding</td>", html)
    assert "from the default config, then its stages in order" in html


def test_pbt_lineages_are_counted_in_a_section_of_their_own(tmp_path):
    """PBT's result carries its lineages' directions (as `path_directions`): the report shows them
    under their own heading, apart from the tree's paths."""
    from loopwise.training.transitions import path_directions

    store = _new(tmp_path, ["pbt"])
    a, b, c = (StageConfig(**DEFAULT), StageConfig(**(DEFAULT | {"temperature": 1.2})),
               StageConfig(**(DEFAULT | {"temperature": 0.96})))
    stage = _stage(store, _cfg(temperature=0.96), 0.4, rep=0, stage=1)
    _result(store, "pbt", [stage], 0.45, 4)
    counts = path_directions([[a, b, c], [a, b]])
    store.append("result", {**next(e.payload for e in store.events(kind="result")), "path_directions": counts},
                 key="pbt")
    html = _html(store)
    assert "Knob directions over PBT&#39;s 2 lineages of weights" in html
    assert "1 move: 1, 2 moves: 1; 1 of the 2 paths have the two or more moves a reversal needs" in html
    assert "<td>temperature</td><td>1</td><td>0</td><td>1</td><td>0</td><td>1</td>" in html
