"""Hybrid retrieval: an exact per-user vector scan and FTS5 BM25, fused by reciprocal rank, re-ranked by importance
and recency.

Per-user vector search is exact: numpy over the user's cached vectors (``vectors.py``), or, when they do not fit,
a SQL scan (``ORDER BY vector_distance_cos``, served by the user index). Measured, an ANN index loses most recall
under a user filter (docs/architecture.md). Since issue 31 the rankings are fused by reciprocal rank (RRF, k=60,
``query.rrf``): the vector ranking and the BM25 ranking of the question, and, where the question names a day, both
again restricted to the memories of that day, and, for a short question in several parts, both for each part
(``Recipe``, ``query.py``). Then the fused top is weighted, gently, by decay-aware importance and recency.

Why RRF again: the convex fusion before it (``VECTOR_WEIGHT`` × cosine + the rest × lexical coverage, with the
cosine centred on the user's mean and per-user IDF: ``CONVEX``) won on the generated sets it was tuned on
(bench/retrieval_quality.py) and did no better than BM25 alone on real conversations. On the real development set
(bench/real_recall.py: FriendsQA and Topical-Chat, human-written) RRF of the plain legs matches or beats it with no
weight to tune, and the named-day and per-part legs add what neither leg can see. ``CONVEX`` stays selectable, so
the benchmark keeps measuring it beside the shipped recipe. The lexical score is BM25 divided by the query's total
IDF, i.e. the share of the query's information a memory matches (the convex fusion weighs it; RRF uses its rank).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np

from quinn.db import Row
from quinn.memory import conversations
from quinn.memory.filters import CURRENT, memory_filter, normalise_user
from quinn.memory.lexical import CANDIDATES, content_words, lexical_scores
from quinn.memory.models import MEMORY_COLUMNS, Memory, SearchHit, utcnow
from quinn.memory.parts import StoreParts, run_now
from quinn.memory.query import day_clause, named_days, query_parts, rrf

log = logging.getLogger(__name__)

# Share of the vector leg in the fused score. With lexical-only candidates scored by their true cosine, 0.8 beats
# vector-only recall@10 on two draws of the retrieval benchmark (seeds 2026 and 1: 0.807 vs 0.793, 0.828 vs 0.806).
VECTOR_WEIGHT = 0.8
# Re-ranking weights: a few percent, so importance and recency reorder memories of near-equal relevance without
# overriding a clearly better match.
IMPORTANCE_WEIGHT = 0.03
RECENCY_WEIGHT = 0.01
MAX_QUERY_CHUNKS = 6
CHUNK_WEIGHT_DECAY = 0.95
CENTRE_SAMPLE = 4096  # rows that estimate the mean of a user's vectors (Centre)
MAX_FILTERED_CANDIDATES = 4000  # beyond this, a narrow filter is cheaper as a SQL scan than as IN lists
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_REQUEST = re.compile(
    r"\b(?:could|can|would|will) you\b|\b(?:please|remind|remember|recall|let me know|tell me)\b", re.IGNORECASE
)
# The legs read only what ranking needs: decoding every column of 50-100 candidates cost more than the rest of a
# small user's search (1.4 ms of 4); the ``k`` kept are read whole at the end, by primary key.
RANK_COLUMNS = ("id", "importance", "created_at", "valid_from", "last_accessed_at", "stability")
_IMPORTANCE, _CREATED, _VALID_FROM, _ACCESSED, _STABILITY = range(1, len(RANK_COLUMNS))
# Below this many cached vectors the lexical leg runs inline: both legs are then mostly Python, which holds
# the GIL, so a second thread only adds hand-offs (10k memories over 100 users: p50 2.8 ms on a thread, 2.6 ms
# inline). For one user with 100k memories the two ways measured the same (p50 27 ms) on a quiet 2-core box.
INLINE_BELOW = 20_000


@dataclass(frozen=True)
class Recipe:
    """How a search ranks (issue 31). ``SHIPPED`` is what every search runs; the others stay measurable in
    bench/real_recall.py, so each part's worth is shown on the same run.

    ``fusion``: "rrf" (reciprocal rank fusion of every ranking, k=60) or "convex" (``VECTOR_WEIGHT`` × cosine +
    the rest × lexical coverage: the fusion before issue 31). ``centred``: the vector leg ranks by the cosine
    from the mean of the user's vectors (``Centre``). ``days``: a day the question names adds both legs again,
    restricted to the memories of that day (``query.named_days``). ``parts``: a short question in several
    parts adds both legs for each part (``query.query_parts``). ``reweight``: importance and recency reorder
    the fused top, gently (``_weight``). The conversation rankings (``conversations.py``): ``neighbours``, a
    memory's lexical score plus its neighbours' in its conversation; ``conversations``, BM25 over whole
    conversations; ``centroids``, the cosine to each conversation's mean vector; ``sessions``, a conversation
    is a memory's source session where known, else its day (False: always its day). ``days``, ``parts`` and
    the conversation rankings need "rrf".
    """

    fusion: str = "rrf"
    centred: bool = False
    days: bool = True
    parts: bool = True
    reweight: bool = True
    neighbours: bool = True
    conversations: bool = True
    centroids: bool = True
    sessions: bool = True


# search.py from issue 14 to issue 31
CONVEX = Recipe(fusion="convex", centred=True, days=False, parts=False, neighbours=False, conversations=False,
                centroids=False)  # fmt: skip
# The first RRF of issue 31: both legs (raw cosine) and the named days, each line ranked on its own.
LINES = Recipe(parts=False, neighbours=False, conversations=False, centroids=False)
# Per-part legs added nothing on the real development set and cost multi-hop questions 0.018 (bench/results/
# real_recall.md, "shipped less parts"): measured, kept selectable, not shipped.
# The conversation rankings lift recall@10 on both real sets, on every kind of question; the centred cosine adds
# 0.008 on FriendsQA and on both generated sets and costs Topical-Chat 0.013 (bench/results/real_recall.md,
# "shipped with raw cosine"). Neither has a weight to tune.
SHIPPED = Recipe(centred=True, parts=False)


def rank_columns(alias: str) -> str:
    """``RANK_COLUMNS`` qualified with a table alias."""
    return ", ".join(f"{alias}.{column}" for column in RANK_COLUMNS)


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


def effective_importance(memory: Memory, now: datetime) -> float:
    """importance × exp(-hours since last access / stability): memories fade unless they are used.

    A memory never retrieved counts from when it was stored (``created_at``), not from when it started to hold:
    a fact learned today from an old email is fresh in memory.
    """
    return _decayed(memory.importance, memory.last_accessed_at or memory.created_at, memory.stability, now)


def _decayed(importance: float, last: str, stability: float, now: datetime) -> float:
    hours = max(0.0, (now - datetime.fromisoformat(last)).total_seconds() / 3600.0)
    return float(importance) * math.exp(-hours / max(float(stability), 1.0))


def _recency(valid_from: str, now: datetime) -> float:
    age_days = max(0.0, (now - datetime.fromisoformat(valid_from)).total_seconds() / 86400.0)
    return math.exp(-age_days / 180.0)


def _weight(row: Row, now: datetime) -> float:
    """The re-ranking factor of a candidate, from its raw row (only the ``k`` kept are decoded to ``Memory``)."""
    importance = _decayed(row[_IMPORTANCE], row[_ACCESSED] or row[_CREATED], row[_STABILITY], now)
    top = 1.0 + IMPORTANCE_WEIGHT + RECENCY_WEIGHT
    return (1.0 + IMPORTANCE_WEIGHT * importance + RECENCY_WEIGHT * _recency(row[_VALID_FROM], now)) / top


def hybrid_search(
    store: StoreParts,
    user_id: str | None,
    query: str,
    *,
    k: int = 10,
    touch: bool = True,
    recipe: Recipe = SHIPPED,
    **filters: Any,
) -> list[SearchHit]:
    """The user's ``k`` best memories for ``query``, best first; filters are those of ``memory_filter``;
    ``recipe``: how to rank (``SHIPPED`` unless a benchmark compares).

    Only current, non-expired, active memories unless the filters ask otherwise (``as_of``,
    ``include_inactive``). Vectors of another model than the store's embedder are never compared; without an
    embedder the search is full-text only (logged once per store). ``touch`` counts the retrieval on each hit.

    For a user with many vectors the lexical leg runs on the store's background thread while this one embeds the
    query and scores the vectors (numpy and the model release the GIL), so such a search costs about the slower
    leg; for the rest it runs first, inline (``INLINE_BELOW``). Both legs read the ranking columns only; the
    ``k`` kept are then read whole.
    """
    where, params = memory_filter(user_id, **filters)
    chunks = query_chunks(query)
    if not chunks:
        return []
    embedder = store.embedder
    owners = [normalise_user(user_id)] + ([None] if user_id is not None and filters.get("include_global") else [])
    # The cached matrices are checked (one SQL read) before the lexical leg takes the connection.
    cached = _cached_matrix(store, owners) if embedder is not None else None
    owned_rows = len(cached[0]) if cached is not None else None
    lexical_leg = partial(lexical_scores, owners=owners, owned_rows=owned_rows)
    arguments = (store.db, where, params, " ".join(chunks), rank_columns("m"))
    if owned_rows is not None and owned_rows >= INLINE_BELOW:
        lexical = store.in_background(lexical_leg, *arguments)
    else:
        lexical = run_now(lexical_leg, *arguments)
    vector_ranks: dict[int, tuple[int, float]] = {}
    closeness: dict[int, float] = {}  # what the fusion weighs of the vector leg: centred cosine, or raw
    centre: Centre | None = None
    found: dict[int, Row] = {}  # the candidates' RANK_COLUMNS, from either leg
    rrf_fusion = recipe.fusion == "rrf"
    parts = query_parts(query) if rrf_fusion and recipe.parts and len(chunks) == 1 else []
    days = named_days(query) if rrf_fusion and recipe.days else []
    centred = recipe.centred or not rrf_fusion
    extra: list[tuple[str, list[Any], str, np.ndarray | None]] = []  # (where, params, text, vectors) per extra leg
    vectors: np.ndarray | None = None
    try:
        if embedder is not None:
            _say_stale_vectors_once(store)
            embedded = embedder.embed([*chunks, *parts])  # one call: the parts ride along with the chunks
            vectors = embedded[: len(chunks)]
            vector_ranks, centre = _vector_leg(store, where, params, vectors, found, cached, closeness, centred)
            extra = [(where, params, part, embedded[len(chunks) + i : len(chunks) + i + 1]) for i, part in
                     enumerate(parts)]  # fmt: skip
        elif store.first_time("fts-only"):
            log.warning("memory search runs on full-text only: no embedder is configured")
    finally:
        fts_scores, fts_rows = lexical.result()  # waits even when the vector leg failed: no stray reader
    for mid, row in fts_rows.items():
        found.setdefault(mid, row)
    if embedder is None:
        extra = [(where, params, part, None) for part in parts]
    if days:
        clause, day_params = day_clause(days, "m.valid_from")
        extra.append((f"{where} AND {clause}", [*params, *day_params], " ".join(chunks), vectors))
    rankings = [_ranking(vector_ranks), _ranking(fts_scores, lexical=True)]
    for leg_where, leg_params, text, leg_vectors in extra:
        rankings += _extra_legs(store, leg_where, leg_params, text, leg_vectors, found, cached, centred, owners)
    worded = set(fts_scores)  # a query word in the memory, or (below) in a neighbour of its conversation
    if rrf_fusion and user_id is not None and (recipe.neighbours or recipe.conversations or recipe.centroids):
        legs, near = _conversation_legs(store, where, params, owners[0], " ".join(chunks), fts_scores, rankings,
                                        vectors, cached if len(owners) == 1 else None, found, recipe)  # fmt: skip
        rankings += legs
        worded |= near
    if vectors is not None:
        # A memory found by one leg only keeps its true cosine (for the hit, and the convex fusion: counted as 0
        # there, it would bury every memory that only one leg ranked high, the "missing score" problem).
        outside = [mid for mid in {*fts_scores, *(m for r in rankings[2:] for m, _s in r)} if mid not in vector_ranks]
        for mid, sim in _similarities(store, vectors, outside, cached, centre, closeness).items():
            vector_ranks[mid] = (0, sim)
    if rrf_fusion:
        fused = rrf(rankings)
    else:
        # Without an embedder the lexical leg is all there is.
        alpha = VECTOR_WEIGHT if embedder is not None else 0.0
        fused = {mid: alpha * max(closeness.get(mid, 0.0), 0.0) for mid in vector_ranks}
        for mid, (_rank, coverage) in fts_scores.items():
            fused[mid] = fused.get(mid, 0.0) + (1.0 - alpha) * coverage
    if not fused:
        return []
    now = utcnow()
    candidates = sorted(fused, key=lambda i: -fused[i])[: max(k * 3, CANDIDATES)]
    weigh = (lambda mid: _weight(found[mid], now)) if recipe.reweight else (lambda mid: 1.0)
    scored = sorted(((fused[mid] * weigh(mid), mid) for mid in candidates), key=lambda s: (-s[0], -s[1]))
    memories = _memories(store, [mid for _score, mid in scored[:k]])
    hits = []
    for score, mid in scored[:k]:
        if mid not in memories:  # deleted (purged) since the legs read it
            continue
        similarity = vector_ranks[mid][1] if mid in vector_ranks else None
        bm25_rank = fts_scores[mid][0] if mid in fts_scores else None
        hits.append(SearchHit(memories[mid], score, similarity, bm25_rank, mid in worded))
    if touch and hits:
        strengthen(store, [h.memory.id for h in hits], now)
    return hits


def _extra_legs(
    store: StoreParts, where: str, params: Sequence[Any], text: str, vectors: np.ndarray | None,
    found: dict[int, Row], cached: Matrix | None, centred: bool, owners: Sequence[str | None],
) -> list[list[tuple[int, float | None]]]:  # fmt: skip
    """Both legs again for one part of a question, or under a narrower filter (a named day): their rankings."""
    lexical, rows = lexical_scores(
        store.db, where, params, text, rank_columns("m"), owners=owners, owned_rows=len(cached[0]) if cached else None
    )
    for mid, row in rows.items():
        found.setdefault(mid, row)
    out = [_ranking(lexical, lexical=True)]
    if vectors is not None and len(vectors):
        ranks, _centre = _vector_leg(store, where, params, vectors, found, cached, {}, centred)
        out.append(_ranking(ranks))
    return out


def relevant(worded: bool, similarity: float | None, min_similarity: float) -> bool:
    """The relevance cutoff of what reaches a prompt (``[memory] recall_min_similarity``): a hit a word of the
    query found (in it, or for a memory in a neighbour of its conversation), or at least ``min_similarity``
    close by cosine. Rank fusion ranks every candidate; this says which are worth a prompt's tokens."""
    return worded or min_similarity <= 0.0 or (similarity or 0.0) >= min_similarity  # 0 keeps a negative cosine


def _conversation_legs(
    store: StoreParts, where: str, params: Sequence[Any], user: str | None, text: str,
    fts_scores: dict[int, tuple[int, float]], rankings: list[list[tuple[int, float | None]]],
    vectors: np.ndarray | None, cached: Matrix | None, found: dict[int, Row], recipe: Recipe,
) -> tuple[list[list[tuple[int, float | None]]], set[int]]:  # fmt: skip
    """The conversation rankings (``conversations.py``), each cut to the memories the filters keep (the rows of
    memories no other leg found join ``found``), and the memories whose neighbour holds a query word."""
    index = store.conversations.index(store.db, user, recipe.sessions)
    lexical = {mid: coverage for mid, (_rank, coverage) in fts_scores.items()}
    queries = _unit(vectors) if vectors is not None and len(vectors) else None
    legs = conversations.rankings(index, lexical, text, rrf(rankings), cached, queries, neighbours=recipe.neighbours,
                                  conversations=recipe.conversations, centroids=recipe.centroids)  # fmt: skip
    new = sorted({mid for leg in legs for mid, _score in leg if mid not in found})
    for start in range(0, len(new), 500):
        chunk = new[start : start + 500]
        rows = store.db.query(
            f"SELECT {rank_columns('m')} FROM memories m WHERE {where} AND m.id IN ({','.join('?' * len(chunk))})",
            [*params, *chunk],
        )
        found.update({int(row[0]): row for row in rows})
    near = {n for mid in lexical for n in index.neighbours(mid)} if recipe.neighbours else set()
    return [[(mid, score) for mid, score in leg if mid in found] for leg in legs], near


def _ranking(ranks: dict[int, tuple[int, float]], lexical: bool = False) -> list[tuple[int, float | None]]:
    """A leg's (id, score) pairs best first, for ``query.rrf``, whose equal scores share a rank (rank 0: added
    for its cosine, not ranked). Lexical coverage is capped at 1, so there only scores below 1 tie."""
    ordered = sorted((m for m in ranks if ranks[m][0] > 0), key=lambda m: ranks[m][0])
    return [(mid, None if lexical and ranks[mid][1] >= 1.0 else ranks[mid][1]) for mid in ordered]


def _memories(store: StoreParts, memory_ids: Sequence[int]) -> dict[int, Memory]:
    """The given memories, whole, by id (one statement on the primary key)."""
    if not memory_ids:
        return {}
    rows = store.db.query(
        f"SELECT {MEMORY_COLUMNS} FROM memories NOT INDEXED WHERE id IN ({','.join('?' * len(memory_ids))})",
        list(memory_ids),
    )
    return {int(row[0]): Memory.from_row(row) for row in rows}


def _say_stale_vectors_once(store: StoreParts) -> None:
    """Warn once per store when current memories carry no vector of the configured model (found by FTS only)."""
    if store.embedder is None or not store.first_time("stale-vectors"):
        return
    stale = store.db.query_value(
        f"SELECT count(*) FROM memories WHERE {CURRENT} AND (embedding_model IS NOT ? OR embedding IS NULL)",
        (store.embedder.model_id,),
    )
    if stale:
        log.warning(
            "%d memories have no %s vector and are found by full-text only; run `quinn memory reembed`",
            stale, store.embedder.model_id,
        )  # fmt: skip


Matrix = tuple[np.ndarray, np.ndarray]  # (memory ids, unit vectors)


def _cached_matrix(store: StoreParts, owners: Sequence[str | None]) -> Matrix | None:
    """The owners' cached (ids, vectors), or None when there is no cache or they do not fit in it."""
    if store.vector_cache is None or store.embedder is None:
        return None
    model_id, dim = store.embedder.model_id, store.embedder.dim
    try:
        parts = [store.vector_cache.vectors(store.db, owner, model_id, dim) for owner in owners]
    except LookupError:  # too many vectors for the cache: the SQL scan serves them
        return None
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _vector_ranks(
    store: StoreParts, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row],
    owners: Sequence[str | None], cached: Matrix | None = None,
) -> dict[int, tuple[int, float]]:  # fmt: skip
    """Rank by best (priority-weighted) cosine similarity over the query chunks; the reported similarity is the
    raw best one. Only vectors of the store's model are compared (another model's vectors live in another space,
    and may differ in length, which the SQL function rejects). ``owners``: whose vectors may match (the user,
    and None for global memories); the cached matrices are used when they fit, else SQL scans."""
    if cached is None:
        cached = _cached_matrix(store, owners)
    if cached is not None:
        try:
            return _cached_vector_ranks(store, where, params, vectors, found, cached)
        except LookupError:  # a filter too narrow for the cached candidates
            pass
    return _sql_vector_ranks(store, where, params, vectors, found)


class Centre:
    """Cosine measured from the mean of the user's vectors instead of from the origin (issue 14).

    Every memory of a user shares a large common direction (the same speakers, the date format, the language:
    the mean of a user's unit vectors has a norm near 0.8), so a short memory that is mostly that direction
    ("Arturo: No way, seriously?") lies close to every question about Arturo. Removing the mean, as in
    Mu & Viswanath, "All-but-the-Top" (2018), leaves what is particular to each memory; it has no parameter.
    With ``m`` unit rows and ``μ`` the mean, cos(m - μ, q - μ) = (m·q - m·μ - μ·q + |μ|²) / (|m - μ| |q - μ|),
    and |m - μ|² = 1 - 2 m·μ + |μ|²: one product of the matrix with [queries, μ] serves both.
    """

    def __init__(self, matrix: np.ndarray) -> None:
        # A sample of at most CENTRE_SAMPLE rows estimates the mean as well as all of them, at a fraction of a pass.
        step = max(1, len(matrix) // CENTRE_SAMPLE)
        self.mean = matrix[::step].mean(axis=0).astype(np.float32) if len(matrix) else np.zeros(0, np.float32)
        self.mean_sq = float(self.mean @ self.mean) if len(matrix) else 0.0

    def similarities(self, rows: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(raw cosines, centred cosines) of unit ``rows`` against unit ``queries``, each (rows, queries)."""
        products = rows @ np.column_stack([queries.T, self.mean])
        raw, row_mean = products[:, :-1], products[:, -1:]
        query_mean = queries @ self.mean
        row_norms = np.sqrt(np.maximum(1.0 - 2.0 * row_mean + self.mean_sq, 1e-12))
        query_norms = np.sqrt(np.maximum(1.0 - 2.0 * query_mean + self.mean_sq, 1e-12))
        return raw, (raw - row_mean - query_mean + self.mean_sq) / (row_norms * query_norms)


def _unit(vectors: np.ndarray) -> np.ndarray:
    queries = np.asarray(vectors, dtype=np.float32)
    return queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12)


def _vector_leg(
    store: StoreParts, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row],
    cached: Matrix | None, closeness: dict[int, float], centred: bool = True,
) -> tuple[dict[int, tuple[int, float]], Centre | None]:  # fmt: skip
    """The vector leg of a hybrid search and the centre it was measured from: centred cosine over the cached
    matrices, or, when they are not cached (too many vectors) or the filters keep too few of them, raw cosine
    from the SQL scan (which knows no mean). ``closeness`` receives what the fusion weighs, per memory."""
    if cached is not None and len(cached[0]):
        centre = Centre(cached[1]) if centred else None
        try:
            return _cached_vector_ranks(store, where, params, vectors, found, cached, centre, closeness), centre
        except LookupError:  # a filter too narrow for the cached candidates
            closeness.clear()
    ranks = _sql_vector_ranks(store, where, params, vectors, found)
    closeness.update({mid: sim for mid, (_rank, sim) in ranks.items()})
    return ranks, None


def _cached_vector_ranks(
    store: StoreParts, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row],
    cached: Matrix, centre: Centre | None = None, closeness: dict[int, float] | None = None,
) -> dict[int, tuple[int, float]]:  # fmt: skip
    """The same ranking from numpy over the cached matrices; the filters are applied in SQL to the best
    candidates (twice as many as needed, then ×4 more each round) until ``CANDIDATES`` pass. Raises
    ``LookupError`` when that needs more than ``MAX_FILTERED_CANDIDATES``.

    With ``centre`` the ranking is by centred cosine, which ``closeness`` receives per memory kept; the
    similarity returned stays the raw cosine."""
    ids, matrix = cached
    if not len(ids):
        return {}
    queries = _unit(vectors)
    if centre is not None:
        similarity, ranking = centre.similarities(matrix, queries)
    else:
        similarity = ranking = matrix @ queries.T  # (rows, chunks)
    best = similarity.max(axis=1)
    closest = ranking.max(axis=1)
    # Chunks come most informative first: a later chunk's match counts slightly less.
    weighted = (ranking * CHUNK_WEIGHT_DECAY ** np.arange(len(queries), dtype=np.float32)).max(axis=1)
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
        # NOT INDEXED keeps the planner on the primary key: given the user filter, it would rather walk the
        # user's index, every row of it (37 ms for one user with 100k memories, against 1 ms by id).
        rows = store.db.query(
            f"SELECT {rank_columns('m')} FROM memories m NOT INDEXED"
            f" WHERE m.id IN ({','.join('?' * len(batch))}) AND {where}",
            [*batch, *params],
        )
        kept = {int(row[0]) for row in rows}
        for row in rows:
            found.setdefault(int(row[0]), row)
        for mid, i in zip(batch, top, strict=True):
            if mid in kept:
                passing.append((mid, float(best[i])))
                if closeness is not None:
                    closeness[mid] = float(closest[i])
        start, size = end, size * 4
    return {mid: (rank, sim) for rank, (mid, sim) in enumerate(passing[:CANDIDATES], start=1)}


def _similarities(
    store: StoreParts, vectors: np.ndarray, memory_ids: Sequence[int], cached: Matrix | None,
    centre: Centre | None = None, closeness: dict[int, float] | None = None,
) -> dict[int, float]:  # fmt: skip
    """The best cosine over the query chunks of each given memory that has a vector of the store's model (and,
    with ``centre``, its best centred cosine in ``closeness``; ``centre`` needs ``cached``)."""
    if not memory_ids or store.embedder is None:
        return {}
    queries = _unit(vectors)
    wanted = np.asarray(memory_ids, dtype=np.int64)
    if cached is not None:
        ids, matrix = cached
        at = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
        present = (ids[at] == wanted) if len(ids) else np.zeros(len(wanted), dtype=bool)
        if not present.any():
            return {}
        rows = matrix[at[present]]
        if centre is not None:
            raw, ranking = centre.similarities(rows, queries)
        else:
            raw = ranking = rows @ queries.T
        if closeness is not None:
            closeness.update(zip(wanted[present].tolist(), ranking.max(axis=1).tolist(), strict=True))
        return {int(mid): float(sim) for mid, sim in zip(wanted[present], raw.max(axis=1), strict=True)}
    model_id, dim = store.embedder.model_id, store.embedder.dim
    marks = ",".join("?" * len(memory_ids))
    found: dict[int, float] = {}
    for vector in queries:
        rows = store.db.query(
            f"SELECT id, vector_distance_cos(embedding, ?) FROM memories WHERE id IN ({marks})"
            " AND embedding_model = ? AND length(embedding) = ?",
            [vector.tobytes(), *memory_ids, model_id, dim * 4],
        )
        for mid, distance in rows:
            if distance is not None:
                found[int(mid)] = max(found.get(int(mid), -1.0), 1.0 - float(distance))
    if closeness is not None:
        closeness.update(found)
    return found


def _sql_vector_ranks(
    store: StoreParts, where: str, params: Sequence[Any], vectors: np.ndarray, found: dict[int, Row]
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
            f"SELECT vector_distance_cos(m.embedding, ?) AS d, {rank_columns('m')} FROM memories m WHERE {where}"
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


def strengthen(store: StoreParts, memory_ids: Sequence[int], now: datetime | None = None) -> None:
    """Retrieval strengthens memory: count the access and grow stability (written in batches by the store)."""
    if memory_ids:
        store.record_access(memory_ids, now)


def find_similar(store: StoreParts, user_id: str, content: str, threshold: float = 0.85) -> list[SearchHit]:
    """Current memories of the user whose cosine similarity to ``content`` is at least ``threshold``, most
    similar first (score = similarity). Empty without an embedder: near-duplicates need vectors."""
    if store.embedder is None:
        return []
    where, params = memory_filter(user_id)
    vector = store.embedder.embed([content])[0]
    found: dict[int, Row] = {}
    ranks = _vector_ranks(store, where, params, vector[None, :], found, [normalise_user(user_id)])
    close = {mid: sim for mid, (_r, sim) in ranks.items() if sim >= threshold}
    memories = _memories(store, list(close))
    hits = [SearchHit(memories[mid], sim, sim, None) for mid, sim in close.items() if mid in memories]
    return sorted(hits, key=lambda h: (-h.score, h.memory.id))
