"""reasoning-gym's ``chain_sum`` (sums and differences of integers) as a character-level task.

reasoning-gym (PyPI ``reasoning-gym``, arXiv 2505.24760) generates the problems and checks the
answers; this adapter only shortens its English question to the bare expression, so that a tiny
character model can read it: ``"State the final answer to the following arithmetic problem:
57 + 87 - 70 ="`` becomes the prompt ``"57+87-70="``, answered ``"74"`` (plain digit order, a leading
``-`` when negative, as reasoning-gym writes it). reasoning-gym is imported when the task is built;
without it, building the task raises :class:`~loopwise.errors.UserError`.

Score: 1.0 when reasoning-gym's ``score_answer`` gives 1.0 to a completion that is a signed ASCII
integer (it accepts leading zeros, ``"-0"`` for 0, ...); 0.1 for a wrong signed integer as long as
the reference (the format reward of the other tasks); 0 otherwise. reasoning-gym's own partial
credit (``len(answer) / len(completion)`` when the answer is a substring of the completion) is not
passed on: a policy would collect it by padding with digits.

Difficulty (see ``_LEVELS``, ``(min terms, max terms, min digits, max digits)``): 0: 2 one-digit
terms; 1: 2-3 terms; 2: 2-3 terms of 1-2 digits; 3: 2-4 terms; 4: 2-4 terms of 1-3 digits;
5: 2-6 terms of 1-4 digits (reasoning-gym's default).
"""

from __future__ import annotations

import json
import random
import re

from loopwise.errors import UserError
from loopwise.training.tasks import Example, Task

_LEVELS = ((2, 2, 1, 1), (2, 3, 1, 1), (2, 3, 1, 2), (2, 4, 1, 2), (2, 4, 1, 3), (2, 6, 1, 4))
_SIGNED_INTEGER = re.compile(r"-?[0-9]+")
_INDEX_RANGE = 2**31  # reasoning-gym seeds item i with Random(seed + i)
FORMAT_REWARD = 0.1
INSTALL_HINT = "reasoning-gym is not installed: pip install 'loopwise[training]' (or pip install reasoning-gym==0.1.25)"


class ChainSumTask(Task):
    """reasoning-gym's ``chain_sum``, prompted as ``"a+b-c="``.

    Raises:
        UserError: reasoning-gym is not installed.
    """

    name = "rg_chain_sum"
    alphabet = "0123456789+-="
    max_difficulty = len(_LEVELS) - 1
    source = "chain_sum"  # the reasoning-gym dataset

    def __init__(self) -> None:
        try:
            import reasoning_gym
        except ImportError:
            raise UserError(INSTALL_HINT) from None
        self._reasoning_gym = reasoning_gym
        self._datasets: dict[int, object] = {}  # difficulty -> reasoning-gym dataset

    def example(self, rng: random.Random, difficulty: int) -> Example:
        index = rng.randrange(_INDEX_RANGE)
        entry = self._dataset(difficulty)[index]
        prompt = entry["metadata"]["expression"].replace(" ", "") + "="
        # the entry is what score_answer reads; round-trip it so meta is plain JSON (tuples -> lists)
        return Example(prompt=prompt, answer=entry["answer"],
                       meta={"source": self.source, "index": index, "entry": json.loads(json.dumps(entry))})

    def score(self, example: Example, completion: str) -> float:
        if _SIGNED_INTEGER.fullmatch(completion) is None:
            return 0.0
        dataset = self._dataset(0)  # chain_sum's score_answer reads only the entry, not the config
        if dataset.score_answer(completion, example.meta["entry"]) == 1.0:
            return 1.0
        return FORMAT_REWARD if len(completion) == len(example.answer) else 0.0

    def max_answer_length(self, difficulty: int) -> int:
        _, max_terms, _, max_digits = _LEVELS[self.check_difficulty(difficulty)]
        largest = 10**max_digits - 1
        # all terms added, or everything after the first subtracted
        return max(len(str(max_terms * largest)), 1 + len(str((max_terms - 1) * largest)))

    def _dataset(self, difficulty: int):
        self.check_difficulty(difficulty)
        if difficulty not in self._datasets:
            min_terms, max_terms, min_digits, max_digits = _LEVELS[difficulty]
            self._datasets[difficulty] = self._reasoning_gym.create_dataset(
                self.source, seed=0, size=_INDEX_RANGE, min_terms=min_terms, max_terms=max_terms,
                min_digits=min_digits, max_digits=max_digits)
        return self._datasets[difficulty]
