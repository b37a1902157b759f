"""RL tasks with programmatic verifiers: what the training engine trains a policy on.

A :class:`Task` generates :class:`Example` s (a prompt, a reference answer that scores 1.0 or
``None`` when the task has only a verifier, and task-specific metadata) at an integer *difficulty*
and scores a policy's completion in [0, 1]. The trainer appends its end token to mark the end of a
completion, and a completion reaches :meth:`Task.score` already cut at it. The character policy's
vocabulary is built from the task (:func:`task_characters`), a Hugging Face policy uses its tokenizer.

Splits. :meth:`Task.dataset` draws examples from the task's generator and keeps those whose prompt
hashes into the requested split's bucket (:func:`split_of`: BLAKE2b of the prompt, 80% ``train``,
10% ``tune``, 10% ``test``). The bucket depends on the prompt alone, so the three splits never share
a prompt, for any seed or difficulty. Within a split, examples are i.i.d. draws and may repeat when
the difficulty has few distinct prompts (difficulty 0 of some tasks has only a few hundred).

Naming a task (:func:`get_task`): a built-in name (:data:`TASKS`: ``arithmetic`` (reversed-digit
addition and subtraction), ``sorting``, ``countdown``, ``rg_chain_sum``); ``rg:<dataset>`` for any
reasoning-gym dataset (:mod:`~loopwise.training.tasks.reasoning_gym_datasets`); ``chat:<task>`` for any
of these asked in words to a chat model (:mod:`~loopwise.training.tasks.chat`); a Python file
``path.py`` or ``path.py:Name``, or the name of an entry point in the group ``loopwise.tasks``
(:mod:`~loopwise.training.tasks.user`).
"""

from __future__ import annotations

import abc
import hashlib
import importlib
import inspect
import random
from collections.abc import Mapping
from dataclasses import dataclass

from loopwise.errors import UserError

__all__ = ["ALPHABET", "DEFAULT_ANSWER_LENGTH", "END", "SPLITS", "TASKS", "Example", "Task", "get_task",
           "sampled_answer_length", "split_of", "task_characters"]

END = "\n"
"""The text a Hugging Face policy ends a completion with (when it is one token); never part of a
built-in task's alphabet."""

ALPHABET = "()*+,-/0123456789:="
"""The union of the built-in tasks' alphabets."""

DEFAULT_ANSWER_LENGTH = 64
"""The completion length (characters) of a task that gives neither answers nor a bound."""
_SAMPLE = 256  # examples per difficulty that answer lengths are read from
_VOCABULARY_SAMPLE = 128  # examples, over all difficulties, that a task's characters are read from

SPLITS = ("train", "tune", "test")
_SPLIT_EDGES = ((800, "train"), (900, "tune"), (1000, "test"))  # per-mille buckets of split_of

# name -> (module, class); imported on first use so that `import loopwise.training.tasks` stays cheap
_REGISTRY: dict[str, tuple[str, str]] = {
    "arithmetic": ("loopwise.training.tasks.arithmetic", "ArithmeticTask"),
    "sorting": ("loopwise.training.tasks.sorting", "SortingTask"),
    "countdown": ("loopwise.training.tasks.countdown", "CountdownTask"),
    "rg_chain_sum": ("loopwise.training.tasks.reasoning_gym_task", "ChainSumTask"),
}
TASKS: tuple[str, ...] = tuple(_REGISTRY)


@dataclass(frozen=True)
class Example:
    """One problem.

    Attributes:
        prompt: What the policy is given; the completion starts right after its last character.
        answer: A reference completion that scores 1.0, without the end token; ``None`` when the
            task has only a verifier.
        meta: Task-specific facts (operands, numbers, target, ...), JSON-serialisable for the
            built-in tasks.
    """

    prompt: str
    answer: str | None
    meta: Mapping


def split_of(prompt: str) -> str:
    """The split a prompt belongs to: ``"train"`` (80%), ``"tune"`` (10%) or ``"test"`` (10%).

    A pure function of the prompt (BLAKE2b, not Python's salted ``hash``), stable across processes.
    """
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest()
    bucket = int.from_bytes(digest, "big") % 1000
    return next(split for edge, split in _SPLIT_EDGES if bucket < edge)


class Task(abc.ABC):
    """A generator of examples and the verifier that scores completions.

    Subclasses set the class attributes and implement :meth:`example`, :meth:`score` and
    :meth:`max_answer_length`; :meth:`dataset` is shared.

    Attributes:
        name: The registry name (``"arithmetic"``, ``"rg:leg_counting"``, ...).
        alphabet: Every character any prompt or answer can contain, the same at every difficulty;
            never contains :data:`END`. Optional: ``""`` when the task does not know it (the
            character vocabulary then comes from a sample of examples, :func:`task_characters`).
        max_difficulty: The hardest difficulty; difficulties run from 0 to it.
    """

    name: str
    alphabet: str = ""
    max_difficulty: int

    @property
    def description(self) -> str:
        """What the task is, in a sentence (a model proposing transitions reads it)."""
        return (type(self).__doc__ or self.name).strip().splitlines()[0]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        alphabet = getattr(cls, "alphabet", "")
        if END in alphabet or len(set(alphabet)) != len(alphabet):
            raise TypeError(f"{cls.__name__}.alphabet {alphabet!r} must not repeat a character or hold the end token")

    @abc.abstractmethod
    def example(self, rng: random.Random, difficulty: int) -> Example:
        """Draw one example at ``difficulty`` from ``rng`` (any split)."""

    @abc.abstractmethod
    def score(self, example: Example, completion: str) -> float:
        """The reward of ``completion`` (cut at the end token) for ``example``, in [0, 1].

        Never raises, whatever the completion holds.
        """

    @abc.abstractmethod
    def max_answer_length(self, difficulty: int) -> int:
        """An upper bound on the length of any reference answer at ``difficulty``."""

    def dataset(self, split: str, n: int, difficulty: int, seed: int = 0) -> list[Example]:
        """``n`` examples of ``split`` at ``difficulty``, the same for the same arguments.

        Draws from :meth:`example` and keeps the examples whose prompt falls in ``split``
        (:func:`split_of`), so no prompt appears in two splits.

        Raises:
            UserError: ``split`` is not one of :data:`SPLITS`, ``n`` < 1, or ``difficulty`` is out of range.
        """
        if split not in SPLITS:
            raise UserError(f"{self.name}: unknown split {split!r}; known: {', '.join(SPLITS)}")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UserError(f"{self.name}: the number of examples must be an integer >= 1, got {n!r}")
        self.check_difficulty(difficulty)
        rng = random.Random(f"{self.name}/{split}/{difficulty}/{seed}")  # str seeds hash with SHA-512
        examples: list[Example] = []
        draws_left = 100 * n + 10_000  # a split takes ~10% or more of the draws; this only stops a degenerate task
        while len(examples) < n:
            if draws_left == 0:
                raise UserError(f"{self.name}: found only {len(examples)} of {n} {split} examples "
                                f"at difficulty {difficulty}")
            draws_left -= 1
            example = self.example(rng, difficulty)
            if split_of(example.prompt) == split:
                examples.append(example)
        return examples

    def check_difficulty(self, difficulty: int) -> int:
        """Return ``difficulty`` if it lies in [0, max_difficulty]; raise :class:`UserError` otherwise."""
        is_integer = isinstance(difficulty, int) and not isinstance(difficulty, bool)
        if not is_integer or not 0 <= difficulty <= self.max_difficulty:
            raise UserError(f"{self.name}: difficulty must be an integer in [0, {self.max_difficulty}], "
                            f"got {difficulty!r}")
        return difficulty


def get_task(name: str, **knobs) -> Task:
    """Build the task ``name``: a built-in one (with its keyword ``knobs``), ``rg:<dataset>``, ``chat:<task>``, a
    Python file ``path.py[:Name]`` or an entry point of the group ``loopwise.tasks``.

    Raises:
        UserError: Unknown name (the message lists :data:`TASKS` and the other forms), unknown
            knob, a task whose optional dependency is missing, or a user task that cannot be loaded.
    """
    if name.startswith("chat:"):
        if knobs:
            raise UserError(f"task {name!r} takes no knobs")
        return importlib.import_module("loopwise.training.tasks.chat").chat_task(name)
    if name not in _REGISTRY:
        # by name, like the registry's modules: they import this package
        rg = importlib.import_module("loopwise.training.tasks.reasoning_gym_datasets")
        user = importlib.import_module("loopwise.training.tasks.user")
        if knobs:
            raise UserError(f"task {name!r} takes no knobs")
        if name.startswith(rg.PREFIX):
            return rg.ReasoningGymDataset(name[len(rg.PREFIX):])
        if user.is_file_spec(name):
            return user.load_file(name)
        task = user.load_entry_point(name)
        if task is None:
            raise UserError(f"unknown task {name!r}; known tasks: {', '.join(TASKS)}, rg:<dataset> (reasoning-gym), "
                            "path/to/task.py[:Class] or an entry point of loopwise.tasks; see loopwise training tasks")
        return task
    module, cls_name = _REGISTRY[name]
    cls = getattr(importlib.import_module(module), cls_name)
    try:
        inspect.signature(cls).bind(**knobs)
    except TypeError:
        known = ", ".join(inspect.signature(cls).parameters) or "none"
        raise UserError(f"task {name!r} does not take knobs {sorted(knobs)}; its knobs: {known}") from None
    return cls(**knobs)


def sampled_answer_length(task: Task, difficulty: int) -> int:
    """The longest reference answer among a fixed sample of ``task``'s examples at ``difficulty``
    (:data:`DEFAULT_ANSWER_LENGTH` when it gives none): the completion bound of a task that
    states none. An estimate: an unseen answer may be longer."""
    rng = random.Random(f"{task.name}/answer-length/{difficulty}")
    answers = [task.example(rng, difficulty).answer for _ in range(_SAMPLE)]
    lengths = [len(a) for a in answers if a is not None]
    return max(lengths) if lengths else DEFAULT_ANSWER_LENGTH


def task_characters(task: Task) -> str:
    """Every character of ``task.alphabet`` and of the prompts and answers of a fixed sample of its
    examples (spread over its difficulties), sorted: what a character vocabulary needs (characters
    the sample misses become its unknown token)."""
    per_level = max(1, _VOCABULARY_SAMPLE // (task.max_difficulty + 1))
    rng = random.Random(f"{task.name}/vocabulary")
    seen = set(task.alphabet)
    for difficulty in range(task.max_difficulty + 1):
        for _ in range(per_level):
            example = task.example(rng, difficulty)
            seen.update(example.prompt, example.answer or "")
    return "".join(sorted(seen))
