"""The command line as a user meets it: one-line errors, --json everywhere, resume."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = Path(__file__).parent / "kernels" / "judge_cases"
EXAMPLES = Path(__file__).parents[1] / "loopwise" / "kernels" / "examples"


def run(*args, cwd=None, env_extra=None):
    env = dict(os.environ, COLUMNS="200", TRITON_INTERPRET="1", **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "loopwise", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=300)


def test_help_is_fast_and_lists_commands():
    out = run("--help")
    assert out.returncode == 0
    assert "kernels" in out.stdout and "demo" in out.stdout


def _commands(cmd, path=()):
    if hasattr(cmd, "commands"):  # a group (typer's click may be its own copy: no isinstance)
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield list(path), cmd


def test_every_help_text_is_shown_whole():
    """Rich reads ``[word]`` in a help text as markup and drops it ('loopwise[ray]' came out as
    'loopwise'): every option's and argument's help must appear in ``--help`` as written."""
    import re

    import typer
    from typer.testing import CliRunner

    from loopwise.cli import app

    runner, checked, missing = CliRunner(), 0, []
    for path, cmd in _commands(typer.main.get_command(app)):
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "1000", "TERMINAL_WIDTH": "1000"}).output
        flat = " ".join(re.sub(r"[│╭╮╰╯─]", " ", shown).split())
        for param in cmd.params:
            if getattr(param, "help", None):
                checked += 1
                want = " ".join(param.help.replace("\\[", "[").split())
                if want not in flat:
                    missing.append(f"{' '.join(path)} --{param.name}: {want}")
    assert checked > 100 and not missing, "\n".join(missing)


def test_malformed_problem_is_one_line_not_a_traceback(tmp_path):
    bad = tmp_path / "bad_problem.py"
    bad.write_text("import torch\ndef get_inputs(:\n")
    out = run("kernels", "eval", str(bad), str(CASES / "ok_torch.py"), "--device", "cpu")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "syntax" in lines[0].lower()


def test_missing_candidate_and_bad_override_are_one_line(tmp_path):
    out = run("kernels", "eval", str(CASES / "problem_matmul_relu.py"), str(tmp_path / "nope.py"))
    assert out.returncode == 2 and "not found" in out.stderr and "Traceback" not in out.stderr
    out = run("kernels", "eval", str(CASES / "problem_matmul_relu.py"), str(CASES / "ok_torch.py"),
              "--set", "kernels.eval.perf_trials=lots")
    assert out.returncode == 2 and "perf_trials" in out.stderr and "Traceback" not in out.stderr


def test_a_mistyped_command_is_a_usage_error_not_an_internal_one():
    out = run("kernels", "evaluate")
    assert out.returncode == 2
    assert "No such command 'evaluate'" in out.stderr and "internal error" not in out.stderr


def test_unknown_kernelbench_checkout_says_how_to_give_one(tmp_path):
    out = run("kernels", "eval", "kernelbench:1/19", str(CASES / "ok_torch.py"), cwd=tmp_path,
              env_extra={"LOOPWISE_KERNELBENCH": ""})
    assert out.returncode == 2
    assert "--kernelbench" in out.stderr


def test_check_exit_status_and_json():
    cheat, honest = EXAMPLES / "scaled_gelu_cheat.py", EXAMPLES / "scaled_gelu_triton.py"
    out = run("kernels", "check", str(cheat), str(honest), "--json")
    assert out.returncode == 1
    data = json.loads(out.stdout)
    assert [d["rejected"] for d in data] == [True, False]
    assert any(r["code"] == "thread_injection" for r in data[0]["reasons"])
    assert run("kernels", "check", str(honest)).returncode == 0


@pytest.mark.slow
def test_eval_json_records_the_run_and_resume_skips_judged_candidates(tmp_path):
    args = ["kernels", "eval", str(EXAMPLES / "scaled_gelu_problem.py"), str(EXAMPLES / "scaled_gelu_triton.py"),
            str(EXAMPLES / "scaled_gelu_wrong.py"), "--device", "cpu", "--json",
            "--runs-dir", str(tmp_path / "runs"), "--set", "kernels.eval.perf_trials=3",
            "--set", "kernels.eval.seed=5"]
    out = run(*args, env_extra={"LOOPWISE_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 1, out.stderr  # one candidate is wrong
    data = json.loads(out.stdout)
    assert [d["status"] for d in data] == ["correct", "wrong_output"]
    assert data[0]["correct"] is True and data[0]["speedup"] > 0
    assert data[0]["policy"] == "fp32" and data[0]["tolerance"] == "strict"
    run_id = next(line.split()[1] for line in out.stderr.splitlines() if line.startswith("run "))
    listed = json.loads(run("runs", "list", "--runs-dir", str(tmp_path / "runs"), "--json").stdout)
    assert [r["run_id"] for r in listed] == [run_id]
    again = run(*args, "--resume", run_id, env_extra={"LOOPWISE_CACHE_DIR": str(tmp_path / "cache")})
    assert json.loads(again.stdout) == data  # read back from the store, not re-judged
    shown = json.loads(run("runs", "show", run_id, "--runs-dir", str(tmp_path / "runs"), "--json",
                           "--kind", "evaluation").stdout)
    assert len(shown) == 2


def test_importing_the_cli_loads_no_heavy_library():
    code = ("import sys, loopwise.cli; heavy = [m for m in ('torch', 'triton', 'plotly', 'openai', 'anthropic') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


FIXTURES = Path(__file__).parent / "kernels" / "profile_fixtures"


def test_tools_lists_every_registered_tool():
    out = run("kernels", "tools", "--json")
    assert out.returncode == 0, out.stderr
    names = {t["name"] for t in json.loads(out.stdout)}
    assert {"register_spills", "narrow_accesses", "tensor_cores_unused", "stall_reasons"} <= names
    assert len(names) >= 14


def test_sass_profiles_a_cubin_and_ranks_findings():
    out = run("kernels", "sass", str(FIXTURES / "matmul_spill.cubin"), "--matmul", "--json")
    assert out.returncode == 0, out.stderr
    (item,) = json.loads(out.stdout)
    assert item["kernel"]["local_loads"] > 0
    assert item["findings"][0]["tool"] in ("register_spills", "tensor_cores_unused")
    assert {"register_spills", "tensor_cores_unused"} <= {f["tool"] for f in item["findings"]}
    table = run("kernels", "sass", str(FIXTURES / "vector_add.cubin"))
    assert table.returncode == 0 and "vector_add" in table.stdout


def test_sass_on_a_file_without_device_code_is_one_line(tmp_path):
    text = tmp_path / "not_a_cubin.txt"
    text.write_text("hello\n")
    for path in (text, tmp_path / "missing.cubin"):
        out = run("kernels", "sass", str(path))
        assert out.returncode == 2
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_tables_keep_their_cells_when_the_output_is_not_a_terminal(monkeypatch):
    """Piped into a file or a CI log, rich would size tables to 80 columns and cut cells to
    ellipses; the commands' console is wide there (COLUMNS still wins)."""
    import io
    import sys

    from rich.table import Table

    from loopwise.core.console import WIDTH_OFF_TERMINAL, console

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    c = console()
    assert c.width == WIDTH_OFF_TERMINAL
    table = Table("candidate", "status", "speedup", "ms", "eager ms", "reasons")
    table.add_row("loopwise/kernels/examples/cute_gemm/bf16_gemm_cutlass.py", "correct", "0.99x", "1.234", "1.222", "-")
    c.print(table)
    assert "correct" in sys.stdout.getvalue() and "0.99x" in sys.stdout.getvalue()
    monkeypatch.setenv("COLUMNS", "100")
    assert console().width == 100


def _threads_after_cli(env_extra: dict) -> list[str]:
    """What the environment and torch say about threads after ``loopwise --version`` ran in-process."""
    code = ("import os, sys\nfrom loopwise import cli\nsys.argv = ['loopwise', '--version']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "import torch\nprint(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**env, **env_extra},
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-2:]


def test_the_cli_runs_torch_on_one_thread_unless_the_user_chose():
    assert _threads_after_cli({}) == ["1", "1"]
    assert _threads_after_cli({"OMP_NUM_THREADS": "2"}) == ["2", "2"]
