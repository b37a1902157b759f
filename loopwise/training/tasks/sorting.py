"""Sort a short list of small non-negative integers in ascending order.

``"3,1,2="`` is answered ``"1,2,3"``; ``"40,7,40,12="`` is answered ``"7,12,40,40"`` (repeats are
kept). Values are uniform in [0, largest]; the list length is uniform in [shortest, longest].

Difficulty (see ``_LEVELS``, ``(shortest, longest, largest)``): 0: 3 digits; 1: 3-4 digits;
2: 4-5 digits; 3: 4-5 numbers up to 99; 4: 5-6 up to 99; 5: 6-8 up to 99; 6: 8-10 up to 999.

Score: 1.0 for exactly the reference answer; 0.1 for a well-formed wrong answer (comma-separated
ASCII-digit numbers, as many as the prompt has), which mirrors Countdown's format reward; 0 otherwise.
"""

from __future__ import annotations

import random
import re

from loopwise.training.tasks import Example, Task

_LEVELS = ((3, 3, 9), (3, 4, 9), (4, 5, 9), (4, 5, 99), (5, 6, 99), (6, 8, 99), (8, 10, 999))
_LIST = re.compile(r"[0-9]+(?:,[0-9]+)*")  # [0-9], not \d, which also matches non-ASCII digits
FORMAT_REWARD = 0.1


class SortingTask(Task):
    """``"a,b,c="`` answered with the same numbers in ascending order, comma-separated."""

    name = "sorting"
    alphabet = "0123456789,="
    max_difficulty = len(_LEVELS) - 1

    def example(self, rng: random.Random, difficulty: int) -> Example:
        shortest, longest, largest = _LEVELS[self.check_difficulty(difficulty)]
        numbers = [rng.randint(0, largest) for _ in range(rng.randint(shortest, longest))]
        return Example(prompt=",".join(map(str, numbers)) + "=",
                       answer=",".join(map(str, sorted(numbers))),
                       meta={"numbers": numbers})

    def score(self, example: Example, completion: str) -> float:
        if completion == example.answer:
            return 1.0
        well_formed = _LIST.fullmatch(completion) is not None and \
            completion.count(",") == example.answer.count(",")
        return FORMAT_REWARD if well_formed else 0.0

    def max_answer_length(self, difficulty: int) -> int:
        _, longest, largest = _LEVELS[self.check_difficulty(difficulty)]
        return longest * len(str(largest)) + longest - 1
