"""``rg:<dataset>``: any reasoning-gym dataset as a task, as reasoning-gym gives it.

The prompt is the dataset's ``question``, the reference its ``answer`` (``None`` where the dataset
has none: those tasks are verifier-only), and the reward its own ``score_answer(completion, entry)``,
partial credit included, clipped to [0, 1] (a verifier that raises scores 0).

Difficulty. Where reasoning-gym registers a curriculum for the dataset, difficulty ``d`` is the
curriculum's global level ``d`` (every attribute at level ``min(d, its last level)``, ranges
cumulative from level 0, reasoning-gym's default context); ``max_difficulty`` is the last level of
the attribute with the most, or the level below the first one reasoning-gym cannot build (a few
curricula step past their own dataset's limits, e.g. a Caesar rotation above 25). Without a curriculum the task has one fixed difficulty, 0: the
dataset's default configuration (the task's :attr:`description` says so).

Items. Example ``i`` of a difficulty is item ``i`` of a dataset of :data:`SIZE` items built with
seed 0 (reasoning-gym seeds item ``i`` from the dataset's seed and ``i``); a few datasets generate
every item up front, which bounds the size, and a dataset that refuses that many items (it cannot
make them distinct) is built with the first of :data:`SMALLER_SIZES` it accepts.
"""

from __future__ import annotations

import difflib
import random

from loopwise.errors import UserError
from loopwise.training.tasks import Example, Task, sampled_answer_length

SIZE = 2**15
SMALLER_SIZES = (2**12, 2**9)  # tried in turn when reasoning-gym refuses SIZE items
PREFIX = "rg:"
LIST_HINT = "see the names with: loopwise training tasks"
INSTALL_HINT = "reasoning-gym is not installed: pip install 'loopwise[training]' (or pip install reasoning-gym)"


def dataset_names() -> list[str]:
    """Every dataset reasoning-gym registers (it must be installed)."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


class ReasoningGymDataset(Task):
    """The reasoning-gym dataset ``source`` as a task named ``rg:<source>``.

    Raises:
        UserError: reasoning-gym is missing, the name is unknown (near misses named), or
            reasoning-gym cannot build the dataset from its defaults.
    """

    def __init__(self, source: str) -> None:
        try:
            from reasoning_gym import factory
        except ImportError:
            raise UserError(INSTALL_HINT) from None
        if source not in factory.DATASETS:
            near = difflib.get_close_matches(source, factory.DATASETS, n=3)
            maybe = f" (did you mean {', '.join(PREFIX + n for n in near)}?)" if near else ""
            raise UserError(f"unknown reasoning-gym dataset {source!r}{maybe}; {LIST_HINT}")
        self.source, self.name = source, PREFIX + source
        self._factory = factory
        self._curriculum = factory.create_curriculum(source) if factory.has_curriculum(source) else None
        levels = [len(a.levels) for a in self._curriculum.attributes.values()] if self._curriculum else []
        self.max_difficulty = max(levels, default=1) - 1
        self._datasets: dict[int, object] = {}
        self._lengths: dict[int, int] = {}
        self._dataset(0)  # a dataset reasoning-gym cannot build fails here, not mid-run
        self.max_difficulty = self._last_buildable_level()

    def _last_buildable_level(self) -> int:
        """The level below the first one whose configuration reasoning-gym's own dataset refuses
        (some curricula step past their dataset's limits), else the curriculum's last."""
        for level in range(1, self.max_difficulty + 1):
            try:
                self._dataset(level)
            except UserError:
                return level - 1
        return self.max_difficulty

    @property
    def description(self) -> str:
        hardness = (f"difficulty 0..{self.max_difficulty} = the levels of reasoning-gym's curriculum"
                    if self._curriculum else "one fixed difficulty (0): the dataset's default configuration")
        return (f"reasoning-gym's {self.source}: its questions, answers and score_answer (partial credit "
                f"included); {hardness}.")

    def example(self, rng: random.Random, difficulty: int) -> Example:
        dataset = self._dataset(difficulty)
        index = rng.randrange(len(dataset))
        entry = dataset[index]
        return Example(prompt=entry["question"], answer=entry["answer"],
                       meta={"source": self.source, "difficulty": difficulty, "index": index, "entry": entry})

    def score(self, example: Example, completion: str) -> float:
        dataset = self._dataset(example.meta["difficulty"])
        try:
            value = float(dataset.score_answer(completion, example.meta["entry"]))
        except Exception:  # noqa: BLE001 - a verifier that fails on a completion pays nothing for it
            return 0.0
        return min(1.0, max(0.0, value)) if value == value else 0.0

    def max_answer_length(self, difficulty: int) -> int:
        self.check_difficulty(difficulty)
        if difficulty not in self._lengths:
            self._lengths[difficulty] = sampled_answer_length(self, difficulty)
        return self._lengths[difficulty]

    def _dataset(self, difficulty: int):
        self.check_difficulty(difficulty)
        if difficulty not in self._datasets:
            refusal = None
            for size in (SIZE, *SMALLER_SIZES):
                try:
                    self._datasets[difficulty] = self._build(difficulty, size)
                    break
                except Exception as exc:  # noqa: BLE001 - reasoning-gym raises many kinds for a config it refuses
                    refusal = refusal or exc
            else:
                reason = (str(refusal).strip().splitlines() or [""])[0][:160]
                raise UserError(f"{self.name}: reasoning-gym cannot build it at difficulty {difficulty} "
                                f"({type(refusal).__name__}: {reason})")
        return self._datasets[difficulty]

    def _build(self, difficulty: int, size: int):
        """reasoning-gym's dataset of ``size`` items at ``difficulty`` (raises what it raises)."""
        if self._curriculum is None:
            return self._factory.create_dataset(self.source, seed=0, size=size)
        self._curriculum.set_global_level(difficulty)
        config = self._curriculum.generate_configuration({"seed": 0, "size": size})
        if hasattr(config, "validate"):
            config.validate()
        return self._factory.DATASETS[self.source][0](config=config)
