"""Multi-digit addition, and subtraction from difficulty 2, with the answer's digits reversed.

The prompt is written normally and the answer least-significant digit first: ``"12+39="`` is
answered ``"15"`` (51 reversed), ``"100-1="`` is answered ``"99"``, ``"60+40="`` is answered
``"001"``. Reversed output lets a left-to-right model emit each digit after the digits it depends on
(the carry), which is what lets small transformers learn addition from scratch (Lee et al.,
"Teaching Arithmetic to Small Transformers", arXiv 2307.03381). Subtraction always puts the larger
operand first, so answers are never negative.

Difficulty sets the operands' largest digit count and the operators (see ``_LEVELS``): 0: 2 digits,
``+``; 1: 3, ``+``; 2: 3, ``+ -``; 3: 4; 4: 5; 5: 6; 6: 8 digits, ``+ -``.
Each operand's digit count is uniform in [1, digits], so short operands stay in the mix.

Score: 1.0 for exactly the reference answer; 0.1 for a well-formed wrong answer (ASCII digits only,
as long as the reference), which mirrors Countdown's format reward; 0 otherwise.
"""

from __future__ import annotations

import random

from loopwise.training.tasks import Example, Task

_DIGITS = frozenset("0123456789")
_LEVELS = ((2, "+"), (3, "+"), (3, "+-"), (4, "+-"), (5, "+-"), (6, "+-"), (8, "+-"))  # (digits, operators)
FORMAT_REWARD = 0.1


class ArithmeticTask(Task):
    """``a+b=`` / ``a-b=`` answered with the result's digits reversed (or plain, with ``reverse=False``).

    Args:
        reverse: Write the answer least-significant digit first (the default, and the point).
    """

    name = "arithmetic"
    alphabet = "0123456789+-="
    max_difficulty = len(_LEVELS) - 1
    chat_knobs = {"reverse": False}  # ``chat:arithmetic``: a chat model writes numbers in the usual order

    def __init__(self, reverse: bool = True) -> None:
        self.reverse = bool(reverse)

    def example(self, rng: random.Random, difficulty: int) -> Example:
        digits, operators = _LEVELS[self.check_difficulty(difficulty)]
        a, b = _operand(rng, digits), _operand(rng, digits)
        op = rng.choice(operators)
        if op == "-":
            a, b = max(a, b), min(a, b)
        result = a + b if op == "+" else a - b
        answer = str(result)[::-1] if self.reverse else str(result)
        return Example(prompt=f"{a}{op}{b}=", answer=answer,
                       meta={"a": a, "b": b, "op": op, "result": result, "reversed": self.reverse})

    def score(self, example: Example, completion: str) -> float:
        if completion == example.answer:
            return 1.0
        well_formed = len(completion) == len(example.answer) and set(completion) <= _DIGITS
        return FORMAT_REWARD if well_formed else 0.0

    def question(self, example: Example) -> str:
        """The example asked in words (what ``chat:arithmetic`` prompts a chat model with)."""
        m = example.meta
        order = " Write its digits in reverse order." if m["reversed"] else ""
        return f"What is {m['a']} {m['op']} {m['b']}? Answer with the number only.{order}"

    def max_answer_length(self, difficulty: int) -> int:
        digits, _ = _LEVELS[self.check_difficulty(difficulty)]
        return digits + 1  # a carry out of the top digit


def _operand(rng: random.Random, max_digits: int) -> int:
    """A number whose digit count is uniform in [1, max_digits] (one digit: 0-9)."""
    digits = rng.randint(1, max_digits)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return rng.randint(low, 10**digits - 1)
