"""HTML report of a training search (``loopwise report RUN`` on a ``training.search`` run): each
method's best schedule against the base and the grid, its reward curve across stages, the stage tree
coloured by tuning reward, the knobs' trajectories and directions, and the best tree schedule's
other metrics. Reads whatever events are there, so an unfinished run or a baselines-only run reports
too (a method without a ``result`` shows its best schedule so far)."""

from __future__ import annotations

from pathlib import Path

from loopwise.core.report import Section, render_html
from loopwise.training import metrics as M
from loopwise.training.learning_signal import zero_variance_share
from loopwise.training.report_data import (
    ARROWS,
    KNOBS,
    TrainingData,
    as_dict,
    as_list,
    as_number,
    base_test_reward,
    budget_text,
    changes_text,
    decision_counts,
    fmt,
    load_data,
    moves_text,
    rank_of,
    top_finding,
    tree_paths,
    value_text,
)
from loopwise.training.report_figures import (
    HEADLINE_COLUMNS,
    default_config,
    headline_figure,
    headline_rows,
    knobs_figure,
    metrics_figure,
    node_change,
    reward_curves_figure,
    tree_figure,
    warm_figure,
)


def _run_section(data: TrainingData, meta, rows: list[list[str]]) -> Section:
    st, warm = data.settings, as_dict(data.base.get("warm"))
    base_test = base_test_reward(data)
    facts = {"run": meta.run_id, "task": st.get("task", "-"), "preset": st.get("preset", "-"),
             "budget / depth": f"{budget_text(data)} / at most {st.get('depth', '-')} stages per schedule",
             "seed / difficulty": f"{st.get('seed', '-')} / {_difficulty(data)}",
             "base reward (tune / test)": f"{fmt(data.base.get('tune'))} / {fmt(base_test)}",
             "warm start": f"{warm.get('steps', '-')} steps to pass rate {fmt(warm.get('pass_rate'))}"
                           + ("" if warm.get("in_target", True) else " (outside the target range)"),
             "stages trained": len(data.stages)}
    return Section("Methods", facts=facts, columns=HEADLINE_COLUMNS, rows=rows, anchor="methods")


def _difficulty(data: TrainingData) -> str:
    """The run's difficulty: its setting, else what its stages trained at (the task's default),
    else "-" (a task without one)."""
    chosen = data.settings.get("difficulty")
    if chosen is None:
        chosen = next((c.get("difficulty") for s in data.schedules.values() for c in s.configs), None)
    return value_text(chosen)


def _directions_section(data: TrainingData) -> Section:
    have = [m for m, s in data.schedules.items() if s.directions]
    knobs = list(KNOBS) + sorted({k for m in have for k in data.schedules[m].directions} - set(KNOBS))
    rows = [[k] + [f"{ARROWS.get(d, '')} {d}".strip() for d in (data.schedules[m].directions.get(k, "-")
                                                                 for m in have)] for k in knobs]
    return Section("Knob directions along each best schedule (from the default config, then its stages in order)",
                   columns=["knob"] + have, rows=rows if have else [],
                   facts={} if have else {"directions": "none yet (a finished method has them)"},
                   anchor="directions")


def _paths_section(data: TrainingData) -> Section:
    """The directions of every root-to-node path of the tree, counted per knob."""
    from loopwise.training.transitions import path_directions

    counts = path_directions(tree_paths(data.tree))
    return _counted_section(counts, f"Knob directions over the tree's {counts['paths']} root-to-node paths (each "
                                    "node's, from the default config; a path's prefixes are paths of their own)",
                            "paths")


def _lineages_section(counts: dict) -> Section:
    """The directions of PBT's lineages of weights, as its result counted them."""
    return _counted_section(counts, f"Knob directions over PBT's {counts.get('paths', 0)} lineages of weights (each "
                                    "member's, from the default config through the stages it inherited, to its "
                                    "replacement or the end)", "lineages")


def _counted_section(counts: dict, title: str, anchor: str) -> Section:
    from loopwise.training.transitions import DIRECTIONS

    rows = [[k] + [str(as_dict(c).get(d, "-")) for d in DIRECTIONS + ("moved_twice",)]
            for k, c in as_dict(counts.get("knobs")).items()]
    return Section(title, facts={"paths by moves": moves_text(counts)},
                   columns=["knob"] + [f"{ARROWS[d]} {d}" for d in DIRECTIONS] + ["changed twice or more"],
                   rows=rows, anchor=anchor)


def _schedule_section(data: TrainingData) -> Section:
    rows = []
    for m, s in data.schedules.items():
        prev = None
        reasons = s.reasons if len(s.reasons) == len(s.configs) else [""] * len(s.configs)
        for i, (c, t, why) in enumerate(zip(s.configs, s.traces + [[]] * len(s.configs), reasons), start=1):
            end = next((r for r in reversed(t) if M.EVAL_REWARD in r), {})
            rows.append([m, str(i), str(c.get("steps", "-")), changes_text(prev, c) if prev else _summary_one(c),
                         why or "-", fmt(end.get(M.EVAL_REWARD)), fmt(end.get(M.TRAIN_EVAL_REWARD))])
            prev = c
    return Section("Best schedules, stage by stage", columns=["method", "stage", "steps", "config (vs the stage before)",
                                                              "why (the tree's transition)", "held-out reward",
                                                              "train-probe reward"],
                   rows=rows, anchor="schedules")


def _summary_one(c: dict) -> str:
    return ", ".join(f"{k}={value_text(c[k])}" for k in KNOBS if c.get(k) is not None)


def _tree_section(data: TrainingData) -> Section:
    tree, default = data.tree, default_config(data.tree)
    rows = [[str(n), str(s.get("parent", "-")), str(s.get("depth", "-")), str(s.get("by", "-")), fmt(s.get("tune")),
             fmt(s.get("train")), _share(s), node_change(n, tree, default), top_finding(s) or "-"]
            for n, s in sorted(tree.items())]
    return Section(f"Tree nodes ({len(tree)})", columns=["node", "parent", "depth", "by", "tune", "train probe",
                                                         "groups without reward variance", "change", "top diagnosis"],
                   rows=rows, anchor="tree")


def _share(stage: dict) -> str:
    """The share of the stage's groups whose rewards were all equal (from its trace when the event
    does not carry it)."""
    share = as_number(stage.get("zero_variance_share"))
    if share is None and isinstance(stage.get("trace"), list):
        share = zero_variance_share(stage["trace"])
    return "-" if share is None else f"{share:.0%}"


def _decisions_section(data: TrainingData) -> Section:
    """The model's transitions as decided: each used reply, each failed one with its parse error,
    each re-prompt, and each time the rules filled in."""
    rows = []
    for kind, p in data.decisions:
        if kind == "proposal":
            rows.append(["used", str(p.get("by", "-")), str(p.get("note", ""))])
        elif kind == "proposal_failed":
            rows.append(["failed", str(p.get("by", "-")), f"{p.get('reason', '?')}: {p.get('detail', '')}"])
        elif kind == "reprompt":
            rows.append(["re-prompt", str(p.get("by", "-")), str(p.get("feedback", ""))])
        else:
            rows.append(["rule fallback", "rules", f"{p.get('from_rules', '?')} of {p.get('wanted', '?')} "
                         f"transitions from the rules: " + "; ".join(str(w) for w in as_list(p.get("why")))])
    counts = decision_counts(data.decisions)
    facts = {"used": counts["answered"], "failed": sum(counts["failed"].values()), "re-prompts": counts["reprompts"],
             "rule fallbacks": counts["fallbacks"]}
    return Section("The model's proposals and every fallback to the rules", columns=["decision", "by", "detail"],
                   rows=rows, facts=facts, anchor="decisions")


def build_report(store, out: Path | None = None) -> Path:
    """Writes ``report.html`` for a training search and returns its path."""
    data = load_data(store)
    meta, st = store.meta, data.settings
    rows = headline_rows(data)
    figures = [headline_figure(data, rows)]
    if any(s.traces for s in data.schedules.values()):
        figures.append(reward_curves_figure(data))
    if data.tree:
        figures.append(tree_figure(data))
    if any(s.configs for s in data.schedules.values()):
        figures.append(knobs_figure(data))
    shown = data.schedules.get("tree") if data.tree else None
    shown = shown or max((s for s in data.schedules.values() if s.traces), key=lambda s: rank_of(s.tune),
                         default=None)
    if shown is not None and shown.traces:
        figures.append(metrics_figure(shown))
    if history := as_list(as_dict(data.base.get("warm")).get("history")):
        figures.append(warm_figure(history))
    sections = [_run_section(data, meta, rows), _directions_section(data), _schedule_section(data)]
    if data.tree:
        sections += [_paths_section(data), _tree_section(data)]
    if lineages := as_dict(data.results.get("pbt", {})).get("path_directions"):
        sections.append(_lineages_section(as_dict(lineages)))
    if data.decisions:
        sections.append(_decisions_section(data))
    subtitle = (f"{st.get('task', '?')} · preset {st.get('preset', '?')} · budget {budget_text(data)}, "
                f"depth {st.get('depth', '?')} · base tune reward {fmt(data.base.get('tune'))}"
                + ("" if data.results else " · unfinished: no method has a result yet"))
    html = render_html(f"loopwise run {meta.run_id}", subtitle, figures, sections)
    path = out or (store.run_dir / "report.html")
    path.write_text(html, encoding="utf-8")
    return path
