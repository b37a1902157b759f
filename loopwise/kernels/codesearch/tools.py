"""The code search as tools the LLM proposer offers: ``cutlass_search`` and ``cutlass_read``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from loopwise.core.propose.llm import ChatTool
from loopwise.errors import UserError
from loopwise.kernels.codesearch._index import resolve_root
from loopwise.kernels.codesearch._search import (
    MAX_LIMIT,
    READ_MAX_LINES,
    Hit,
    read_source,
    search,
)

SEARCH_DEFAULT_LIMIT = 8
SEARCH_MAX_LIMIT = 20
READ_DEFAULT_LINES = 100


def format_hits(query: str, hits: list[Hit]) -> str:
    """Hits as text for a model: where, what is defined there, and the matching lines, numbered."""
    if not hits:
        return f"no match for {query!r}; try fewer or other words, or a name's parts"
    out = [f"{len(hits)} hits for {query!r} (read more with cutlass_read):"]
    for rank, hit in enumerate(hits, 1):
        defines = f"  defines: {', '.join(hit.symbols[:8])}" if hit.symbols else ""
        out.append(f"\n{rank}. {hit.path}:{hit.start_line}-{hit.end_line}{defines}")
        for offset, line in enumerate(hit.snippet.split("\n")):
            out.append(f"{hit.snippet_line + offset:6d}| {line}")
    return "\n".join(out)


def number_lines(text: str, first: int) -> str:
    """Lines prefixed with their numbers, as ``cutlass_read`` returns them."""
    return "\n".join(f"{first + i:6d}| {line}" for i, line in enumerate(text.split("\n")))


class CutlassSearch(ChatTool):
    """``cutlass_search(query, limit)``: ranked chunks of the CUTLASS / CuTe sources."""

    name = "cutlass_search"
    description = (
        "Search the CUTLASS and CuTe C++ sources (headers under include/cute and include/cutlass, "
        "and the examples) for names or words, e.g. 'SM90_TMA_LOAD', 'make_tiled_copy', 'cute::gemm', "
        "'TMA warp specialized'. Names are found by their parts. Returns the best chunks: file, lines, "
        "the names defined there, and the matching lines."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "names or words to look for"},
            "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX_LIMIT,
                      "description": f"the most hits to return (default {SEARCH_DEFAULT_LIMIT})"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = root

    def run(self, arguments: Mapping[str, Any]) -> str:
        query = arguments["query"]
        limit = min(max(int(arguments.get("limit", SEARCH_DEFAULT_LIMIT)), 1), min(SEARCH_MAX_LIMIT, MAX_LIMIT))
        return format_hits(query, search(query, limit, self.root))


class CutlassRead(ChatTool):
    """``cutlass_read(path, start_line, end_line)``: numbered lines of one source file."""

    name = "cutlass_read"
    description = (
        f"Read lines of a CUTLASS / CuTe source file, by the path cutlass_search printed "
        f"(e.g. include/cute/atom/copy_atom.hpp). At most {READ_MAX_LINES} lines per call."
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "the file, relative to the CUTLASS root"},
            "start_line": {"type": "integer", "minimum": 1, "description": "the first line (from 1)"},
            "end_line": {"type": "integer", "minimum": 1,
                         "description": f"the last line (default start_line + {READ_DEFAULT_LINES - 1})"},
        },
        "required": ["path", "start_line"],
        "additionalProperties": False,
    }

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = root

    def run(self, arguments: Mapping[str, Any]) -> str:
        path, start = arguments["path"], arguments["start_line"]
        end = arguments.get("end_line", start + READ_DEFAULT_LINES - 1)
        text = read_source(path, start, end, self.root)
        last = start + text.count("\n")
        return f"{path} lines {start}-{last}:\n{number_lines(text, start)}"


def cutlass_tools(root: str | os.PathLike | None = None) -> list[ChatTool]:
    """Both tools over ``root`` (None: ``$LOOPWISE_CUTLASS_ROOT`` or the wheel's sources), or none
    when there are no sources to search. The index is built on the first call, not here."""
    try:
        resolve_root(root)
    except UserError:
        return []
    return [CutlassSearch(root), CutlassRead(root)]
