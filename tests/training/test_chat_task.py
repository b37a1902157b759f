"""``chat:TASK``: a task asked in words to a chat model, whose final number is its answer."""

from __future__ import annotations

import random

import pytest

from loopwise.errors import UserError
from loopwise.training.tasks import get_task


def test_chat_arithmetic_asks_in_words_and_takes_the_final_number():
    task = get_task("chat:arithmetic")
    assert task.name == "chat:arithmetic" and task.max_difficulty == get_task("arithmetic").max_difficulty
    e = task.example(random.Random(0), 1)
    a, b, op, result = (e.meta[k] for k in ("a", "b", "op", "result"))
    assert e.prompt == f"What is {a} {op} {b}? Answer with the number only."
    assert e.answer == str(result)  # the usual digit order: a chat model reads and writes numbers so
    assert task.score(e, f"{a} {op} {b} = {result}.") == 1.0
    assert task.score(e, f"The answer is **{result}**") == 1.0
    assert task.score(e, str(result)) == 1.0
    wrong = str(result + 1) if len(str(result + 1)) == len(str(result)) else str(result - 1)
    assert task.score(e, f"{a} {op} {b} = {wrong}") == 0.1  # the task's own format reward
    assert task.score(e, "I cannot say.") == 0.0
    # room for the model's phrasing ("17 + 25 = 42.") beyond the bare answer
    assert task.max_answer_length(1) > get_task("arithmetic").max_answer_length(1) + len("999 + 999 = ")


def test_chat_keeps_the_datasets_splits_apart():
    task = get_task("chat:arithmetic")
    train = {e.prompt for e in task.dataset("train", 50, 1)}
    test = {e.prompt for e in task.dataset("test", 50, 1)}
    assert not train & test


def test_chat_reasoning_gym_keeps_its_question_and_verifier():
    pytest.importorskip("reasoning_gym")
    task = get_task("chat:rg:leg_counting")
    inner = get_task("rg:leg_counting")
    e = task.example(random.Random(0), 0)
    assert e.prompt == inner.example(random.Random(0), 0).prompt
    assert task.score(e, f"So there are {e.answer} legs in total.") == 1.0
    assert inner.score(e, f"So there are {e.answer} legs in total.") < 1.0  # its partial credit
    assert task.score(e, "no idea") == 0.0


def test_a_verifier_only_task_gets_the_completion_as_it_is(tmp_path):
    path = tmp_path / "echo.py"
    path.write_text("class Echo:\n    name = 'echo'\n"
                    "    def example(self, rng, difficulty):\n        return 'say hi'\n"
                    "    def score(self, example, completion):\n        return float(completion == 'hi there')\n")
    task = get_task(f"chat:{path}")
    e = task.example(random.Random(0), 0)
    assert task.score(e, "hi there") == 1.0 and task.score(e, "hi") == 0.0


def test_chat_of_an_unknown_task_is_a_one_line_error():
    with pytest.raises(UserError, match="unknown task") as err:
        get_task("chat:nope")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="chat:"):
        get_task("chat:")
