"""Hybrid retrieval: an exact per-user vector scan fused with FTS5 BM25, re-ranked by importance and recency.

Per-user vector search is exact: numpy over the user's cached vectors (``vectors.py``), or, when they do not fit,
a SQL scan (``ORDER BY vector_distance_cos``, served by the user index). Measured, an ANN index loses most recall
under a user filter (docs/architecture.md). The two legs are fused by a convex combination of their scores,
``VECTOR_WEIGHT × cosine + (1 - VECTOR_WEIGHT) × lexical coverage``, then weighted, gently, by decay-aware
importance and recency.

Why not reciprocal rank fusion: RRF (k=60) throws the scores away, so a memory that both legs rank
mediocrely (BM25 matched one filler word) beats one the vector leg ranks second. On the retrieval benchmark
(bench/retrieval_quality.py, paraphrased questions) RRF fell below vector-only search. The lexical score is
BM25 divided by the query's total IDF, i.e. the share of the query's information a memory matches: unlike
dividing by the best BM25 of the query, it stays low when the query has no good lexical match at all.
(Convex combination beat RRF in Bruch et al., "An Analysis of Fusion Functions for Hybrid Retrieval", 2023.)
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from quinn.memory.db import Row
from quinn.memory.filters import memory_filter, normalise_user
from quinn.memory.models import Memory, SearchHit, memory_columns, utcnow

if TYPE_CHECKING:
    from quinn.memory.store import MemoryStore

log = logging.getLogger(__name__)

# Share of the vector leg in the fused score; chosen on a second draw of the retrieval benchmark (seed 1), where
# 0.6-0.8 scored alike (bench/README.md).
VECTOR_WEIGHT = 0.7
# Re-ranking weights: a few percent, so importance and recency reorder memories of near-equal relevance without
# overriding a clearly better match.
IMPORTANCE_WEIGHT = 0.03
RECENCY_WEIGHT = 0.01
CANDIDATES = 50
MAX_QUERY_CHUNKS = 6
CHUNK_WEIGHT_DECAY = 0.95
MAX_FILTERED_CANDIDATES = 4000  # beyond this, a narrow filter is cheaper as a SQL scan than as IN lists
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_REQUEST = re.compile(
    r"\b(?:could|can|would|will) you\b|\b(?:please|remind|remember|recall|let me know|tell me)\b", re.IGNORECASE
)
STOPWORDS = frozenset(
    (
        "a an and are as at be but by can could did do does for from had has have hi hello how i i'm if in "
        "into is it its just me my no not of on or our please so that the their them then there these they "
        "this to up us was we were what when where which who why will with would you your yours dear thanks "
        "thank regards best "
    ).split()
)


def query_chunks(text: str, limit: int = MAX_QUERY_CHUNKS) -> list[str]:
    """Split a long email into its most informative sentences, most informative first.

    Embedding a whole mail blurs it into an average of small talk; cutting it keeps only its start. Short text
    (up to 300 characters) is returned whole. Longer text is split into paragraphs and sentences; repeats and
    fragments without two content words (greetings, sign-offs) are dropped; questions and requests come first,
    since they are what a reply must answer, then sentences with more distinct content words.
    """
    flat = " ".join(text.split())
    if len(flat) <= 300:
        return [flat] if flat else []
    sentences: list[str] = []
    seen: set[str] = set()
    for paragraph in _PARAGRAPH.split(text):
        for sentence in _SENTENCE.split(" ".join(paragraph.split())):
            key = sentence.lower()
            if len(content_words(sentence)) < 2 or key in seen:
                continue
            seen.add(key)
            sentences.append(sentence[:500])
    if not sentences:
        return [flat[:500]]

    def priority(index: int) -> tuple[int, int]:
        sentence = sentences[index]
        asks = 6 if "?" in sentence else 3 if _REQUEST.search(sentence) else 0
        return (-(asks + len(content_words(sentence))), index)

    return [sentences[i] for i in sorted(range(len(sentences)), key=priority)[:limit]]


def content_words(text: str) -> set[str]:
    """Lower-cased words without stopwords."""
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS and len(w) > 1}


def fts_query(text: str, max_terms: int = 48) -> str | None:
    """An FTS5 MATCH expression: the first ``max_terms`` distinct content words OR-ed, each quoted (no user
    text becomes FTS syntax). Words are taken in order of appearance, so the leading chunks count most."""
    words: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0).lower()
        if word not in STOPWORDS and len(word) > 1 and word not in words:
            words.append(word)
    if not words:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:max_terms])


def effective_importance(memory: Memory, now: datetime) -> float:
    """importance × exp(-hours since last access / stability): memories fade unless they are used.

    A memory never retrieved counts from when it was stored (``created_at``), not from when it started to hold:
    a fact learned today from an old email is fresh in memory.
    """
    last = memory.last_accessed_at or memory.created_at
    hours = max(0.0, (now - datetime.fromisoformat(last)).total_seconds() / 3600.0)
    return memory.importance * math.exp(-hours / max(memory.stability, 1.0))


def hybrid_search(
    store: MemoryStore,
    user_id: str | None,
    query: str,
    *,
    k: int = 10,
    touch: bool = True,
    **filters: Any,
) -> list[SearchHit]:
    """The user's ``k`` best memories for ``query``, best first; filters are those of ``memory_filter``.

    Only current, non-expired, active memories unless the filters ask otherwise (``as_of``,
    ``include_inactive``). Vectors of another model than the store's embedder are never compared; without an
    embedder the search is full-text only (logged once per store). ``touch`` counts the retrieval on each hit.
    """
    where, params = memory_filter(user_id, **filters)
    chunks = query_chunks(query)
    if not chunks:
        return []
    vector_ranks: dict[int, tuple[int, float]] = {}
    found: dict[int, Row] = {}  # both rankings read whole rows (no third round trip); decoded only if kept
    if store.embedder is not None:
        _say_stale_vectors_once(store)
        vectors = store.embedder.embed(chunks)
        owners = [normalise_user(user_id)] + ([None] if user_id is not None and filters.get("include_global") else [])
        vector_ranks = _vector_ranks(store, where, params, vectors, found, owners)
    elif store.first_time("fts-only"):
        log.warning("memory search runs on full-text only: no embedder is configured")
    fts_scores = _fts_scores(store, where, params, " ".join(chunks), found)
    # Without an embedder the lexical leg is all there is.
    alpha = VECTOR_WEIGHT if store.embedder is not None else 0.0
    fused: dict[int, float] = {mid: alpha * max(sim, 0.0) for mid, (_rank, sim) in vector_ranks.items()}
    for mid, (_rank, coverage) in fts_scores.items():
        fused[mid] = fused.get(mid, 0.0) + (1.0 - alpha) * coverage
    if not fused:
        return []
    now = utcnow()
    top_weight = 1.0 + IMPORTANCE_WEIGHT + RECENCY_WEIGHT
    hits = []
    for mid in sorted(fused, key=lambda i: -fused[i])[: max(k * 3, CANDIDATES)]:
        memory = Memory.from_row(found[mid])
        weight = (1.0 + IMPORTANCE_WEIGHT * effective_importance(memory, now)
                  + RECENCY_WEIGHT * _recency(memory, now)) / top_weight  # fmt: skip
        sim = vector_ranks.get(memory.id, (None, None))[1]
        bm25_rank = fts_scores[mid][0] if mid in fts_scores else None
        hits.append(SearchHit(memory, fused[mid] * weight, sim, bm25_rank))
    hits.sort(key=lambda h: (-h.score, -h.memory.id))
    hits = hits[:k]
    if touch and hits:
        strengthen(store, [h.memory.id for h in hits], now)
    return hits


def _say_stale_vectors_once(store: MemoryStore) -> None:
    """Warn once per store when current memories carry no vector of the configured model (found by FTS only)."""
    if store.embedder is None or not store.first_time("stale-vectors"):
        return
    stale = store.db.query_value(
        "SELECT count(*) FROM memories WHERE active = 1 AND superseded_by IS NULL"
        " AND (embedding_model IS NOT ? OR embedding IS NULL)",
        (store.embedder.model_id,),
    )
    if stale:
        log.warning(
            "%d memories have no %s vector and are found by full-text only; run `quinn memory reembed`",
            stale, store.embedder.model_id,
        )  # fmt: skip


def _vector_ranks(
    store: MemoryStore, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row],
    owners: Sequence[str | None],
) -> dict[int, tuple[int, float]]:  # fmt: skip
    """Rank by best (priority-weighted) cosine similarity over the query chunks; the reported similarity is the
    raw best one. Only vectors of the store's model are compared (another model's vectors live in another space,
    and may differ in length, which the SQL function rejects). ``owners``: whose vectors may match (the user,
    and None for global memories); the cached matrices are used when they fit, else SQL scans."""
    if store.vector_cache is not None:
        try:
            return _cached_vector_ranks(store, where, params, vectors, found, owners)
        except LookupError:  # too many vectors for the cache, or a filter too narrow for its candidates
            pass
    return _sql_vector_ranks(store, where, params, vectors, found)


def _cached_vector_ranks(
    store: MemoryStore, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row],
    owners: Sequence[str | None],
) -> dict[int, tuple[int, float]]:  # fmt: skip
    """The same ranking from numpy over the cached matrices; the filters are applied in SQL to the best
    candidates (twice as many as needed, then ×4 more each round) until ``CANDIDATES`` pass. Raises
    ``LookupError`` when that needs more than ``MAX_FILTERED_CANDIDATES``."""
    assert store.embedder is not None and store.vector_cache is not None
    model_id, dim = store.embedder.model_id, store.embedder.dim
    parts = [store.vector_cache.vectors(store.db, owner, model_id, dim) for owner in owners]
    ids = np.concatenate([p[0] for p in parts])
    if not len(ids):
        return {}
    matrix = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
    queries = np.asarray(vectors, dtype=np.float32)
    queries = queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)
    similarity = matrix @ queries.T  # (rows, chunks)
    weighted = (similarity * CHUNK_WEIGHT_DECAY ** np.arange(len(queries), dtype=np.float32)).max(axis=1)
    best = similarity.max(axis=1)
    passing: list[tuple[int, float]] = []
    start, size = 0, CANDIDATES * 2  # most rows pass the default filter (current memories): a little extra will do
    while len(passing) < CANDIDATES and start < len(ids):
        end = min(len(ids), start + size)
        if end > MAX_FILTERED_CANDIDATES:
            raise LookupError("the filters keep too few of the nearest vectors")
        # Only the best `end` rows need sorting: argpartition, then sort that slice (stable, by position).
        top = np.argpartition(-weighted, end - 1)[:end] if end < len(ids) else np.arange(len(ids))
        top = top[np.lexsort((top, -weighted[top]))][start:end]
        batch = [int(i) for i in ids[top]]
        rows = store.db.query(
            f"SELECT {memory_columns('m')} FROM memories m WHERE m.id IN ({','.join('?' * len(batch))}) AND {where}",
            [*batch, *params],
        )
        kept = {int(row[0]) for row in rows}
        for row in rows:
            found.setdefault(int(row[0]), row)
        passing += [(mid, float(best[i])) for mid, i in zip(batch, top, strict=True) if mid in kept]
        start, size = end, size * 4
    return {mid: (rank, sim) for rank, (mid, sim) in enumerate(passing[:CANDIDATES], start=1)}


def _sql_vector_ranks(
    store: MemoryStore, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row]
) -> dict[int, tuple[int, float]]:
    """The ranking as an exact scan in SQL, one query per chunk."""
    assert store.embedder is not None
    model_id, dim = store.embedder.model_id, store.embedder.dim
    best: dict[int, float] = {}
    ranking: dict[int, float] = {}
    for position, vector in enumerate(vectors):
        # Chunks come most informative first: a later chunk's match counts slightly less.
        weight = CHUNK_WEIGHT_DECAY**position
        rows = store.db.query(
            f"SELECT vector_distance_cos(m.embedding, ?) AS d, {memory_columns('m')} FROM memories m WHERE {where}"
            " AND m.embedding_model = ? AND m.embedding IS NOT NULL AND length(m.embedding) = ? ORDER BY d LIMIT ?",
            [np.asarray(vector, dtype=np.float32).tobytes(), *params, model_id, dim * 4, CANDIDATES],
        )
        for distance, *columns in rows:
            if distance is None:
                continue
            mid = int(columns[0])
            found.setdefault(mid, tuple(columns))
            similarity = 1.0 - float(distance)
            best[mid] = max(best.get(mid, -1.0), similarity)
            ranking[mid] = max(ranking.get(mid, -1.0), similarity * weight)
    ordered = sorted(ranking, key=lambda i: -ranking[i])
    return {mid: (rank, best[mid]) for rank, mid in enumerate(ordered, start=1)}


def _fts_scores(
    store: MemoryStore, where: str, params: Sequence[Any], text: str, found: dict[int, Row]
) -> dict[int, tuple[int, float]]:
    """BM25 rank and lexical coverage (BM25 / the query's total IDF, capped at 1) of the best FTS matches."""
    match = fts_query(text)
    if match is None:
        return {}
    rows = store.db.query(
        f"SELECT bm25(memories_fts), {memory_columns('m')} FROM memories_fts JOIN memories m"
        f" ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND {where} ORDER BY bm25(memories_fts) LIMIT ?",
        [match, *params, CANDIDATES],
    )
    if not rows:
        return {}
    mass = _idf_mass(store, match.split(" OR "))
    scores: dict[int, tuple[int, float]] = {}
    for rank, (bm25, *columns) in enumerate(rows, start=1):
        mid = int(columns[0])
        found.setdefault(mid, tuple(columns))
        # FTS5's bm25() is negative (lower is better); a memory matching every query word once scores about -mass.
        scores[mid] = (rank, min(1.0, -float(bm25) / mass))
    return scores


def _idf_mass(store: MemoryStore, terms: Sequence[str]) -> float:
    """The sum of the terms' IDF as FTS5's bm25 computes it (over the whole index), in one statement."""
    counts = ", ".join("(SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?)" for _ in terms)
    row = store.db.query_one(f"SELECT (SELECT count(*) FROM memories), {counts}", list(terms))
    total = float(row[0]) if row else 0.0
    mass = 0.0
    for found in (row or ())[1:]:
        # FTS5 (fts5_aux.c): idf = log((N - n + 0.5) / (n + 0.5)), floored at 1e-6.
        mass += max(math.log((total - float(found) + 0.5) / (float(found) + 0.5)), 1e-6)
    return max(mass, 1e-6)


def _recency(memory: Memory, now: datetime) -> float:
    age_days = max(0.0, (now - datetime.fromisoformat(memory.valid_from)).total_seconds() / 86400.0)
    return math.exp(-age_days / 180.0)


def strengthen(store: MemoryStore, memory_ids: Sequence[int], now: datetime | None = None) -> None:
    """Retrieval strengthens memory: count the access and grow stability (written in batches by the store)."""
    if memory_ids:
        store.record_access(memory_ids, now)


def find_similar(store: MemoryStore, user_id: str, content: str, threshold: float = 0.85) -> list[SearchHit]:
    """Current memories of the user whose cosine similarity to ``content`` is at least ``threshold``, most
    similar first (score = similarity). Empty without an embedder: near-duplicates need vectors."""
    if store.embedder is None:
        return []
    where, params = memory_filter(user_id)
    vector = store.embedder.embed([content])[0]
    found: dict[int, Row] = {}
    ranks = _vector_ranks(store, where, params, vector[None, :], found, [normalise_user(user_id)])
    hits = [
        SearchHit(Memory.from_row(found[mid]), sim, sim, None) for mid, (_r, sim) in ranks.items() if sim >= threshold
    ]
    return sorted(hits, key=lambda h: (-h.score, h.memory.id))


def estimate_tokens(text: str) -> int:
    """A cheap token estimate (about four characters a token) for budgeting, no tokenizer needed."""
    return max(1, math.ceil(len(text) / 4))


def context_block(hits: Sequence[SearchHit], token_budget: int) -> str:
    """Memories as lines with ``[memory:ID]`` citations, deduplicated, best first, cut at ``token_budget``."""
    lines: list[str] = []
    seen: set[str] = set()
    shown: set[int] = set()
    used = 0
    for hit in hits:
        memory = hit.memory
        key = " ".join(memory.content.lower().split())
        if key in seen or memory.id in shown:
            continue
        date = memory.valid_from[:10]
        where = f"{memory.type}, {memory.domain}" if memory.domain else memory.type
        line = f"- [memory:{memory.id}] ({where}, since {date}) {memory.content}"
        cost = estimate_tokens(line)
        if used + cost > token_budget:
            continue
        seen.add(key)
        shown.add(memory.id)
        lines.append(line)
        used += cost
    return "\n".join(lines)
