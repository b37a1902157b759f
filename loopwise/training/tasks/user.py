"""A user's task: a prompt generator and a verifier in a Python file or an installed package.

The interface (``examples/tasks/reverse_word.py`` is a complete one)::

    class MyTask:
        name = "my_task"          # optional (default: the class name); seeds the task's data
        max_difficulty = 0        # optional: difficulties run 0..max_difficulty

        def example(self, rng, difficulty):
            # the prompt generator: a random.Random and a difficulty in, one problem out, as
            # {"prompt": str, "answer": str (optional), any other keys: metadata}, or a bare prompt str
            ...

        def score(self, example, completion):
            # the verifier: example.prompt / .answer (None if not given) / .meta, and the policy's
            # completion (any text); returns a number in [0, 1] and never raises
            ...

        def max_answer_length(self, difficulty):  # optional: a completion bound, in characters
            ...

A subclass of :class:`~loopwise.training.tasks.Task` works as is. Tasks without answers are
verifier-only: the warm start learns from the policy's own samples the verifier accepts.

Naming it: ``path/to/file.py`` (the file's one class with ``example`` and ``score``),
``path/to/file.py:Name`` (a class, built with no arguments, or an instance), or an entry point in
the group ``loopwise.tasks`` (``[project.entry-points."loopwise.tasks"] my_task = "pkg.mod:MyTask"``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import inspect
import math
import random
import sys
from collections.abc import Mapping
from pathlib import Path

from loopwise.errors import UserError
from loopwise.training.tasks import Example, Task, sampled_answer_length

GROUP = "loopwise.tasks"
REQUIRED = ("example", "score")


class UserTask(Task):
    """A user's object with ``example`` and ``score`` behind the :class:`Task` interface: checks
    what they return and turns their mistakes into one-line errors."""

    def __init__(self, impl: object, origin: str) -> None:
        missing = [m for m in REQUIRED if not callable(getattr(impl, m, None))]
        if missing:
            raise UserError(f"task {origin}: {type(impl).__name__} lacks {' and '.join(m + '()' for m in missing)} "
                            "(a task needs example(rng, difficulty) and score(example, completion))")
        self.impl, self.origin = impl, origin
        self.name = str(getattr(impl, "name", None) or type(impl).__name__)
        self.max_difficulty = getattr(impl, "max_difficulty", 0)
        if not isinstance(self.max_difficulty, int) or isinstance(self.max_difficulty, bool) or self.max_difficulty < 0:
            raise UserError(f"task {origin}: max_difficulty must be an integer >= 0, got {self.max_difficulty!r}")
        self._lengths: dict[int, int] = {}
        self.example(random.Random(0), 0)  # a generator that returns the wrong thing fails now

    @property
    def description(self) -> str:
        doc = (inspect.getdoc(type(self.impl)) or "").strip()
        return f"{self.name} (from {self.origin})" + (f": {doc.splitlines()[0]}" if doc else "")

    def example(self, rng: random.Random, difficulty: int) -> Example:
        self.check_difficulty(difficulty)
        out = self._call("example", rng, difficulty)
        if isinstance(out, Example):
            example = out
        elif isinstance(out, str):
            example = Example(prompt=out, answer=None, meta={})
        elif isinstance(out, Mapping) and isinstance(out.get("prompt"), str):
            meta = {k: v for k, v in out.items() if k not in ("prompt", "answer")}
            example = Example(prompt=out["prompt"], answer=out.get("answer"), meta=meta)
        else:
            raise UserError(f"task {self.name}: example() must return a prompt str or a dict with a 'prompt' str, "
                            f"got {type(out).__name__}")
        if not example.prompt or not (example.answer is None or isinstance(example.answer, str)):
            raise UserError(f"task {self.name}: example() gave an empty prompt or an answer that is not a str")
        return example

    def score(self, example: Example, completion: str) -> float:
        value = self._call("score", example, completion)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 0 <= value <= 1:
            raise UserError(f"task {self.name}: score() must return a number in [0, 1], got {value!r} "
                            f"for the completion {completion[:40]!r}")
        return float(value)

    def max_answer_length(self, difficulty: int) -> int:
        self.check_difficulty(difficulty)
        if difficulty not in self._lengths:
            bound = getattr(self.impl, "max_answer_length", None)
            length = self._call("max_answer_length", difficulty) if callable(bound) else \
                sampled_answer_length(self, difficulty)
            if isinstance(length, bool) or not isinstance(length, int) or length < 1:
                raise UserError(f"task {self.name}: max_answer_length() must be an integer >= 1, got {length!r}")
            self._lengths[difficulty] = length
        return self._lengths[difficulty]

    def _call(self, method: str, *args):
        try:
            return getattr(self.impl, method)(*args)
        except UserError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's code: any failure is theirs, said in one line
            reason = (str(exc).strip().splitlines() or [""])[0][:160]
            raise UserError(f"task {self.name}: {method}() raised {type(exc).__name__}: {reason}") from None


def is_file_spec(name: str) -> bool:
    """Whether ``name`` names a Python file (``x.py`` or ``x.py:Name``)."""
    return name.endswith(".py") or ".py:" in name


def load_file(spec: str) -> Task:
    """The task in ``path.py`` (its one class with ``example`` and ``score``) or ``path.py:Name``."""
    path_text, _, attr = spec.partition(".py:") if ".py:" in spec else (spec[:-3], "", "")
    path = Path(path_text + ".py")
    if not path.is_file():
        raise UserError(f"task file {path}: no such file")
    module_name = "loopwise_user_task_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module = sys.modules.get(module_name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[module_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's file: a syntax or import error is said in one line
            del sys.modules[module_name]
            reason = (str(exc).strip().splitlines() or [""])[0][:160]
            raise UserError(f"task file {path}: cannot import it ({type(exc).__name__}: {reason})") from None
    if attr:
        if not hasattr(module, attr):
            raise UserError(f"task file {path}: defines no {attr!r}")
        return _build(getattr(module, attr), f"{path}:{attr}")
    found = [obj for obj in vars(module).values() if inspect.isclass(obj) and obj.__module__ == module_name
             and all(callable(getattr(obj, m, None)) for m in REQUIRED) and not inspect.isabstract(obj)]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise UserError(f"task file {path}: needs exactly one class with example() and score(), found {names}; "
                        f"name one as {path}:ClassName")
    return _build(found[0], f"{path}:{found[0].__name__}")


def load_entry_point(name: str) -> Task | None:
    """The task an installed package registers as ``name`` in :data:`GROUP`; None if none does."""
    points = [ep for ep in importlib.metadata.entry_points(group=GROUP) if ep.name == name]
    if not points:
        return None
    try:
        obj = points[0].load()
    except Exception as exc:  # noqa: BLE001 - a broken package is said in one line
        reason = (str(exc).strip().splitlines() or [""])[0][:160]
        raise UserError(f"task {name!r} (entry point {points[0].value}): cannot load it "
                        f"({type(exc).__name__}: {reason})") from None
    return _build(obj, f"entry point {name}")


def entry_point_names() -> list[str]:
    """The task names installed packages register in :data:`GROUP`."""
    return sorted({ep.name for ep in importlib.metadata.entry_points(group=GROUP)})


def _build(obj: object, origin: str) -> Task:
    if inspect.isclass(obj):
        try:
            obj = obj()
        except Exception as exc:  # noqa: BLE001 - the user's constructor
            reason = (str(exc).strip().splitlines() or [""])[0][:160]
            raise UserError(f"task {origin}: cannot build it with no arguments ({type(exc).__name__}: {reason})") \
                from None
    if isinstance(obj, Task):
        return obj
    return UserTask(obj, origin)
