"""`loopwise report RUN`: one self-contained HTML file, rendered in a real headless browser."""

import shutil
import subprocess

import pytest

from loopwise.core.store import SqliteRunStore
from loopwise.kernels.report.eval_html import build_eval_report
from loopwise.kernels.report.optimize_html import build_report

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def _evaluation(status, speedup, candidate):
    return {"status": status, "speedup": speedup, "candidate": candidate, "device": "NVIDIA H200", "policy": "fp32",
            "tolerance": "strict", "problem": "level1/19_ReLU", "timing": {"median_ms": 0.07} if speedup else None,
            "reasons": [] if status == "correct" else [{"severity": "reject", "code": "wrong_output",
                                                        "message": "3 of 9 elements differ", "evidence": {}}]}


@pytest.fixture()
def run(tmp_path):
    store = SqliteRunStore.create(tmp_path / "runs", "kernels.optimize", "kernels: {}\n")
    store.append("settings", {"problem": "kernelbench:1/19", "proposer": "expert", "search": "mcts", "budget": 3,
                              "objective": "speed", "seed": 0})
    sources = ["def forward(x):\n    return x.relu()\n", "def forward(x):\n    return x.clamp_min(0)\n",
               "def forward(x):\n    return x * 2  # <script>alert(1)</script>\n"]
    for i, (src, status, speedup) in enumerate(zip(sources, ["correct", "correct", "wrong_output"], [1.2, 1.5, None]),
                                                start=1):
        sha = store.put_artifact(src, name=f"c{i}.py")
        store.append("proposal", {"parent": 0 if i == 1 else 1, "key": f"k{i}", "note": f"move {i}",
                                  "source_sha256": sha})
        store.append("evaluation", {"node": i, "evaluation": _evaluation(status, speedup, f"node-{i}")}, key=f"k{i}")
    yield store
    store.close()


def test_report_is_one_self_contained_file(run):
    path = build_report(run)
    html = path.read_text()
    assert path.name == "report.html" and "<script src=" not in html  # nothing fetched when opened
    assert "Best speedup over evaluations" in html and "Search tree" in html
    assert "move 2" in html and "wrong_output" in html and "3 of 9 elements differ" in html
    assert "+    return x.clamp_min(0)" in html  # the diff against the parent
    assert "<script>alert(1)</script>" not in html  # candidate code is escaped


def test_speedups_timed_on_the_cpu_are_marked_and_a_banner_says_why(run, tmp_path):
    assert "not meaningful" not in build_report(run).read_text()  # timed on a GPU: no banner
    store = SqliteRunStore.create(tmp_path / "cpu-runs", "kernels.eval", "kernels: {}\n")
    with store:
        sha = store.put_artifact("def forward(x):\n    return x.relu()\n", name="c.py")
        store.append("evaluation", {"evaluation": {**_evaluation("correct", 1.2, "c.py"), "device": "cpu"},
                                    "source_sha256": sha}, key="k")
        html = build_eval_report(store).read_text()
    assert "timed on the CPU with Triton&#39;s interpreter: speedups are not meaningful" in html
    assert "1.2x†" in html
    search = SqliteRunStore.create(tmp_path / "cpu-search", "kernels.optimize", "kernels: {}\n")
    with search:
        sha = search.put_artifact("def forward(x):\n    return x.relu()\n", name="c1.py")
        search.append("proposal", {"parent": 0, "key": "k1", "note": "move 1", "source_sha256": sha})
        search.append("evaluation", {"node": 1, "evaluation": {**_evaluation("correct", 1.3, "c1.py"),
                                                               "device": "cpu"}}, key="k1")
        html = build_report(search).read_text()
    assert "timed on the CPU with Triton&#39;s interpreter: speedups are not meaningful" in html
    assert "1.3x†" in html


@pytest.mark.skipif(BROWSER is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_report_renders_in_headless_chromium_without_console_errors(run, tmp_path):
    path = build_report(run)
    out = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                          "--disable-background-networking", "--disable-component-update", "--disable-sync",
                          f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
                          "--virtual-time-budget=5000", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    dom = out.stdout
    assert "plot-container" in dom, out.stderr[-2000:]  # plotly drew both figures offline
    assert dom.count("plot-container") >= 2
    console = [line for line in out.stderr.splitlines() if "CONSOLE" in line.upper() or "Uncaught" in line]
    assert not console, console


def _page_text(html: str) -> str:
    """The page without its scripts (the inlined plotly library has words of its own)."""
    import re

    return re.sub(r"<script.*?</script>", "", html, flags=re.S)


@pytest.mark.slow
def test_an_eval_run_reports_its_candidates_side_by_side_without_a_search_tree(tmp_path, cli_env):
    """`kernels eval` judges unrelated candidates: its report is a table of them with their verdicts
    and sources, with no parent, diff or tree; an optimize run's report keeps those."""
    import json
    import sys
    from pathlib import Path

    examples = Path(__file__).parents[3] / "loopwise" / "kernels" / "examples"
    runs = tmp_path / "runs"
    judged = subprocess.run([sys.executable, "-m", "loopwise", "kernels", "eval",
                             str(examples / "scaled_gelu_problem.py"), str(examples / "scaled_gelu_triton.py"),
                             str(examples / "scaled_gelu_cheat.py"), "--device", "cpu", "--runs-dir", str(runs),
                             "--set", "kernels.eval.perf_trials=3", "--json"],
                            capture_output=True, text=True, env=cli_env, timeout=600)
    statuses = [e["status"] for e in json.loads(judged.stdout)]
    assert statuses[0] == "correct" and statuses[1] != "correct", judged.stderr[-2000:]
    (run_id,) = [p.name for p in runs.iterdir()]
    out = subprocess.run([sys.executable, "-m", "loopwise", "report", run_id, "--runs-dir", str(runs), "--json"],
                         capture_output=True, text=True, env=cli_env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    page = _page_text(Path(json.loads(out.stdout)["report"]).read_text())
    for gone in ("parent", "diff against", "Search tree", "node", "best so far"):
        assert gone not in page.lower() if gone.islower() else gone not in page, gone
    for name, status in zip(("scaled_gelu_triton.py", "scaled_gelu_cheat.py"), statuses):
        assert name in page and status in page
    assert "fp32" in page and "strict" in page and "def forward" in page


def test_an_optimize_run_reports_parents_and_diffs(run):
    page = _page_text(build_report(run).read_text())
    assert "parent" in page and "diff against its parent" in page
