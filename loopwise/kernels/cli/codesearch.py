"""``loopwise kernels codesearch``: the CUTLASS / CuTe sources, searched by name and words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from loopwise.kernels.cli.options import JSON


def codesearch_cmd(
    query: str = typer.Argument(..., help="Names or words, e.g. SM90_TMA_LOAD, make_tiled_copy, 'TMA warp specialized'."),
    limit: int = typer.Option(10, "--limit", "-n", help="Most hits to show (1-50)."),
    root: Optional[Path] = typer.Option(None, "--root", help="A CUTLASS checkout (with include/ and examples/); "
                                        "default: $LOOPWISE_CUTLASS_ROOT, else the nvidia-cutlass wheel's sources."),
    as_json: bool = JSON,
) -> None:
    """Search the CUTLASS / CuTe C++ sources and examples: names by their parts, defining code first.
    The first search builds an index (seconds), cached until the sources change."""
    from dataclasses import asdict

    from loopwise.kernels.codesearch import ensure_index, resolve_root, search

    source = resolve_root(root)
    if as_json:
        hits = search(query, limit=limit, root=source)
        typer.echo(json.dumps({"query": query, "root": str(source), "hits": [asdict(h) for h in hits]}, indent=2))
        return
    from loopwise.core.console import console as make_console

    console = make_console()
    with console.status(f"indexing {source} (once, until the sources change)"):
        info = ensure_index(source)
    _print_hits(console, query, search(query, limit=limit, root=source), info)


def _print_hits(console, query: str, hits, info) -> None:
    import textwrap

    from rich.table import Table

    how = "reused" if info.reused else f"built in {info.build_s:.1f} s"
    table = Table(title=f"{len(hits)} hits for {query!r} in {info.root} ({info.chunks} chunks, index {how})",
                  show_lines=True)
    for col in ("where", "defines", "snippet"):
        table.add_column(col, overflow="fold")
    for h in hits:
        lines = [line for line in textwrap.dedent(h.snippet).split("\n") if any(c.isalnum() for c in line)][:3]
        table.add_row(f"{h.path}:{h.start_line}-{h.end_line}", ", ".join(h.symbols[:4]) or "-",
                      "\n".join(line[:100] for line in lines))
    console.print(table)
    if not hits:
        console.print("no match: try fewer words, or parts of a name")
