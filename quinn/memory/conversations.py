"""The conversation legs of retrieval (issue 31): a memory is also ranked by the conversation it came from and by
its neighbours in it.

A question about what someone said rarely repeats the words of the one line that answers it: the answer is a
reply ("Yes, in March"), the words are in the line before, or spread over the whole exchange. Measured on the
real development set (bench/real_recall.py: FriendsQA and Topical-Chat, human-written), ranking every line on
its own, BM25 and MiniLM fused, finds 0.47 of the answers in the top 10; adding three rankings that look at
the conversation finds 0.55-0.57, on every kind of question:

* **neighbours**: a memory's lexical score plus those of the memories just before and after it in the same
  conversation (the BM25 candidates and their neighbours), so a reply ranks with the question it answers;
* **conversation BM25**: BM25 over each conversation's text taken whole (its terms counted over its current
  memories), the best ``CONVERSATIONS`` of them expanded into their memories;
* **conversation centroid**: the cosine of the question to the mean of each conversation's vectors, expanded
  the same way.

Each expansion lists the memories of the best conversations in conversation order, and within a conversation by
the memory's own fused rank: it joins the reciprocal rank fusion as one more ranking, with no weight to tune.

A memory's conversation is the session (mail thread) it was learnt in, recorded in its metadata as
``source.session_id``; a memory without one belongs to the conversation of its day (``valid_from``, UTC), the
memories a person gave on one day. Only current memories count (a forgotten or replaced memory's words raise
nothing). The terms and the member lists are kept per user in memory and stay coherent through
``memory_text_stamp`` (migration 0024), bumped by triggers on every write that moves them: a new memory is
appended; after any other change the user's current ids and conversations are read again (not their text) and
only the memories that left, moved or arrived are filed again, so a forget costs a user with 100k memories one
narrow read, not a re-count of every word.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from quinn.db import Database
from quinn.memory.filters import CURRENT
from quinn.memory.lexical import STOPWORDS, query_terms

CONVERSATIONS = 20  # the best conversations whose memories join the fusion
EXPANDED = 200  # at most this many memories per conversation ranking
CACHED_USERS = 64  # users whose conversation index stays in memory
K1, B = 1.2, 0.75  # BM25's usual constants (Robertson & Zaragoza), not fitted here
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_SUFFIXES = ("ing", "ed", "es", "s", "ly")


def stem(word: str) -> str:
    """A light suffix strip ("moves", "moved", "moving" -> "mov"), enough to match a question's words to a
    conversation's; FTS5's porter stemmer serves the memories' own BM25."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def terms_of(text: str) -> list[str]:
    """The stemmed content words of a text, repeats kept."""
    words = (m.group(0).lower() for m in _WORD.finditer(text))
    return [stem(w) for w in words if w not in STOPWORDS and len(w) > 1]


def conversation_of(metadata: str | None, valid_from: str, sessions: bool = True) -> str:
    """The conversation a memory belongs to: its source session, else (or without ``sessions``) its day."""
    if not sessions:
        return f"day:{valid_from[:10]}"
    try:
        source = (json.loads(metadata or "{}") or {}).get("source") or {}
    except (ValueError, AttributeError):
        source = {}
    session = source.get("session_id") if isinstance(source, dict) else None
    return f"session:{session}" if session else f"day:{valid_from[:10]}"


@dataclass
class Index:
    """One user's current memories grouped by conversation: members in id order and each conversation's terms."""

    sessions: bool = True  # conversations by source session where known (else every one by day)
    stamp: tuple[int, int] = (0, 0)
    last_id: int = 0
    conversation: dict[int, str] = field(default_factory=dict)  # memory id -> conversation
    members: dict[str, list[int]] = field(default_factory=dict)  # conversation -> memory ids, ascending
    terms: dict[str, Counter[str]] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    frequency: Counter[str] = field(default_factory=Counter)  # term -> conversations that hold it
    words: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # memory id -> its term counts
    _centroids: tuple[tuple[int, ...], list[str], np.ndarray] | None = field(default=None, repr=False)

    def add(self, rows: Iterable[tuple[int, str, str | None, str]]) -> None:
        """Memories (id, content, metadata, valid_from) into their conversations."""
        for mid, content, metadata, valid_from in rows:
            key = conversation_of(metadata, valid_from, self.sessions)
            self.conversation[mid] = key
            ids = self.members.setdefault(key, [])
            if ids and ids[-1] > mid:
                bisect.insort(ids, mid)
            else:
                ids.append(mid)
            counts = Counter(terms_of(content))
            self.words[mid] = tuple(counts.items())
            held = self.terms.setdefault(key, Counter())
            self.frequency.update(t for t in counts if t not in held)
            held.update(counts)
            self.lengths[key] = self.lengths.get(key, 0) + sum(counts.values())
            self.last_id = max(self.last_id, mid)

    def remove(self, mid: int) -> None:
        """A memory out of its conversation (forgotten, replaced, moved): its words no longer count there."""
        key = self.conversation.pop(mid, None)
        if key is None:
            return
        ids = self.members[key]
        del ids[bisect.bisect_left(ids, mid)]
        held = self.terms[key]
        for term, count in self.words.pop(mid, ()):
            held[term] -= count
            self.lengths[key] -= count
            if held[term] <= 0:
                del held[term]
                self.frequency[term] -= 1
                if self.frequency[term] <= 0:
                    del self.frequency[term]
        if not ids:
            del self.members[key], self.terms[key], self.lengths[key]

    def centroids(self, cached: tuple[np.ndarray, np.ndarray]) -> tuple[list[str], np.ndarray]:
        """(conversations, their unit mean vectors) from the cached matrix, kept while the matrix and the index
        stay the same."""
        ids, matrix = cached
        stamp = (id(matrix), len(ids), self.last_id, len(self.conversation), len(self.members))
        if self._centroids is not None and self._centroids[0] == stamp:
            return self._centroids[1], self._centroids[2]
        members = np.fromiter(self.conversation, dtype=np.int64, count=len(self.conversation))
        at = np.searchsorted(ids, members) if len(ids) else np.zeros(len(members), dtype=np.int64)
        inside = at < len(ids)
        inside[inside] = ids[at[inside]] == members[inside]
        keys = list(self.members)
        position = {k: i for i, k in enumerate(keys)}
        group = np.fromiter((position[self.conversation[int(m)]] for m in members[inside]), dtype=np.int64)
        sums = np.zeros((len(keys), matrix.shape[1] if matrix.ndim == 2 else 0), dtype=np.float32)
        if len(group):
            np.add.at(sums, group, matrix[at[inside]])
        norms = np.linalg.norm(sums, axis=1)
        kept = np.flatnonzero(norms > 0)
        result = ([keys[i] for i in kept], sums[kept] / norms[kept, None])
        self._centroids = (stamp, *result)
        return result

    def neighbours(self, mid: int) -> list[int]:
        """The memories just before and after ``mid`` in its conversation."""
        key = self.conversation.get(mid)
        if key is None:
            return []
        ids = self.members[key]
        at = bisect.bisect_left(ids, mid)
        return [ids[j] for j in (at - 1, at + 1) if 0 <= j < len(ids)]

    def bm25(self, query: str) -> dict[str, float]:
        """BM25 of each conversation that holds a word of ``query`` (IDF over the user's conversations)."""
        words = list(dict.fromkeys(stem(t) for t in query_terms(query)))
        count = len(self.members)
        if not words or not count:
            return {}
        average = max(sum(self.lengths.values()) / count, 1.0)
        weights = {t: math.log(1 + (count - self.frequency[t] + 0.5) / (self.frequency[t] + 0.5))
                   for t in words if self.frequency[t]}  # fmt: skip
        scores: dict[str, float] = {}
        for key, held in self.terms.items():
            norm = K1 * (1 - B + B * self.lengths[key] / average)
            score = sum(w * held[t] * (K1 + 1) / (held[t] + norm) for t, w in weights.items() if held[t])
            if score > 0:
                scores[key] = score
        return scores


class ConversationCache:
    """Per-user ``Index``es, the least recently used dropped first beyond ``CACHED_USERS``."""

    def __init__(self, users: int = CACHED_USERS) -> None:
        self.users = users
        self._entries: OrderedDict[tuple[str | None, bool], Index] = OrderedDict()
        self._lock = threading.Lock()

    def index(self, db: Database, user_id: str | None, sessions: bool = True) -> Index:
        """The user's index, current with the database: new rows are appended; after any other change the
        user's current ids and conversations are read again (not their text) and only what differs is moved.
        ``sessions``: False groups by day only (an ablation)."""
        key = (user_id, sessions)
        row = db.query_one("SELECT inserts, changes FROM memory_text_stamp WHERE id = 1") or (0, 0)
        stamp = (int(row[0]), int(row[1]))
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry.stamp == stamp:
            with self._lock:
                self._entries.move_to_end(key)
            return entry
        index = entry if entry is not None else Index(sessions)
        if entry is not None and entry.stamp[1] != stamp[1]:
            _resync(db, user_id, index)
        else:
            index.add(db.query(
                f"SELECT id, content, metadata, valid_from FROM memories WHERE user_id IS ? AND id > ? AND {CURRENT}"
                " ORDER BY id", (user_id, index.last_id),
            ))  # fmt: skip
        index.stamp = stamp
        with self._lock:
            self._entries[key] = index
            self._entries.move_to_end(key)
            while len(self._entries) > self.users:
                self._entries.popitem(last=False)
        return index

    def forget(self, user_id: str | None) -> None:
        """Drop the user's index now (after a purge)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == user_id]:
                del self._entries[key]


def _resync(db: Database, user_id: str | None, index: Index) -> None:
    """Bring ``index`` to the user's current memories after a change: drop what left, re-file what moved to
    another conversation, read the text of what is new."""
    rows = db.query(f"SELECT id, metadata, valid_from FROM memories WHERE user_id IS ? AND {CURRENT}", (user_id,))
    now = {int(mid): conversation_of(metadata, valid_from, index.sessions) for mid, metadata, valid_from in rows}
    for mid in [m for m, key in index.conversation.items() if now.get(m) != key]:
        index.remove(mid)
    missing = sorted(m for m in now if m not in index.conversation)
    for start in range(0, len(missing), 500):
        chunk = missing[start : start + 500]
        index.add(db.query(
            f"SELECT id, content, metadata, valid_from FROM memories WHERE id IN ({','.join('?' * len(chunk))})"
            " ORDER BY id", chunk,
        ))  # fmt: skip
    index._centroids = None


def neighbour_ranking(index: Index, lexical: dict[int, float]) -> list[tuple[int, float | None]]:
    """The lexical candidates and their neighbours, by their own score plus their neighbours' (best first)."""
    pool = set(lexical) | {n for mid in lexical for n in index.neighbours(mid)}
    scores = {mid: lexical.get(mid, 0.0) + sum(lexical.get(n, 0.0) for n in index.neighbours(mid)) for mid in pool}
    return [(mid, scores[mid]) for mid in sorted(scores, key=lambda m: (-scores[m], -m)) if scores[mid] > 0]


def expand(index: Index, conversations: dict[str, float], order: dict[int, float]) -> list[tuple[int, float | None]]:
    """The memories of the ``CONVERSATIONS`` best conversations, conversation by conversation: first those ranked
    in ``order`` (higher first), then the rest, newest first; at most ``EXPANDED``. Costs what is listed, not the
    size of a conversation."""
    best = sorted(conversations, key=lambda c: (-conversations[c], c))[:CONVERSATIONS]
    ranked: dict[str, list[int]] = {}
    for mid in sorted(order, key=lambda m: (-order[m], -m)):
        key = index.conversation.get(mid)
        if key is not None:
            ranked.setdefault(key, []).append(mid)
    out: list[int] = []
    for key in best:
        first = ranked.get(key, [])
        out += first
        taken = set(first)
        for mid in reversed(index.members[key]):
            if len(out) >= EXPANDED:
                break
            if mid not in taken:
                out.append(mid)
        if len(out) >= EXPANDED:
            break
    return [(mid, None) for mid in out[:EXPANDED]]


def centroid_scores(index: Index, cached: tuple[np.ndarray, np.ndarray], queries: np.ndarray) -> dict[str, float]:
    """Cosine of the (unit) queries, the best of them, to each conversation's mean vector, from the cached
    matrix (its rows unit vectors, ids ascending). Conversations without a cached vector are left out. The means
    are computed once per index and matrix."""
    keys, means = index.centroids(cached)
    if not keys:
        return {}
    cosines = (means @ queries.T).max(axis=1)
    return {key: float(c) for key, c in zip(keys, cosines, strict=True)}


def rankings(
    index: Index, lexical: dict[int, float], query: str, base: dict[int, float],
    cached: tuple[np.ndarray, np.ndarray] | None, queries: np.ndarray | None,
    *, neighbours: bool = True, conversations: bool = True, centroids: bool = True,
) -> list[list[tuple[int, float | None]]]:  # fmt: skip
    """The conversation rankings of one search: ``lexical`` the memories' lexical scores, ``base`` their fused
    score so far (the order within a conversation); ``cached`` and ``queries`` for the centroid ranking."""
    out: list[list[tuple[int, float | None]]] = []
    if not index.members:
        return out
    if neighbours and lexical:
        out.append(neighbour_ranking(index, lexical))
    if conversations:
        scores = index.bm25(query)
        if scores:
            out.append(expand(index, scores, base))
    if centroids and cached is not None and queries is not None and len(queries):
        out.append(expand(index, centroid_scores(index, cached, queries), base))
    return out
