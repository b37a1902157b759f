"""Every engine's runs keep the core run lifecycle from the user's side: an unknown run id, or the id
of a run of another kind, is the same one-line error, and a stopped run is marked ``interrupted``,
says the command that continues it, and exits with 130.

The commands run in this process through the console entry point; the work each would do is
replaced by a Ctrl-C at its first step, so every case is cheap and needs no GPU."""

from __future__ import annotations

import shlex
import shutil
from importlib import resources
from pathlib import Path

import pytest

from loopwise import cli
from loopwise.core.run import create_run, open_run

PROBLEM = Path(str(resources.files("loopwise.kernels") / "examples" / "softmax_problem.py"))


def _main(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """Runs ``loopwise ARGS`` as the console script does; returns its exit status and what it printed."""
    monkeypatch.setattr("sys.argv", ["loopwise", *args])
    monkeypatch.setattr(cli.signal, "signal", lambda *a: None)  # leave pytest's SIGTERM handler alone
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out = capsys.readouterr()
    return ended.value.code, out.out + out.err


def _stop(*args, **kwargs):
    raise KeyboardInterrupt  # Ctrl-C at the run's first step


class _StoppedJudge:
    """A judge that builds nothing and is stopped by Ctrl-C when asked for a verdict."""

    device = device_name = "cpu"

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def native(self, sources: list[str]) -> list[str]:
        return []

    def key(self, source: str) -> str:
        return str(hash(source))

    evaluate = _stop

    def reference_facts(self, compile: bool = False) -> dict:
        from loopwise.kernels.evaluate.reference_facts import unknown

        return unknown(self.device_name, "a stand-in judge measures nothing")

    def close(self) -> None:
        pass


def _onnx_model(tmp_path: Path) -> str:
    """x[1, 16, 32] -> MatMul -> y: one operator."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [32, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8])])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


def _optimize(tmp_path, monkeypatch) -> list[str]:
    from loopwise.kernels.evaluate import workers
    from loopwise.kernels.optimize.loop import OptimizeRun

    monkeypatch.setattr(workers, "make_judge", lambda problem, cfg, dispatcher: _StoppedJudge())
    monkeypatch.setattr(OptimizeRun, "run", _stop)
    return ["kernels", "optimize", str(PROBLEM), "--budget", "1", "--device", "cpu"]


def _bench(tmp_path, monkeypatch) -> list[str]:
    from loopwise.kernels.bench.run import Bench

    level = tmp_path / "kb" / "KernelBench" / "level1"
    level.mkdir(parents=True)
    shutil.copy(PROBLEM, level / "1_softmax.py")
    monkeypatch.setattr(Bench, "run", _stop)
    return ["kernels", "bench", "kernelbench", "--levels", "1", "--budget", "1", "--device", "cpu",
            "--kernelbench", str(tmp_path / "kb")]


def _eval(tmp_path, monkeypatch) -> list[str]:
    from loopwise.kernels.evaluate import judge

    monkeypatch.setattr(judge, "LocalJudge", _StoppedJudge)
    return ["kernels", "eval", str(PROBLEM), str(PROBLEM), "--device", "cpu"]


def _memory(tmp_path, monkeypatch) -> list[str]:
    from loopwise.memory import plan_run

    monkeypatch.setattr(plan_run, "run_plan", _stop)
    return ["memory", "plan", _onnx_model(tmp_path)]


def _training(tmp_path, monkeypatch) -> list[str]:
    from loopwise.training.run import TrainingRun

    monkeypatch.setattr(TrainingRun, "run", _stop)
    return ["training", "search", "arithmetic", "--preset", "smoke", "--device", "cpu"]


STARTS = {"kernels optimize": _optimize, "kernels bench": _bench, "kernels eval": _eval, "memory plan": _memory,
          "training search": _training}

RESUMES = {  # each command with --resume (the words before it), and a run kind it cannot resume
    "kernels optimize": (["kernels", "optimize"], "memory.plan"),
    "kernels bench": (["kernels", "bench", "kernelbench"], "kernels.optimize"),
    "kernels eval": (["kernels", "eval", str(PROBLEM), str(PROBLEM)], "kernels.optimize"),
    "memory plan": (["memory", "plan", "mm.onnx"], "training.search"),
    "training search": (["training", "search", "arithmetic"], "memory.plan"),
}


@pytest.mark.parametrize("command", sorted(STARTS))
def test_a_stopped_run_is_marked_interrupted_and_says_how_to_continue(command, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    args = STARTS[command](tmp_path, monkeypatch)
    code, said = _main(monkeypatch, capsys, *args, "--runs-dir", str(runs))
    assert code == 130, said
    (run_id,) = [p.name for p in runs.iterdir()]
    with open_run(runs, run_id) as store:
        assert [e.kind for e in store.events()][-1] == "interrupted"
    (line,) = [line for line in said.splitlines() if "continue with: " in line]
    assert line.startswith("stopped"), said
    words = shlex.split(line.split("continue with: ", 1)[1])
    assert words[:3] == ["loopwise", *command.split()], line
    assert words[words.index("--resume") + 1] == run_id
    assert Path(words[words.index("--runs-dir") + 1]) == runs.resolve()


@pytest.mark.parametrize("command", sorted(RESUMES))
def test_an_unknown_run_or_one_of_another_kind_is_the_same_one_line_error(command, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    words, other = RESUMES[command]
    code, said = _main(monkeypatch, capsys, *words, "--resume", "nope", "--runs-dir", str(runs))
    assert code == 2 and said.strip().splitlines() == [f"error: no run 'nope' at {runs / 'nope'}"], said
    with create_run(runs, other, "{}") as store:
        run_id = store.meta.run_id
    code, said = _main(monkeypatch, capsys, *words, "--resume", run_id, "--runs-dir", str(runs))
    assert code == 2, said
    (line,) = said.strip().splitlines()
    assert line.startswith(f"error: run {run_id} is a {other} run, not "), said
