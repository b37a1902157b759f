"""``chat:TASK``: a task asked in words to a chat model, which answers in a sentence.

A chat model answers "What is 17 + 25?" with "17 + 25 = 42." rather than with the bare ``42`` a
small model trained from scratch learns to write. This adapter keeps the inner task's examples,
splits, difficulties and verifier and changes two things:

- the prompt is the inner task's :meth:`question` when it has one (arithmetic asks "What is
  17 + 25? Answer with the number only."), else its prompt as it is (reasoning-gym's questions
  are written for people already). The policy's chat template wraps it
  (:class:`~loopwise.training.hf_policy.HFVocab`).
- the verifier reads the completion's *final number* when the reference answer is a number (the
  usual rule for math answers written in prose, as GSM8K's graders read them) and the whole
  completion, stripped, otherwise; a task without reference answers gets the completion as it is.

The inner task is built with its :attr:`chat_knobs` (arithmetic: digits in the usual order, not
reversed). Completions get :data:`CHAT_ROOM` more characters than the inner task's bound, room
for the model's restating the question.
"""

from __future__ import annotations

import random
import re

from loopwise.errors import UserError
from loopwise.training.tasks import Example, Task

PREFIX = "chat:"
CHAT_ROOM = 24
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_LAST_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def final_number(text: str) -> str | None:
    """The last number written in ``text`` (thousands separators dropped), or None."""
    found = _LAST_NUMBER.findall(text)
    return found[-1].replace(",", "").rstrip(".") if found else None


class ChatTask(Task):
    """``inner`` asked in words, its answer read off the completion's final number."""

    def __init__(self, inner: Task) -> None:
        self.inner = inner
        self.name = PREFIX + inner.name
        self.max_difficulty = inner.max_difficulty

    @property
    def description(self) -> str:
        return f"{self.inner.description} (asked in words to a chat model; its final number is its answer)"

    def example(self, rng: random.Random, difficulty: int) -> Example:
        e = self.inner.example(rng, difficulty)
        ask = getattr(self.inner, "question", None)
        prompt = ask(e) if ask is not None else e.prompt
        return Example(prompt=prompt, answer=e.answer, meta={**e.meta, "inner_prompt": e.prompt})

    def score(self, example: Example, completion: str) -> float:
        inner = Example(example.meta["inner_prompt"], example.answer,
                        {k: v for k, v in example.meta.items() if k != "inner_prompt"})
        if example.answer is None:
            return self.inner.score(inner, completion)
        if _NUMBER.fullmatch(example.answer.strip()):
            number = final_number(completion)
            return self.inner.score(inner, number) if number is not None else 0.0
        return self.inner.score(inner, completion.strip())

    def max_answer_length(self, difficulty: int) -> int:
        return self.inner.max_answer_length(difficulty) + CHAT_ROOM


def chat_task(name: str) -> ChatTask:
    """``chat:NAME``: the task ``NAME`` (any name :func:`~loopwise.training.tasks.get_task` takes)
    with its ``chat_knobs``, asked in words."""
    from loopwise.training.tasks import get_task

    inner_name = name[len(PREFIX):]
    if not inner_name:
        raise UserError("chat: names no task; e.g. chat:arithmetic or chat:rg:leg_counting")
    inner = get_task(inner_name)
    knobs = getattr(inner, "chat_knobs", None)
    return ChatTask(get_task(inner_name, **knobs) if knobs else inner)
