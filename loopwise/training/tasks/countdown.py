"""Countdown: combine the given numbers with + - * / and parentheses to reach the target.

The prompt lists the numbers, then the target: ``"3,5,7:22="``; a correct completion is
``"3*5+7"`` (or ``"7+5*3"``, ...). Every example is built from a random expression over its numbers,
so a solution always exists, and that expression is the reference answer.

Rules the verifier enforces:

* each given number is used exactly once (``use_all=False``: at most once), written as given: no
  joining digits into new numbers, no leading zeros;
* binary ``+ - * /`` with the usual precedence, left to right, and parentheses (at most 32 deep);
  no unary minus, no spaces;
* exact rational arithmetic (:class:`fractions.Fraction`): ``7/2*2`` is 7, and intermediate values
  may be fractions or negative; a division by zero makes the expression illegal.

The reference answers are stricter: every intermediate value is a positive integer (the classic
game's rule) no larger than the largest target, and they use only the operators of their difficulty.

Reward, after TinyZero (``Jiayi-Pan/TinyZero verl/utils/reward_score/countdown.py``): 1.0 for a legal
expression equal to the target, 0.1 for a legal expression with another value, 0 for anything else.
TinyZero's format check is an ``<answer>`` tag, and it pays 0.1 even for wrong numbers; here the
game's rules are the format, so the 0.1 cannot be collected by writing any number.

Difficulty (see ``_LEVELS``, ``(numbers, largest number, largest target, operators)``):
0: 2 numbers 1-9, targets up to 99, ``+ - *``; 1: 3 numbers; 2: 3 numbers, ``+ - * /``; 3: 4 numbers;
4: 4 numbers 1-20, targets up to 199; 5: 5 numbers 1-25, up to 499; 6: 6 numbers 1-100, up to 999
(reasoning-gym's default, which is too hard for tiny models).
"""

from __future__ import annotations

import random
from collections import Counter
from fractions import Fraction

from loopwise.training.tasks import Example, Task

_LEVELS = ((2, 9, 99, "+-*"), (3, 9, 99, "+-*"), (3, 9, 99, "+-*/"), (4, 9, 99, "+-*/"),
           (4, 20, 199, "+-*/"), (5, 25, 499, "+-*/"), (6, 100, 999, "+-*/"))
_DIGITS = frozenset("0123456789")
_OPERATORS = frozenset("+-*/()")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}
_MAX_DEPTH = 32  # parentheses; deeper nesting would exhaust the recursive parser's stack
_MAX_NUMERAL = 9  # digits; longer numerals are never a given number, and int() of huge ones is slow
_TRIES = 100  # random expressions per example before falling back to the sum
FORMAT_REWARD = 0.1

Tree = int | tuple[str, "Tree", "Tree"]


class CountdownTask(Task):
    """Reach ``target`` with the given numbers, each exactly once (or at most once).

    Args:
        use_all: Each number must be used exactly once (the default, as in TinyZero and the
            classic game) rather than at most once.
    """

    name = "countdown"
    alphabet = "0123456789+-*/(),:="
    max_difficulty = len(_LEVELS) - 1

    def __init__(self, use_all: bool = True) -> None:
        self.use_all = bool(use_all)

    def example(self, rng: random.Random, difficulty: int) -> Example:
        count, largest, max_target, operators = _LEVELS[self.check_difficulty(difficulty)]
        numbers = [rng.randint(1, largest) for _ in range(count)]
        tree, target = _solution(rng, numbers, operators, max_target)
        return Example(prompt=f"{','.join(map(str, numbers))}:{target}=", answer=_render(tree),
                       meta={"numbers": numbers, "target": target})

    def score(self, example: Example, completion: str) -> float:
        tokens = _tokenize(completion)
        if tokens is None or not self._uses_numbers(tokens, example.meta["numbers"]):
            return 0.0
        value = _parse(tokens)
        if value is None:
            return 0.0
        return 1.0 if value == example.meta["target"] else FORMAT_REWARD

    def max_answer_length(self, difficulty: int) -> int:
        count, largest, _, _ = _LEVELS[self.check_difficulty(difficulty)]
        # numerals, operators, and a pair of parentheses around each non-root operation; a correct
        # completion may be longer (redundant parentheses), so a trainer should leave some room
        return count * len(str(largest)) + (count - 1) + 2 * max(count - 2, 0)

    def _uses_numbers(self, tokens: list[str], numbers: list[int]) -> bool:
        used = Counter(t for t in tokens if t[0] in _DIGITS)
        given = Counter(map(str, numbers))
        return used == given if self.use_all else used <= given


def evaluate(expression: str) -> Fraction | None:
    """The exact value of an integer expression over + - * / and parentheses.

    None when it is not well formed (the rules in the module docstring, without the ones on which
    numbers to use) or divides by zero. Never raises.
    """
    tokens = _tokenize(expression)
    return None if tokens is None else _parse(tokens)


def _tokenize(text: str) -> list[str] | None:
    """Numerals and single-character operators; None at any other character or an overlong numeral."""
    tokens: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in _OPERATORS:
            tokens.append(text[i])
            i += 1
        elif text[i] in _DIGITS:
            j = i
            while j < len(text) and text[j] in _DIGITS:
                j += 1
            if j - i > _MAX_NUMERAL:
                return None
            tokens.append(text[i:j])
            i = j
        else:
            return None
    return tokens


class _Illegal(Exception):
    """The tokens are not an expression, or it divides by zero."""


def _parse(tokens: list[str]) -> Fraction | None:
    parser = _Parser(tokens)
    try:
        value = parser.expression()
    except _Illegal:
        return None
    return value if parser.at_end() else None


class _Parser:
    """Recursive descent: expression := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := numeral | '(' expression ')'."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens, self.position, self.depth = tokens, 0, 0

    def at_end(self) -> bool:
        return self.position == len(self.tokens)

    def _peek(self) -> str | None:
        return None if self.at_end() else self.tokens[self.position]

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise _Illegal("the expression ends early")
        self.position += 1
        return token

    def expression(self) -> Fraction:
        value = self._term()
        while self._peek() in ("+", "-"):
            operator, right = self._take(), self._term()
            value = value + right if operator == "+" else value - right
        return value

    def _term(self) -> Fraction:
        value = self._factor()
        while self._peek() in ("*", "/"):
            operator, right = self._take(), self._factor()
            if operator == "/" and right == 0:
                raise _Illegal("division by zero")
            value = value * right if operator == "*" else value / right
        return value

    def _factor(self) -> Fraction:
        token = self._take()
        if token[0] in _DIGITS:
            return Fraction(int(token))
        if token != "(" or self.depth == _MAX_DEPTH:
            raise _Illegal(f"unexpected {token!r}")
        self.depth += 1
        value = self.expression()
        if self._take() != ")":
            raise _Illegal("unclosed parenthesis")
        self.depth -= 1
        return value


def _solution(rng: random.Random, numbers: list[int], operators: str, max_target: int) -> tuple[Tree, int]:
    """A random expression using every number once, whose intermediate values are positive integers
    up to ``max_target``, and its value; the plain sum when random tries find none."""
    for _ in range(_TRIES):
        found = _random_expression(rng, rng.sample(numbers, len(numbers)), operators, max_target)
        if found is not None:
            return found
    tree: Tree = numbers[0]
    for number in numbers[1:]:
        tree = ("+", tree, number)
    return tree, sum(numbers)  # _LEVELS keeps count * largest <= max_target


def _random_expression(rng: random.Random, numbers: list[int], operators: str,
                       max_target: int) -> tuple[Tree, int] | None:
    """A random split of ``numbers`` into two expressions joined by an operator whose result stays a
    positive integer up to ``max_target`` (chosen among those that do), or None at a dead end."""
    if len(numbers) == 1:
        return numbers[0], numbers[0]
    cut = rng.randint(1, len(numbers) - 1)
    left = _random_expression(rng, numbers[:cut], operators, max_target)
    right = _random_expression(rng, numbers[cut:], operators, max_target)
    if left is None or right is None:
        return None
    if left[1] < right[1] or (left[1] == right[1] and rng.random() < 0.5):
        left, right = right, left  # larger first, so - and / can apply
    (left_tree, a), (right_tree, b) = left, right
    results = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if a % b == 0 else 0}
    allowed = [op for op in operators if 0 < results[op] <= max_target]
    if not allowed:
        return None
    operator = rng.choice(allowed)
    if operator in "+*" and rng.random() < 0.5:
        left_tree, right_tree = right_tree, left_tree  # either order reads the same
    return (operator, left_tree, right_tree), results[operator]


def _render(tree: Tree) -> str:
    """Infix with only the parentheses the precedence rules need."""
    if isinstance(tree, int):
        return str(tree)
    operator, left, right = tree
    left_text, right_text = _render(left), _render(right)
    if _precedence(left) < _PRECEDENCE[operator]:
        left_text = f"({left_text})"
    # a-(b-c) and a/(b/c) need them; a+(b-c) and a*(b/c) have the same exact value without
    if _precedence(right) < _PRECEDENCE[operator] or (_precedence(right) == _PRECEDENCE[operator] and operator in "-/"):
        right_text = f"({right_text})"
    return f"{left_text}{operator}{right_text}"


def _precedence(tree: Tree) -> int:
    return 3 if isinstance(tree, int) else _PRECEDENCE[tree[0]]
