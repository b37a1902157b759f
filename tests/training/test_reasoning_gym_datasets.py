"""``rg:<dataset>``: any reasoning-gym dataset as a task, checked against reasoning-gym itself: its
questions are the prompts, its answers the references, its ``score_answer`` the verifier, and its
curriculum the difficulty where it has one."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from loopwise.errors import UserError
from loopwise.training.tasks import get_task

rg = pytest.importorskip("reasoning_gym")


def _entry(name: str, difficulty: int, index: int) -> dict:
    """The item reasoning-gym gives at ``index`` for the curriculum's level ``difficulty`` (an
    independent rebuild of what the adapter must show)."""
    from reasoning_gym.factory import CURRICULA, create_curriculum

    from loopwise.training.tasks.reasoning_gym_datasets import SIZE

    if name in CURRICULA:
        curriculum = create_curriculum(name)
        curriculum.set_global_level(difficulty)
        config = curriculum.generate_configuration({"seed": 0, "size": SIZE})
        dataset = rg.factory.DATASETS[name][0](config=config)
    else:
        dataset = rg.create_dataset(name, seed=0, size=SIZE)
    return dataset[index], dataset


@pytest.mark.parametrize("name", ["basic_arithmetic", "leg_counting", "word_sorting"])
def test_a_dataset_gives_its_questions_answers_and_scores(name):
    task = get_task(f"rg:{name}")
    assert task.name == f"rg:{name}" and name in task.description
    for difficulty in (0, task.max_difficulty):
        for example in task.dataset("train", 12, difficulty, seed=1):
            entry, dataset = _entry(name, difficulty, example.meta["index"])
            assert example.prompt == entry["question"] and example.answer == entry["answer"]
            assert task.score(example, example.answer) == 1.0
            for completion in ("", "7", example.answer + " x", "\x00é"):
                assert task.score(example, completion) == dataset.score_answer(completion, entry)


def test_difficulty_follows_the_datasets_curriculum():
    from reasoning_gym.factory import create_curriculum

    task = get_task("rg:leg_counting")
    levels = create_curriculum("leg_counting").attributes["num_animals"].levels
    assert task.max_difficulty == len(levels) - 1
    easy = {len(e.meta["entry"]["metadata"]["animals"]) for e in task.dataset("train", 40, 0)}
    hard = {len(e.meta["entry"]["metadata"]["animals"]) for e in task.dataset("train", 40, 6)}
    assert max(easy) <= levels[0] < max(hard) <= levels[6]
    assert task.max_answer_length(6) >= max(len(e.answer) for e in task.dataset("test", 40, 6))


def test_a_dataset_without_a_curriculum_has_one_stated_difficulty():
    task = get_task("rg:list_functions")
    assert task.max_difficulty == 0 and "fixed difficulty" in task.description
    example = task.example(random.Random(0), 0)
    assert task.score(example, example.answer) == 1.0


def test_a_dataset_without_reference_answers_is_verifier_only():
    task = get_task("rg:graph_color")
    example = task.example(random.Random(0), 0)
    assert example.answer is None and task.score(example, "not a colouring") == 0.0
    assert task.max_answer_length(0) > 0


def test_unknown_or_unbuildable_datasets_are_one_line_errors():
    for name, message in (("rg:no_such_dataset", "loopwise training tasks"), ("rg:", "loopwise training tasks"),
                          ("rg:composite", "rg:composite")):
        with pytest.raises(UserError, match=message) as caught:
            get_task(name)
        assert "\n" not in str(caught.value)
    with pytest.raises(UserError, match="word_sorting"):  # a near miss is named
        get_task("rg:word_sort")


def test_the_tasks_command_lists_every_dataset():
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "tasks", "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    listed = json.loads(done.stdout)
    assert {"arithmetic", "countdown"} <= set(listed["builtin"])
    assert {f"rg:{n}" for n in rg.factory.DATASETS} <= set(listed["reasoning_gym"])


def test_a_verifier_only_dataset_the_fresh_policy_cannot_solve_is_a_prompt_one_line_error(tmp_path):
    """rg:graph_color's answers are colourings no near-uniform draw satisfies: the command says so
    before sampling from the policy (which took minutes on a 2-core CPU), well within the timeout."""
    done = subprocess.run([sys.executable, "-m", "loopwise", "training", "search", "rg:graph_color", "--preset", "cpu",
                           "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert last.startswith("error: rg:graph_color: the warm start needs reference answers or completions the verifier")


@pytest.mark.parametrize("name", ["caesar_cipher", "survo", "modulo_grid"])
def test_difficulty_stops_below_the_first_curriculum_level_reasoning_gym_refuses(name):
    """Past some level these curricula ask for a configuration their own dataset rejects: the
    task's difficulties end below it, so its vocabulary builds and no search can step into it."""
    from reasoning_gym.factory import create_curriculum

    from loopwise.training.tasks import task_characters

    curriculum = create_curriculum(name)
    refused = None
    for level in range(max(len(a.levels) for a in curriculum.attributes.values())):
        try:
            _entry(name, level, 0)
        except Exception:  # noqa: BLE001 - whatever reasoning-gym raises for a configuration it refuses
            refused = level
            break
    assert refused is not None and refused > 0  # a level reasoning-gym itself refuses
    task = get_task(f"rg:{name}")
    assert task.max_difficulty == refused - 1
    assert task_characters(task)
    example = task.dataset("train", 4, task.max_difficulty)[0]
    assert task.score(example, example.answer) == 1.0
    with pytest.raises(UserError, match=f"0, {refused - 1}"):
        task.dataset("train", 4, refused)


def test_a_dataset_that_cannot_hold_the_default_number_of_items_is_built_smaller():
    """reasoning-gym's word_ladder refuses 32,768 items ("Dataset size too large"): the task is
    built with fewer, and its examples are still reasoning-gym's items."""
    from reasoning_gym.factory import create_curriculum

    task = get_task("rg:word_ladder")
    curriculum = create_curriculum("word_ladder")
    curriculum.set_global_level(0)
    dataset = rg.factory.DATASETS["word_ladder"][0](config=curriculum.generate_configuration({"seed": 0, "size": 4096}))
    for example in task.dataset("train", 4, 0):
        entry = dataset[example.meta["index"]]
        assert example.prompt == entry["question"] and example.answer == entry["answer"]
        assert task.score(example, example.answer) == 1.0
