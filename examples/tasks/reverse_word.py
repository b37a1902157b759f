"""A task of your own for `loopwise training search`: write a short word backwards.

    loopwise training search examples/tasks/reverse_word.py --preset smoke

A task is a class with two methods, the prompt generator `example` and the verifier `score`;
`name`, `max_difficulty` and `max_answer_length` are optional. It needs no import from loopwise.
Leave "answer" out when you have no reference: the warm start then learns from the policy's own
samples that `score` accepts (1.0), and says so plainly when it finds none.
"""

import random

LETTERS = "abcde"


class ReverseWord:
    """Write the word after the colon backwards."""

    name = "reverse_word"
    max_difficulty = 2  # difficulty d: words of 2..3+d letters

    def example(self, rng: random.Random, difficulty: int) -> dict:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 3 + difficulty)))
        return {"prompt": f"reverse:{word}=", "answer": word[::-1], "word": word}

    def score(self, example, completion: str) -> float:
        word = example.meta["word"]
        if completion == word[::-1]:
            return 1.0
        return 0.1 if sorted(completion) == sorted(word) else 0.0  # the right letters, wrong order

    def max_answer_length(self, difficulty: int) -> int:
        return 3 + difficulty
