"""``loopwise kernels ...``: eval, check, baseline, optimize, bench, generate, profile, tools, sass, codesearch."""

from __future__ import annotations

import typer

from loopwise.kernels.cli import codesearch, evaluate, profile, search

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

COMMANDS = (
    ("eval", evaluate.eval_cmd), ("check", evaluate.check_cmd), ("baseline", evaluate.baseline_cmd),
    ("optimize", search.optimize_cmd), ("bench", search.bench_cmd), ("generate", search.generate_cmd),
    ("profile", profile.profile_cmd), ("tools", profile.tools_cmd), ("sass", profile.sass_cmd),
    ("codesearch", codesearch.codesearch_cmd),
)
for _name, _command in COMMANDS:
    app.command(_name)(_command)
