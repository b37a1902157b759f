"""Code search over the CUTLASS / CuTe C++ sources: the ones shipped in the ``nvidia-cutlass``
wheel, or any CUTLASS checkout.

``search(query)`` ranks chunks (whole top-level declarations, or windows of long ones) with SQLite
FTS5's bm25 over four columns: the names a chunk defines, its file's path, the declaration it
belongs to, and its text; names are found by their parts (``SM90_TMA_LOAD``, ``make_tiled_copy``,
``CollectiveMma``). ``read_source`` reads a bounded range of lines. The index is built on first use
and cached under the loopwise cache folder until a file or the index format changes.
"""

from loopwise.kernels.codesearch._index import (
    IndexInfo,
    ensure_index,
    resolve_root,
    wheel_root,
)
from loopwise.kernels.codesearch._search import Hit, read_source, search

__all__ = ["Hit", "IndexInfo", "ensure_index", "read_source", "resolve_root", "search", "wheel_root"]
