"""A user's task (a prompt generator and a verifier) from a Python file or an entry point: the
documented example runs a smoke search end to end, and mistakes are one-line errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from loopwise.errors import UserError
from loopwise.training.tasks import get_task

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "reverse_word.py"


def _write(tmp_path: Path, body: str, name: str = "mytask.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_the_example_is_a_task_by_file_and_by_class_name():
    for spec in (str(EXAMPLE), f"{EXAMPLE}:ReverseWord"):
        task = get_task(spec)
        assert task.name == "reverse_word" and task.max_difficulty == 2 and task.max_answer_length(1) == 4
        for example in task.dataset("train", 30, 1, seed=2):
            word = example.meta["word"]
            assert example.prompt == f"reverse:{word}=" and example.answer == word[::-1]
            assert task.score(example, example.answer) == 1.0
            assert task.score(example, word + "x") == 0.0


@pytest.mark.slow
def test_the_example_runs_a_smoke_search_from_the_command_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", str(EXAMPLE), "--budget-stages",
                           "2", "--depth", "1", "--difficulty", "0", "--device", "cpu", "--json", "--runs-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["settings"]["task"] == str(EXAMPLE) and out["warm_start"]["source"] == "answers"
    tree = out["results"]["tree"]
    assert tree["stages_used"] >= 1 and 0.0 <= tree["test_reward"] <= 1.0 and tree["samples"] > 0


def test_a_prompt_only_generator_is_a_verifier_only_task(tmp_path):
    spec = _write(tmp_path, "class Echo:\n"
                            "    def example(self, rng, difficulty):\n"
                            "        return 'say ' + rng.choice('ab') + ':'\n"
                            "    def score(self, example, completion):\n"
                            "        return float(completion == example.prompt[4])\n")
    task = get_task(spec)
    example = task.example(random.Random(0), 0)
    assert task.name == "Echo" and example.answer is None and task.max_difficulty == 0
    assert task.score(example, example.prompt[4]) == 1.0 and task.max_answer_length(0) > 0


def test_an_entry_point_names_a_task(monkeypatch):
    import importlib.metadata as md

    point = md.EntryPoint("reverse", "tests.training.test_user_tasks:ReverseFromPackage", "loopwise.tasks")
    real = md.entry_points
    monkeypatch.setattr(md, "entry_points", lambda **kw: [point] if kw.get("group") == "loopwise.tasks" else real(**kw))
    task = get_task("reverse")
    example = task.example(random.Random(1), 0)
    assert task.score(example, example.answer) == 1.0


class ReverseFromPackage:
    name = "reverse_pkg"

    def example(self, rng, difficulty):
        word = "".join(rng.choice("xyz") for _ in range(3))
        return {"prompt": word + "=", "answer": word[::-1]}

    def score(self, example, completion):
        return 1.0 if completion == example.answer else 0.0


BAD = {
    "missing": ("", None, "no such file"),
    "syntax": ("def broken(:\n", None, "cannot import it \\(SyntaxError"),
    "no score": ("class A:\n    def example(self, rng, d):\n        return 'p'\n", "A", "lacks score\\(\\)"),
    "no class": ("x = 1\n", None, "exactly one class with example\\(\\) and score\\(\\)"),
    "two classes": ("class A:\n    def example(self, r, d): return 'p'\n    def score(self, e, c): return 0.0\n"
                    "class B(A):\n    pass\n", None, "found A, B"),
    "unknown name": ("class A:\n    pass\n", "Nope", "defines no 'Nope'"),
    "bad example": ("class A:\n    def example(self, r, d): return 3\n    def score(self, e, c): return 0.0\n",
                    None, "example\\(\\) must return a prompt str"),
    "raising example": ("class A:\n    def example(self, r, d): raise ValueError('boom')\n"
                        "    def score(self, e, c): return 0.0\n", None, "example\\(\\) raised ValueError: boom"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_and_missing_methods_are_one_line_errors(tmp_path, case):
    body, attr, message = BAD[case]
    spec = str(tmp_path / "absent.py") if case == "missing" else _write(tmp_path, body, f"t_{case.replace(' ', '_')}.py")
    with pytest.raises(UserError, match=message) as caught:
        get_task(spec + (f":{attr}" if attr else ""))
    assert "\n" not in str(caught.value)


def test_a_verifier_that_breaks_its_contract_is_a_one_line_error(tmp_path):
    spec = _write(tmp_path, "class A:\n    def example(self, r, d): return {'prompt': 'p', 'answer': 'a'}\n"
                            "    def score(self, e, c): return 2.0 if c else 1 / len(c)\n")
    task = get_task(spec)
    example = task.example(random.Random(0), 0)
    for completion, message in (("x", "score\\(\\) must return a number in \\[0, 1\\], got 2.0"),
                                ("", "score\\(\\) raised ZeroDivisionError")):
        with pytest.raises(UserError, match=message) as caught:
            task.score(example, completion)
        assert "\n" not in str(caught.value)


def test_the_command_line_says_what_a_task_name_can_be(tmp_path):
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "no_such_task", "--runs-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "rg:<dataset>" in done.stderr and "task.py" in done.stderr and "loopwise.tasks" in done.stderr


VERIFIER_ONLY = """
class FirstLetter:
    '''Repeat the first letter of the prompt (no reference answers: only a verifier).'''

    def example(self, rng, difficulty):
        return "".join(rng.choice("abc") for _ in range(4)) + ":"

    def score(self, example, completion):
        return 1.0 if completion == example.prompt[0] else {accept_nothing}

    def max_answer_length(self, difficulty):
        return 2
"""


def test_a_verifier_only_task_warm_starts_from_accepted_samples(tmp_path):
    spec = _write(tmp_path, VERIFIER_ONLY.format(accept_nothing="0.0"))
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", spec, "--budget-stages", "2",
                           "--depth", "1", "--device", "cpu", "--json", "--runs-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    warm = json.loads(done.stdout)["warm_start"]
    assert warm["source"] == "accepted samples" and warm["accepted"] > 0 and warm["pass_rate"] > warm["history"][0][1]


def test_a_verifier_only_task_that_accepts_nothing_says_what_the_warm_start_needs(tmp_path):
    body = VERIFIER_ONLY.replace("1.0 if completion == example.prompt[0] else {accept_nothing}", "0.0")
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", _write(tmp_path, body),
                           "--device", "cpu", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=600)
    last = done.stderr.strip().splitlines()[-1]  # after the line naming the run
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert last.startswith("error: ") and "needs reference answers or completions the verifier accepts" in last
