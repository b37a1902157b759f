"""`loopwise mcp` as a coding agent meets it: the SDK's own client over stdio, against the server
started as `python -m loopwise mcp` (the real protocol, the real process)."""

import json
import sys
from pathlib import Path

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = Path(__file__).parents[1]
KERNELS = Path(__file__).parent / "kernels"
CASES = KERNELS / "judge_cases"
TOOLS = {"eval", "check", "profile", "tools", "codesearch", "read_source", "optimize_status"}
# The settings tests/kernels/evaluate/test_judge.py judges plain-PyTorch candidates on the CPU with (a longer
# timeout: a busy machine must not turn a slow trial into a failure).
CPU_JUDGE = {"static_check": False, "require_custom_kernel": False, "perf_trials": 5, "warmup": 1,
             "run_timeout_s": 60, "compile_timeout_s": 60, "host_memory_gb": 3, "seed": 7, "energy": False}


def serve(tmp_path, work, runs_dir=None, argv=None, env=None):
    """Starts the server, runs ``await work(session)`` on an initialized session, returns its result."""
    runs = runs_dir or tmp_path / "runs"
    args = argv or ["-m", "loopwise", "mcp", "--runs-dir", str(runs)]
    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(ROOT),
                                   env={"LOOPWISE_CACHE_DIR": str(tmp_path / "cache"), "TMPDIR": str(tmp_path),
                                        **(env or {})})

    async def main(errlog):
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await work(session)

    with open(tmp_path / "server.stderr", "w") as errlog:
        return anyio.run(main, errlog)


def call(tmp_path, name, arguments=None, **kw):
    async def work(session):
        return await session.call_tool(name, arguments or {})

    return serve(tmp_path, work, **kw)


def error_line(result) -> str:
    assert result.is_error, result
    (block,) = result.content
    assert "\n" not in block.text and "Traceback" not in block.text
    return block.text


def test_lists_every_tool_with_a_description_and_an_input_schema(tmp_path):
    async def work(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in serve(tmp_path, work)}
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert len(tool.description) > 40, tool.name
        assert tool.input_schema["type"] == "object"
    assert set(tools["eval"].input_schema["required"]) == {"problem", "candidate_source"}
    assert tools["eval"].input_schema["properties"]["device"]["enum"] == ["auto", "cuda", "cpu"]
    assert tools["read_source"].input_schema["required"] == ["path", "start_line", "end_line"]
    assert tools["check"].annotations.read_only_hint is True


def test_check_rejects_plain_pytorch_and_passes_an_honest_triton_kernel(tmp_path):
    async def work(session):
        cheat = await session.call_tool("check", {"candidate_source": (CASES / "ok_torch.py").read_text()})
        honest = await session.call_tool("check", {"candidate_source":
                                                   (KERNELS / "candidates" / "triton_relu.py").read_text()})
        return cheat, honest

    cheat, honest = serve(tmp_path, work)
    assert not cheat.is_error and cheat.structured_content["rejected"] is True
    assert "no_custom_kernel" in [r["code"] for r in cheat.structured_content["reasons"]]
    assert cheat.content[0].text.startswith("rejected: no_custom_kernel")
    assert json.loads(cheat.content[1].text) == cheat.structured_content
    assert honest.structured_content["rejected"] is False and honest.structured_content["backends"] == ["triton"]


@pytest.mark.slow
def test_eval_judges_a_candidate_on_the_cpu_while_the_server_keeps_answering(tmp_path):
    done = []

    async def work(session):
        async def judge():
            done.append("eval")
            results["eval"] = await session.call_tool("eval", {
                "problem": str(CASES / "problem_matmul_relu.py"), "candidate_source": (CASES / "ok_torch.py").read_text(),
                "device": "cpu", "config": CPU_JUDGE})
            done.append("eval done")

        async def quick():
            await anyio.sleep(0.5)  # the eval has started: it takes seconds
            results["check"] = await session.call_tool("check", {"candidate_source": "class ModelNew: pass"})
            done.append("check done")

        results = {}
        async with anyio.create_task_group() as group:
            group.start_soon(judge)
            group.start_soon(quick)
        return results

    results = serve(tmp_path, work)
    assert done == ["eval", "check done", "eval done"]  # a judgement runs off the protocol's event loop
    result = results["eval"]
    assert not result.is_error, result.content
    verdict = result.structured_content
    assert verdict["status"] == "correct" and verdict["correct"] is True, verdict["reasons"]
    assert verdict["speedup"] > 0 and verdict["timing"]["trials"] == 5 and verdict["reference_timing"]
    assert result.content[0].text.startswith("correct")
    run_dir = tmp_path / "runs" / verdict["run_id"]
    assert (run_dir / "run.sqlite").is_file() and Path(verdict["run_dir"]) == run_dir


def test_mistakes_are_one_line_error_results_and_the_server_keeps_serving(tmp_path):
    problem = str(CASES / "problem_matmul_relu.py")
    source = (CASES / "ok_torch.py").read_text()

    async def work(session):
        missing = await session.call_tool("eval", {"problem": str(tmp_path / "nope.py"), "candidate_source": source})
        setting = await session.call_tool("eval", {"problem": problem, "candidate_source": source,
                                                   "config": {"perf_trails": 3}})
        run = await session.call_tool("optimize_status", {"run_id": "no-such-run"})
        still = await session.call_tool("check", {"candidate_source": source})
        return missing, setting, run, still

    missing, setting, run, still = serve(tmp_path, work)
    assert "nope.py" in error_line(missing)
    assert "perf_trails" in error_line(setting)
    assert "no-such-run" in error_line(run)
    assert not still.is_error


@pytest.fixture(scope="module")
def optimize_runs(tmp_path_factory):
    """A runs folder holding an optimize run that ended (3 verdicts: 2.0x, a crash, 4.0x), a later one
    stopped before judging anything, and an eval run. The runs are written by the real OptimizeRun;
    only the judge is a stand-in, so the store holds exactly what `kernels optimize` writes."""
    from loopwise.config import load_config
    from loopwise.core.store import SqliteRunStore
    from loopwise.kernels.evaluate.result import Evaluation, Reason, Status
    from loopwise.kernels.optimize import OptimizeRun, Settings
    from loopwise.kernels.problem import load_problem

    class StandInJudge:
        """The whole judge interface; the verdicts are made up."""

        device = device_name = "cpu"

        def __init__(self):
            self.judged = 0

        def evaluate(self, source, name):
            self.judged += 1
            if self.judged == 2:
                return Evaluation(status=Status.CRASH, problem="chain", candidate=name, candidate_key="k2",
                                  reasons=[Reason(code="runtime_error", message="boom")])
            return Evaluation(status=Status.CORRECT, problem="chain", candidate=name,
                              candidate_key=f"k{self.judged}", speedup={1: 2.0, 3: 4.0}[self.judged])

        def evaluate_many(self, items):
            return [self.evaluate(source, name) for source, name in items]

        def precompile(self, sources):
            return 0  # nothing to build: the verdicts are made up

        def reference_facts(self, compile=False):
            from loopwise.kernels.evaluate.reference_facts import unknown

            return unknown(self.device_name, "a stand-in judge measures nothing")

        def close(self):
            pass

    runs = tmp_path_factory.mktemp("optimize") / "runs"
    spec = str(KERNELS / "expert_problems" / "chain.py")
    problem, cfg = load_problem(spec), load_config(None, [])
    ended = OptimizeRun.start(Settings(problem=spec, budget=3), cfg, str(runs), StandInJudge(), problem)
    ended.run()
    ended.write_best()
    ended.store.close()
    stopped = OptimizeRun.start(Settings(problem=spec, budget=5), cfg, str(runs), StandInJudge(), problem)
    stopped.store.close()
    SqliteRunStore.create(runs, "kernels.eval", "{}").close()
    return runs, ended.store.meta.run_id, stopped.store.meta.run_id


def test_optimize_status_lists_runs_latest_first_and_reports_one_run(tmp_path, optimize_runs):
    runs, ended_id, stopped_id = optimize_runs
    eval_id = next(p.name for p in runs.iterdir() if p.name not in (ended_id, stopped_id))

    async def work(session):
        return [await session.call_tool("optimize_status", args) for args in
                ({}, {"run_id": ended_id}, {"run_id": eval_id})]

    listing, one, not_optimize = serve(tmp_path, work, runs_dir=runs)
    assert [r["run_id"] for r in listing.structured_content["runs"]] == [stopped_id, ended_id]
    stopped, ended = listing.structured_content["runs"]
    assert stopped["evaluations"] == 0 and stopped["complete"] is False and stopped["best_speedup"] is None
    assert ended["evaluations"] == 3 and ended["best_speedup"] == 4.0 and ended["failures"] == {"crash": 1}
    assert ended["problem"].endswith("chain.py") and ended["verdicts"] == []
    run = one.structured_content
    assert run["complete"] is True and Path(run["best_path"]).is_file() and run["best_node"] is not None
    assert [v["status"] for v in run["verdicts"]] == ["correct", "crash", "correct"]
    assert run["verdicts"][1]["reason"] == "runtime_error: boom"
    assert "4.000x" in one.content[0].text
    assert "kernels.eval" in error_line(not_optimize)


def test_tools_lists_the_registered_micro_profiling_tools(tmp_path):
    from loopwise.kernels.profile.registry import load_tools

    result = call(tmp_path, "tools")
    rows = result.structured_content["tools"]
    assert [r["name"] for r in rows] == [t.name for t in load_tools()]
    assert all(r["needs"] and r["summary"] for r in rows)
    assert any(r["runs_for"] for r in rows)


def test_profile_without_a_gpu_is_an_error_result(tmp_path):
    import torch

    problem = str(CASES / "problem_matmul_relu.py")
    devices = ["cpu"] if torch.cuda.is_available() else ["cpu", "auto"]

    async def work(session):
        return [await session.call_tool("profile", {"problem": problem, "device": d}) for d in devices]

    for result in serve(tmp_path, work):
        assert "needs a CUDA GPU" in error_line(result)


def test_codesearch_that_cannot_be_imported_is_an_error_result(tmp_path):
    # sys.modules[name] = None makes every import of the module fail, as in a loopwise without it
    argv = ["-c", ("import sys; sys.modules['loopwise.kernels.codesearch'] = None; sys.argv = ['loopwise', 'mcp'];"
                   " from loopwise.cli import main; main()")]

    async def work(session):
        return [await session.call_tool("codesearch", {"query": "matmul"}),
                await session.call_tool("read_source", {"path": "loopwise/cli.py", "start_line": 1, "end_line": 3})]

    for result in serve(tmp_path, work, argv=argv):
        assert "code search is not available" in error_line(result)


COPY_HPP = """namespace cute {
// Builds a TiledCopy from a copy atom and a thread layout.
template <class CopyAtom, class ThrLayout>
auto make_tiled_copy(CopyAtom const& atom, ThrLayout const& thr) {
  return TiledCopy<CopyAtom, ThrLayout>{atom, thr};
}
}  // namespace cute
"""
MMA_HPP = """namespace cute {
struct TiledMma {
  int k_tile;
};
}  // namespace cute
"""


def test_codesearch_finds_code_and_read_source_returns_its_lines(tmp_path):
    root = tmp_path / "cutlass"  # a tiny checkout: the index builds in a blink
    (root / "include" / "cute").mkdir(parents=True)
    (root / "examples").mkdir()
    (root / "include" / "cute" / "copy.hpp").write_text(COPY_HPP)
    (root / "include" / "cute" / "mma.hpp").write_text(MMA_HPP)

    async def work(session):
        found = await session.call_tool("codesearch", {"query": "make_tiled_copy", "limit": 3})
        hit = found.structured_content["hits"][0]
        lines = await session.call_tool("read_source", {"path": hit["path"], "start_line": hit["start_line"],
                                                        "end_line": hit["end_line"]})
        outside = await session.call_tool("read_source", {"path": "../../etc/passwd", "start_line": 1, "end_line": 2})
        return found, lines, outside

    found, lines, outside = serve(tmp_path, work, env={"LOOPWISE_CUTLASS_ROOT": str(root)})
    assert not found.is_error, found.content
    hit = found.structured_content["hits"][0]
    assert hit["path"] == "include/cute/copy.hpp" and "make_tiled_copy" in hit["symbols"]
    text = lines.structured_content["text"]
    assert not lines.is_error and lines.content[1].text == text and "make_tiled_copy" in text
    assert lines.structured_content["end_line"] - hit["start_line"] + 1 == len(text.split("\n"))
    assert "outside" in error_line(outside)
