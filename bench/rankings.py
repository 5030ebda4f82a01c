"""The rankings the retrieval benchmark compares, built from the same two legs as ``hybrid_search``.

One ``Legs`` per question holds what every method needs: the exact cosine of every memory of the user, and
the BM25 top lists of three lexical variants (porter + Quinn's stop words, as ``memories_fts`` does today;
plain unicode61 on a scratch FTS5 table, i.e. no stemming; porter with every word of the question kept). The
fusions are then pure functions of the legs, so each ablation changes one thing.

The convex fusion is the one ``quinn/memory/search.py`` ran before issue 14 (``0.8 × cosine + 0.2 × coverage``,
re-weighted by importance and recency), kept here so it stays measurable after the product moved on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from quinn.db import Database
from quinn.memory.filters import memory_filter
from quinn.memory.lexical import (
    CANDIDATES,
    common_to_owners,
    document_frequencies,
    fts_query,
    lexical_scores,
    match_expression,
    query_terms,
)
from quinn.memory.search import RANK_COLUMNS, _weight, rank_columns

RRF_K = 60
SCRATCH = "plain_fts"  # content only, tokenize = 'unicode61' (no stemming)
_WORDS = r"[^\W_]+"


@dataclass
class UserIndex:
    """A user's stored vectors and re-ranking factors (importance, recency), read once."""

    ids: np.ndarray
    matrix: np.ndarray
    weight: dict[int, float]
    mean: np.ndarray  # the mean of the user's vectors
    centred_norms: np.ndarray  # |vector - mean| per memory


@dataclass
class Legs:
    """What the fusions of one question start from."""

    cosines: dict[str, dict[int, float]]  # vector variant -> every memory of the user
    vectors: dict[str, list[int]]  # vector variant -> the user's memories by cosine, best first (CANDIDATES)
    bm25: dict[str, list[int]]  # lexical variant -> ids, best first (CANDIDATES)
    coverages: dict[str, dict[int, float]]  # Quinn's lexical leg: BM25 / the query's IDF mass, per variant
    raw_bm25: dict[str, dict[int, float]]  # -bm25() of the top lists (higher is better)


def build_scratch(db: Database) -> None:
    """A copy of the memories' text in an FTS5 table without the porter stemmer (``memories_fts`` has it)."""
    db.executescript(
        f"CREATE VIRTUAL TABLE {SCRATCH} USING fts5(content, tokenize = 'unicode61');"
        f"INSERT INTO {SCRATCH} (rowid, content) SELECT id, content FROM memories;"
    )


def user_index(db: Database, user: str, now: datetime) -> UserIndex:
    """The user's vectors and each memory's re-ranking factor, as ``hybrid_search`` computes it."""
    where, params = memory_filter(user)
    rows = db.query(f"SELECT {rank_columns('m')}, m.embedding FROM memories m WHERE {where} ORDER BY m.id", params)
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    matrix = np.stack([np.frombuffer(r[-1], dtype=np.float32) for r in rows])
    weight = {int(r[0]): _weight(tuple(r[: len(RANK_COLUMNS)]), now) for r in rows}
    mean = matrix.mean(axis=0)
    return UserIndex(ids, matrix, weight, mean, np.linalg.norm(matrix - mean, axis=1))


def user_idf_terms(db: Database, user: str, text: str) -> list[str]:
    """Quinn's query terms less those common to the user's memories (``lexical.common_to_owners``)."""
    terms = query_terms(text)
    common = common_to_owners(db, [user], terms, document_frequencies(db, terms)[1]) if terms else set()
    return [t for t in terms if t not in common]


def all_words_query(text: str) -> str | None:
    """Every word of the text OR-ed (no stop words dropped)."""
    words = list(dict.fromkeys(w.lower() for w in re.findall(_WORDS, text)))
    return match_expression(words)


def _bm25_top(db: Database, table: str, match: str | None, where: str, params: Sequence[object]) -> list[tuple]:
    if match is None:
        return []
    columns = "{content tags}" if table == "memories_fts" else "{content}"
    match = match.replace("{content tags}", columns)
    return db.query(
        f"SELECT m.id, bm25({table}) FROM {table} JOIN memories m ON m.id = {table}.rowid"
        f" WHERE {table} MATCH ? AND {where} ORDER BY bm25({table}) LIMIT ?",
        [match, *params, CANDIDATES],
    )


def legs(db: Database, user: str, index: UserIndex, question: str, vector: np.ndarray) -> Legs:
    """Both legs of one question under the user filter, in every variant."""
    where, params = memory_filter(user)
    text = " ".join(question.split())
    raw = index.matrix @ vector
    query = vector - index.mean
    centred = (raw - index.matrix @ index.mean - float(index.mean @ query)) / np.maximum(
        index.centred_norms * float(np.linalg.norm(query)), 1e-12
    )
    cosines, vectors = {}, {}
    for name, scores in (("plain", raw), ("centred", centred)):
        order = np.argsort(-scores, kind="stable")
        cosines[name] = {int(i): float(s) for i, s in zip(index.ids, scores, strict=True)}
        vectors[name] = [int(i) for i in index.ids[order[:CANDIDATES]]]
    kept = " ".join(user_idf_terms(db, user, text))
    tops = {
        "porter": _bm25_top(db, "memories_fts", fts_query(text), where, params),
        "unicode61": _bm25_top(db, SCRATCH, fts_query(text), where, params),
        "all_words": _bm25_top(db, "memories_fts", all_words_query(text), where, params),
        "user_idf": _bm25_top(db, "memories_fts", fts_query(kept), where, params),
    }
    coverages = {}
    for name, query_text in (("porter", text), ("user_idf", kept)):
        lexical, _rows = lexical_scores(db, where, params, query_text, rank_columns("m"))
        coverages[name] = {mid: cov for mid, (_rank, cov) in lexical.items()}
    return Legs(
        cosines=cosines,
        vectors=vectors,
        bm25={name: [int(r[0]) for r in rows] for name, rows in tops.items()},
        coverages=coverages,
        raw_bm25={name: {int(r[0]): -float(r[1]) for r in rows} for name, rows in tops.items()},
    )


def rrf(lists: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion: sum of 1 / (k + rank) over the lists that hold a memory."""
    fused: dict[int, float] = {}
    for ranked in lists:
        for rank, mid in enumerate(ranked, start=1):
            fused[mid] = fused.get(mid, 0.0) + 1.0 / (k + rank)
    return fused


def convex(leg: Legs, alpha: float = 0.8, vector: str = "plain", lexical: str = "porter") -> dict[int, float]:
    """search.py before issue 14: alpha × cosine + (1 - alpha) × coverage, over both legs' candidates."""
    cosine = leg.cosines[vector]
    fused = {mid: alpha * max(cosine[mid], 0.0) for mid in leg.vectors[vector]}
    for mid, coverage in leg.coverages[lexical].items():
        fused[mid] = alpha * max(cosine.get(mid, 0.0), 0.0) + (1 - alpha) * coverage
    return fused


def _minmax(scores: dict[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    return {mid: (s - low) / (high - low) if high > low else 1.0 for mid, s in scores.items()}


def convex_minmax(leg: Legs, vector: str = "plain", lexical: str = "porter") -> dict[int, float]:
    """Both legs min-max normalised over their own top lists, then averaged (a missing score counts 0)."""
    vectors = _minmax({mid: leg.cosines[vector][mid] for mid in leg.vectors[vector]})
    lexicals = _minmax(leg.raw_bm25[lexical])
    return {mid: 0.5 * vectors.get(mid, 0.0) + 0.5 * lexicals.get(mid, 0.0) for mid in set(vectors) | set(lexicals)}


def ranked(fused: dict[int, float], weight: dict[int, float] | None = None, depth: int = 10) -> list[int]:
    """The ``depth`` best ids; with ``weight``, the top ``max(3 × depth, CANDIDATES)`` re-ranked by it first, as
    ``hybrid_search`` does."""
    order = sorted(fused, key=lambda mid: (-fused[mid], -mid))
    if weight is None:
        return order[:depth]
    top = order[: max(3 * depth, CANDIDATES)]
    return sorted(top, key=lambda mid: (-fused[mid] * weight[mid], -mid))[:depth]


Method = Callable[[Legs, UserIndex], list[int]]


def methods() -> dict[str, Method]:
    """Every ablation, by name (the order of the report's rows)."""
    return {
        "bm25 (porter, stop words dropped: today)": lambda leg, ix: leg.bm25["porter"][:10],
        "bm25 unicode61 (no stemming)": lambda leg, ix: leg.bm25["unicode61"][:10],
        "bm25 porter, all words": lambda leg, ix: leg.bm25["all_words"][:10],
        "bm25 porter, per-user IDF": lambda leg, ix: leg.bm25["user_idf"][:10],
        "vector": lambda leg, ix: leg.vectors["plain"][:10],
        "vector centred on the user's mean": lambda leg, ix: leg.vectors["centred"][:10],
        "rrf k=60": lambda leg, ix: ranked(rrf([leg.vectors["plain"], leg.bm25["porter"]])),
        "rrf k=60 + importance/recency": lambda leg, ix: ranked(
            rrf([leg.vectors["plain"], leg.bm25["porter"]]), ix.weight
        ),
        "rrf k=60, unicode61": lambda leg, ix: ranked(rrf([leg.vectors["plain"], leg.bm25["unicode61"]])),
        "rrf k=60, centred + per-user IDF": lambda leg, ix: ranked(rrf([leg.vectors["centred"], leg.bm25["user_idf"]])),
        "convex 0.8/0.2 + importance/recency (before)": lambda leg, ix: ranked(convex(leg), ix.weight),
        "convex 0.8/0.2, flat": lambda leg, ix: ranked(convex(leg)),
        "convex 0.8/0.2, centred + per-user IDF": lambda leg, ix: ranked(convex(leg, 0.8, "centred", "user_idf")),
        "convex 0.8/0.2, centred + per-user IDF + importance/recency": lambda leg, ix: ranked(
            convex(leg, 0.8, "centred", "user_idf"), ix.weight
        ),
        "convex 0.8/0.2, centred": lambda leg, ix: ranked(convex(leg, 0.8, "centred", "porter")),
        "convex 0.8/0.2, per-user IDF": lambda leg, ix: ranked(convex(leg, 0.8, "plain", "user_idf")),
        "convex min-max 0.5/0.5": lambda leg, ix: ranked(convex_minmax(leg)),
        "convex min-max, centred + per-user IDF": lambda leg, ix: ranked(convex_minmax(leg, "centred", "user_idf")),
    }
