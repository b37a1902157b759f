"""Stand-in judges for tests of the optimize loop: the whole judge interface, made-up verdicts."""

from __future__ import annotations


class StandInJudge:
    """A judge that runs nothing: a subclass says what ``evaluate`` returns. It stands for a judge
    on this machine's CPU and builds nothing ahead of judging."""

    device = "cpu"
    device_name = "cpu"

    def evaluate(self, source: str, name: str = "<candidate>"):
        raise NotImplementedError("a stand-in judge says what its verdicts are")

    def evaluate_many(self, items: list[tuple[str, str]]) -> list:
        return [self.evaluate(source, name) for source, name in items]

    def precompile(self, sources: list[str]) -> int:
        return 0  # nothing to build: the verdicts are made up

    def reference_facts(self, compile: bool = False) -> dict:
        from loopwise.kernels.evaluate.reference_facts import unknown

        return unknown(self.device_name, "a stand-in judge measures nothing")

    def close(self) -> None:
        pass
