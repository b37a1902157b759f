"""The RL tasks: generators, verifiers, splits and errors, checked the way a trainer uses them.

Every built-in task runs the same conformance tests; reasoning-gym's are skipped where it is not
installed (only its missing-dependency error is checked then).
"""

from __future__ import annotations

import json
import random
import re
import sys

import pytest

from loopwise.errors import UserError
from loopwise.training.tasks import ALPHABET, END, SPLITS, TASKS, Example, Task, get_task, split_of
from loopwise.training.tasks.arithmetic import ArithmeticTask
from loopwise.training.tasks.countdown import CountdownTask, evaluate
from loopwise.training.tasks.reasoning_gym_task import ChainSumTask
from loopwise.training.tasks.sorting import SortingTask

CLASSES = {"arithmetic": ArithmeticTask, "sorting": SortingTask, "countdown": CountdownTask,
           "rg_chain_sum": ChainSumTask}
GARBAGE = ["", "((((", "))((", "1/0", "9" * 500, "9" * 5000, "(" * 3000 + "1" + ")" * 3000, "1+", "+1", "-",
           "=", ",", ",,", "1,,2", "١٢", "٤,٦", "²", "é", "\x00", "💥💥", "12\n34", " 1", "1 + 2", "1e3",
           "0x1F"]


def _task(name: str, **knobs) -> Task:
    if name.startswith("rg_"):
        pytest.importorskip("reasoning_gym")
    return get_task(name, **knobs)


def _levels(names=TASKS):
    return [(name, d) for name in names for d in range(CLASSES[name].max_difficulty + 1)]


# --- conformance: every task, every difficulty ---------------------------------------------------


@pytest.mark.parametrize(("name", "difficulty"), _levels())
def test_reference_answers_score_one_and_stay_in_alphabet_and_length(name, difficulty):
    task = _task(name)
    examples = task.dataset("train", 200, difficulty, seed=3)
    assert len(examples) == 200 and len({e.prompt for e in examples}) > 1
    limit = task.max_answer_length(difficulty)
    for example in examples:
        assert task.score(example, example.answer) == 1.0, example
        assert set(example.prompt + example.answer) <= set(task.alphabet), example
        assert example.answer and len(example.answer) <= limit, (example, limit)
        assert example.prompt.endswith("=")
        json.dumps(example.meta)


@pytest.mark.parametrize("name", TASKS)
def test_task_identity_alphabet_and_monotone_lengths(name):
    task = _task(name)
    assert task.name == name and isinstance(task, CLASSES[name])
    assert END not in task.alphabet and set(task.alphabet) <= set(ALPHABET)
    lengths = [task.max_answer_length(d) for d in range(task.max_difficulty + 1)]
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0]


def test_alphabet_is_exactly_the_union_of_the_tasks_alphabets():
    assert set(ALPHABET) == set().union(*(cls.alphabet for cls in CLASSES.values()))
    assert len(ALPHABET) == len(set(ALPHABET)) and END not in ALPHABET
    assert set(CLASSES) == set(TASKS)


@pytest.mark.parametrize(("name", "difficulty"), [(n, d) for n in TASKS for d in (0, CLASSES[n].max_difficulty)])
def test_garbage_scores_zero(name, difficulty):
    task = _task(name)
    for example in task.dataset("train", 20, difficulty):
        for completion in GARBAGE:
            assert task.score(example, completion) == 0.0, (example, completion[:20])


@pytest.mark.parametrize("name", TASKS)
def test_random_completions_never_raise_and_score_a_known_reward(name):
    task = _task(name)
    rng = random.Random(0)
    characters = task.alphabet + "é٣ \t\x00"
    examples = task.dataset("train", 10, 1)
    for _ in range(2000):
        completion = "".join(rng.choice(characters) for _ in range(rng.randint(0, 12)))
        assert task.score(rng.choice(examples), completion) in (0.0, 0.1, 1.0)


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("difficulty", [0, 2])
def test_splits_are_disjoint_deterministic_and_seeded(name, difficulty):
    task = _task(name)
    prompts = {split: {e.prompt for s in (0, 1) for e in task.dataset(split, 200, difficulty, seed=s)}
               for split in SPLITS}
    assert not prompts["train"] & prompts["tune"]
    assert not prompts["train"] & prompts["test"]
    assert not prompts["tune"] & prompts["test"]
    assert all(split_of(p) == split for split in SPLITS for p in prompts[split])
    assert task.dataset("test", 50, difficulty, seed=7) == task.dataset("test", 50, difficulty, seed=7)
    assert task.dataset("test", 50, difficulty, seed=7) != task.dataset("test", 50, difficulty, seed=8)
    assert task.example(random.Random(5), difficulty) == task.example(random.Random(5), difficulty)


def test_split_shares_are_about_80_10_10():
    prompts = [f"{a}+{b}=" for a in range(100) for b in range(100)]
    share = {split: sum(split_of(p) == split for p in prompts) / len(prompts) for split in SPLITS}
    assert share["train"] == pytest.approx(0.8, abs=0.02)
    assert share["tune"] == pytest.approx(0.1, abs=0.02)
    assert share["test"] == pytest.approx(0.1, abs=0.02)


@pytest.mark.parametrize("name", TASKS)
def test_bad_arguments_raise_one_line_user_errors(name):
    task = _task(name)
    top = task.max_difficulty
    calls = [lambda: task.dataset("validation", 5, 0), lambda: task.dataset("train", 0, 0),
             lambda: task.dataset("train", -1, 0), lambda: task.dataset("train", 2.5, 0),
             lambda: task.dataset("train", True, 0), lambda: task.dataset("train", 5, -1),
             lambda: task.dataset("train", 5, top + 1), lambda: task.dataset("train", 5, 1.0),
             lambda: task.example(random.Random(0), top + 1), lambda: task.max_answer_length(-1)]
    for call in calls:
        with pytest.raises(UserError) as caught:
            call()
        assert "\n" not in str(caught.value) and name in str(caught.value)


def test_get_task_names_the_known_tasks_and_checks_knobs():
    with pytest.raises(UserError, match="unknown task 'nope'") as caught:
        get_task("nope")
    assert all(name in str(caught.value) for name in TASKS) and "\n" not in str(caught.value)
    with pytest.raises(UserError, match="bogus"):
        get_task("sorting", bogus=1)
    assert get_task("countdown", use_all=False).use_all is False


# --- arithmetic ----------------------------------------------------------------------------------


def test_arithmetic_answers_are_reversed_digits_of_the_prompt():
    task = get_task("arithmetic")
    operators = set()
    for example in task.dataset("test", 200, 3):
        a, op, b = re.fullmatch(r"([0-9]+)([+-])([0-9]+)=", example.prompt).groups()
        result = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert result >= 0 and example.answer == str(result)[::-1]
        operators.add(op)
    assert operators == {"+", "-"}
    assert {e.prompt[-1] for e in task.dataset("train", 50, 0)} == {"="}
    assert all("-" not in e.prompt for e in task.dataset("train", 200, 1))  # subtraction starts at 2


def test_arithmetic_plain_order_knob_and_partial_credit():
    plain = get_task("arithmetic", reverse=False)
    example = next(e for e in plain.dataset("train", 200, 1) if len(set(e.answer)) > 1)
    assert example.answer == str(example.meta["result"])
    assert get_task("arithmetic").score(
        Example("60+40=", "001", {}), "100") == 0.1  # the plain-order answer is a wrong reversed one
    wrong = str((int(example.answer[0]) + 1) % 10) + example.answer[1:]
    assert plain.score(example, wrong) == 0.1
    assert plain.score(example, example.answer + "0") == 0.0
    assert plain.score(example, "x" * len(example.answer)) == 0.0


# --- sorting -------------------------------------------------------------------------------------


def test_sorting_answers_sort_the_prompt_and_partial_credit():
    task = get_task("sorting")
    for example in task.dataset("tune", 200, 4):
        numbers = [int(x) for x in example.prompt[:-1].split(",")]
        assert example.answer == ",".join(map(str, sorted(numbers)))
    example = Example("3,1,2=", "1,2,3", {"numbers": [3, 1, 2]})
    assert task.score(example, "1,2,3") == 1.0
    assert task.score(example, "3,1,2") == 0.1  # well formed, unsorted
    assert task.score(example, "1,2,4") == 0.1
    assert task.score(example, "1,2") == 0.0  # wrong count
    assert task.score(example, "1,2,3,") == 0.0
    assert task.score(example, "123") == 0.0
    assert {len(e.meta["numbers"]) for e in task.dataset("train", 100, 0)} == {3}


# --- countdown -----------------------------------------------------------------------------------


def test_countdown_parser_exact_rationals_precedence_and_rejections():
    assert evaluate("7/2*2") == 7
    assert evaluate("1/3+1/3+1/3") == 1
    assert evaluate("2*3+4") == 10 and evaluate("2*(3+4)") == 14
    assert evaluate("8-2-1") == 5 and evaluate("8/4/2") == 1  # left to right
    assert evaluate("2-3") == -1
    assert evaluate("((((1))))") == 1
    for illegal in ["1/0", "3/(5-5)", "-3", "+3", "1 + 2", "(1+2", "1+2)", "()", "1(2)", "2**3", "1..2",
                    "", "(" * 40 + "1" + ")" * 40, "1" * 10, "١+١"]:
        assert evaluate(illegal) is None, illegal


def test_countdown_rules_and_rewards():
    exactly, at_most = get_task("countdown"), get_task("countdown", use_all=False)
    example = Example("3,5,5:3=", "3/5*5", {"numbers": [3, 5, 5], "target": 3})
    assert exactly.score(example, "3/5*5") == 1.0  # 3/5 is not an integer; exact arithmetic keeps it
    assert exactly.score(example, "5/5*3") == 1.0
    assert exactly.score(example, "3*(5-5)") == 0.1  # legal, value 0
    assert exactly.score(example, "3+5+5") == 0.1
    assert exactly.score(example, "3-5-5") == 0.1  # negative values are legal
    assert exactly.score(example, "3/(5-5)") == 0.0  # division by zero is illegal
    assert exactly.score(example, "3") == 0.0  # numbers left out
    assert exactly.score(example, "3+5+5+3") == 0.0  # a number used twice
    assert exactly.score(example, "35/5-5+3") == 0.0  # digits joined
    assert exactly.score(example, "03/5*5") == 0.0  # not written as given
    assert at_most.score(example, "3") == 1.0
    assert at_most.score(example, "3+5") == 0.1
    assert at_most.score(example, "3+3") == 0.0


@pytest.mark.parametrize("difficulty", range(CountdownTask.max_difficulty + 1))
def test_countdown_references_use_every_number_once_and_wrong_legal_answers_get_format_reward(difficulty):
    task = get_task("countdown")
    sizes = set()
    for example in task.dataset("train", 200, difficulty):
        numbers, target = example.meta["numbers"], example.meta["target"]
        assert example.prompt == f"{','.join(map(str, numbers))}:{target}="
        assert sorted(map(int, re.findall(r"[0-9]+", example.answer))) == sorted(numbers)
        assert evaluate(example.answer) == target >= 1
        wrong = next(e for e in ("+".join(map(str, numbers)), "*".join(map(str, numbers)),
                                 "-".join(map(str, numbers))) if evaluate(e) != target)
        assert task.score(example, wrong) == 0.1
        assert task.score(example, example.answer + "+" + str(numbers[0])) == 0.0
        sizes.add(len(numbers))
    assert sizes == {(2, 3, 3, 4, 4, 5, 6)[difficulty]}


# --- reasoning-gym -------------------------------------------------------------------------------


def test_reasoning_gym_missing_is_a_one_line_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # makes `import reasoning_gym` fail
    hint = "^reasoning-gym is not installed: pip install 'loopwise\\[training\\]'"
    with pytest.raises(UserError, match=hint) as caught:
        get_task("rg_chain_sum")
    assert "\n" not in str(caught.value)


def test_reasoning_gym_chain_sum_prompts_and_scoring():
    task = _task("rg_chain_sum")
    for example in task.dataset("train", 200, 2):
        entry = example.meta["entry"]
        assert example.prompt == entry["metadata"]["expression"].replace(" ", "") + "="
        assert example.answer == entry["answer"] == str(sum(
            int(t) for t in re.findall(r"[+-]?[0-9]+", "+" + example.prompt[:-1])))
        assert task.score(example, example.answer + "1") == 0.0  # reasoning-gym would pay len/(len+1)
        digit = example.answer[-1]
        assert task.score(example, example.answer[:-1] + str((int(digit) + 1) % 10)) == 0.1
