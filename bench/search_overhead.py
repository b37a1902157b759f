"""Time per ask + add_child + tell iteration of a search as its tree grows to 10,000 nodes.

The proposer is trivial (one child per ask, speedup = parent's times a log-normal step, 10%
failures), so the numbers are the search's own overhead. Run::

    .venv/bin/python bench/search_overhead.py [--nodes 10000] [--strategy MCTS]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from loopwise.core.search import MCTS, Beam, BestOfN, Greedy, Outcome, RandomSearch, Search

_STRATEGIES = {"MCTS": MCTS, "Greedy": Greedy, "Beam": Beam, "RandomSearch": RandomSearch,
               "BestOfN": BestOfN}
_FAILURES = ("compile_error", "wrong_output", "timeout", "crash", "oom")


def grow(search: Search, nodes: int, seed: int) -> list[float]:
    """Grows the tree to ``nodes`` nodes; returns the seconds of each iteration."""
    rng = random.Random(seed)
    search.add_root("root")
    times = []
    while len(search) < nodes:
        start = time.perf_counter()
        ask = search.ask()
        if ask is None:
            break
        child = search.add_child(ask.node_id, f"n{len(search)}", note=f"move{rng.randrange(20)}")
        if rng.random() < 0.1:
            outcome = Outcome(rng.choice(_FAILURES))
        else:
            outcome = Outcome("correct", ask.node.value * rng.lognormvariate(0.0, 0.1))
        search.tell(child, outcome)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--strategy", choices=sorted(_STRATEGIES), default="MCTS")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    search = _STRATEGIES[args.strategy](seed=args.seed)
    times = grow(search, args.nodes, args.seed)
    tail = times[-1000:]
    ms = 1e3
    print(f"{args.strategy}: {len(search)} nodes, {len(times)} iterations, "
          f"max depth {max(n.depth for n in search.nodes())}, best x{search.best().value:.3g}")
    print(f"all iterations:  mean {statistics.mean(times) * ms:.3f} ms, "
          f"median {statistics.median(times) * ms:.3f} ms")
    print(f"last 1000 (at ~{len(search)} nodes): mean {statistics.mean(tail) * ms:.3f} ms, "
          f"median {statistics.median(tail) * ms:.3f} ms, max {max(tail) * ms:.3f} ms")
    start = time.perf_counter()
    Search.from_state_dict(search.state_dict())
    print(f"rebuild from state_dict (replay): {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
