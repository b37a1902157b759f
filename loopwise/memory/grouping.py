"""How the planner chooses (:mod:`loopwise.memory.planner`): the grouping's dynamic program, one
boundary at a time, and which candidate groups in slabs are worth sizing at all.

``planner`` is the planner (``_Planner``) in every function.
"""

from __future__ import annotations

from loopwise.memory.plan_records import Group

OBJECTIVES = ("traffic", "time")
CANNOT_BEAT = Group((), 0, 0, ())  # a group in slabs whose traffic cannot go below a bar (not sized)


def slab_group(planner, i, j, spec, extent, outer_extent, units, found, keep) -> bool:
    """Keeps group i..j-1 in slabs over ``spec`` (and its ways of meeting its neighbours) where
    it beats what ``found`` holds; False when no longer group of this chain can fit. A way
    whose traffic cannot go below the best found for its key (every invariant loaded once, every
    outer slab's loads made once) is not sized (:data:`CANNOT_BEAT`); the outcome is that of
    sizing every way."""
    def bar(carry=(0, 0)):
        if planner.objective != "traffic":
            return None
        # below the best of this search for the key, and below what reaches j through a group
        # found before (an earlier option of the grouping, which wins a tie)
        grp = found.get((j, *carry))
        bars = [grp.traffic_bytes] if grp is not None else []
        start = getattr(planner, "start", (0, float("inf")))[carry[0]]
        if start == float("inf"):
            return float("-inf")  # nothing reaches i that way: the grouping never uses it
        reached = getattr(planner, "reached", {}).get((j, carry[1]))
        if reached is not None:
            bars.append(reached - start)
        return min(bars) if bars else None

    def evaluate(carry=(0, 0), beaten=True):
        return planner.evaluate(i, j, spec, extent, outer_extent, *carry, units=units,
                             beat=bar(carry) if beaten else None)

    carries = planner._carries(i, j)[1:]
    grp = evaluate()
    if grp is CANNOT_BEAT:
        if planner._hopeless(i, j, units, extent, outer_extent):
            grp = evaluate(beaten=False)  # whether it fits decides whether the chain goes on
        else:
            ways = [(carry, evaluate(carry)) for carry in carries]
            ways = [(carry, g) for carry, g in ways if g is not None and g is not CANNOT_BEAT]
            # a way to meet the neighbours is kept only where the group fits at all
            if ways and evaluate(beaten=False) is not None:
                for carry, g in ways:
                    keep(j, g, carry)
            return True
    if grp is None:
        return not planner._hopeless(i, j, units, extent, outer_extent)
    keep(j, grp)
    for carry in carries:
        g = evaluate(carry)
        if g is not CANNOT_BEAT:
            keep(j, g, carry)
    return True


def close(planner, j: int, best, by_end) -> None:
    """best[j] from best[j - 1] and operator j - 1 alone, or every group ending at j (the
    first of equal options wins: the single, then groups by their first operator)."""
    single = planner.single(j - 1)
    options = {c: [] for c in range(len(best[j]))}
    choices = {c: [] for c in range(len(best[j]))}
    options[0].append(planner._plus(best[j - 1][0][0], planner.cost(single)))
    choices[0].append((best[j - 1][0], single))
    for i, cin, cout, grp in by_end.get(j, []):
        before = best[i][int(cin)]
        if before[0] == planner.inf:
            continue
        options[int(cout)].append(planner._plus(before[0], planner.cost(grp)))
        choices[int(cout)].append((before, grp))
    for c in options:
        if options[c]:
            k = min(range(len(options[c])), key=options[c].__getitem__)
            before, grp = choices[c][k]
            best[j][c] = (options[c][k], before[1] + [grp])


def carry_sets(crossing: list[str], producer: dict[str, int], uses: dict[str, list[int]], b: int,
               made: dict[str, int], capacity: int) -> list[tuple[str, ...]]:
    """The sets of tensors a boundary at operator ``b`` can keep on chip, in order: none, then
    every tensor crossing it, where they fit together (``made``: the bytes each one's producer
    writes, what is on chip of it at the boundary); where they do not, those the operator just
    before it made, where they fit and the others are not read again before these are (a norm's
    output kept for the products after it while the residual it read waits in DRAM for a later
    add; a product's output kept for the add that loads the residual). A boundary's sets do not
    depend on the groups on either side, so the groups on both sides agree on what is on chip."""
    def fits(kept) -> bool:
        return sum(made[t] for t in kept) <= capacity

    if not crossing:
        return [()]
    if fits(crossing):
        return [(), tuple(crossing)]
    fresh = tuple(t for t in crossing if producer[t] == b - 1)
    others = [t for t in crossing if t not in fresh]
    if fresh and fits(fresh):
        first_read = min(next(k for k in uses[t] if k >= b) for t in fresh)
        if all(next(k for k in uses[t] if k >= b) >= first_read for t in others):
            return [(), fresh]
    return [()]
