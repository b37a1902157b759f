"""Index terms of C++ text: every identifier as a whole and in its parts.

``SM90_TMA_LOAD`` becomes ``sm90_tma_load sm90 tma load``, ``KernelTmaWarpSpecializedCooperative``
becomes ``kerneltmawarpspecializedcooperative kernel tma warp specialized cooperative``, and
``cute::gemm`` two words. FTS5's ``unicode61`` tokenizer (with ``_`` as a token character) then
sees exactly these terms, so a query finds a name by its parts and ranks the whole name higher.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import lru_cache

WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9][A-Za-z0-9_]*")
# An all-caps run not followed by lower case (TMA, SM90), a capitalized word (Warp, Sm90), a number
# with what follows it (64x8x8).
_PART = re.compile(r"[A-Z]+(?![a-z])[0-9]*|[A-Z]?[a-z]+[0-9]*|[0-9]+[A-Za-z0-9]*")
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in into is it me of on or show that the this "
    "to use used uses using what when where which with".split()
)


@lru_cache(maxsize=1 << 18)
def parts(word: str) -> tuple[str, ...]:
    """The lower-case pieces of an identifier: split at ``_`` and at camel-case humps."""
    return tuple(p.lower() for piece in word.split("_") for p in _PART.findall(piece))


@lru_cache(maxsize=1 << 18)
def expand(word: str) -> str:
    """The terms one identifier contributes: its whole lower-case form, then its parts."""
    whole = word.strip("_").lower()
    pieces = parts(word)
    if not whole:
        return ""
    if len(pieces) <= 1:
        return whole
    return whole + " " + " ".join(pieces)


def text_terms(text: str) -> str:
    """The whole text as index terms (identifiers and numbers only; punctuation dropped)."""
    return " ".join(expand(word) for word in WORD.findall(text))


def path_terms(path: str) -> str:
    """A relative path as index terms: ``include/cute/atom/copy_traits_sm90_tma.hpp`` gives
    ``include cute atom copy_traits_sm90_tma copy traits sm90 tma hpp``."""
    return text_terms(path.replace("/", " ").replace(".", " "))


@dataclass(frozen=True)
class Query:
    """A user query as FTS5 match expressions.

    Attributes:
        words: the identifiers of the query (stop words dropped unless nothing else is left).
        strict: every word must match (as a whole or as the phrase of its parts).
        loose: any word may match.
        terms: every term of every word, for picking the best snippet lines.
        names: the names the query may mean, in ``name_key`` form: each word with parts
            (``make_tiled_copy``), all words run together (``tiled mma`` -> ``TiledMMA``), the last
            part of a qualified name (``cute::gemm`` -> ``gemm``), or the only word.
    """

    words: tuple[str, ...]
    strict: str
    loose: str
    terms: frozenset[str]
    names: frozenset[str]


_QUALIFIED = re.compile(r"(?:[A-Za-z_]\w*\s*::\s*)+([A-Za-z_]\w*)")


def name_key(name: str) -> str:
    """A name compared without case or underscores: ``make_tiled_copy`` and ``MakeTiledCopy`` meet."""
    return name.replace("_", "").lower()


def _alternatives(word: str) -> list[str]:
    """FTS5 strings that match one query word: its whole form, and the phrase of its parts."""
    whole, pieces = word.strip("_").lower(), parts(word)
    return [f'"{whole}"'] + ([f'"{" ".join(pieces)}"'] if len(pieces) > 1 else [])


def parse_query(text: str) -> Query:
    """Turns free text (``TMA warp specialized``, ``cute::gemm``, ``SM90_TMA_LOAD``) into a ``Query``.

    A word may also be matched inside a compound with its neighbour (``warp specialized`` finds
    ``warpspecialized`` in a file name), since sources write the same thing both ways.
    """
    found = [w for w in WORD.findall(text) if w.strip("_")]
    words = list(dict.fromkeys([w for w in found if w.lower() not in _STOPWORDS] or found))
    lowered = [w.strip("_").lower() for w in words]
    compounds = [a + b for a, b in itertools.pairwise(lowered)]
    groups = []
    for i, word in enumerate(words):
        joined = [f'"{c}"' for c in compounds[max(i - 1, 0):i + 1]]
        options = _alternatives(word) + joined
        groups.append(options[0] if len(options) == 1 else "(" + " OR ".join(options) + ")")
    terms = frozenset(t for w in words for t in expand(w).split()) | frozenset(compounds)
    names = {name_key(w) for w in words if len(parts(w)) > 1 or len(words) == 1}
    names |= {name_key("".join(words))} | {name_key(m.group(1)) for m in _QUALIFIED.finditer(text)}
    return Query(tuple(words), " AND ".join(groups), " OR ".join(groups), terms, frozenset(names))
