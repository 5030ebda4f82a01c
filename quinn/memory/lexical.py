"""The lexical leg of retrieval: FTS5 BM25 over the memories, scored as the share of the query it matches.

The score is BM25 divided by the query's total IDF ("coverage", capped at 1): unlike dividing by the best BM25 of
the query, it stays low when the query has no good lexical match at all (search.py explains the fusion).

Common terms are left out of the MATCH when the query's terms together would read more than ``POSTINGS_BUDGET``
index entries, rarest first, as Lucene's common-terms query (``cutoff_frequency``) does: FTS5 computes BM25 for
every matching row before it can sort, so one word found in a tenth of 100k memories costs tens of milliseconds,
while such a word carries little IDF (log(9.5) ≈ 2.2 against ≈ 11 for a word found once) and the vector leg
covers its meaning. Left-out terms still count in the query's IDF mass: a memory matching only them is not a
good lexical match. Small stores never reach the budget, so their ranking is plain BM25.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

from quinn.db import Database, Row
from quinn.memory.models import memory_columns

CANDIDATES = 50
BM25 = "bm25(memories_fts, 1.0, 1.0, 0.0)"  # content, tags; the owner column weighs nothing
MAX_TERMS = 48
POSTINGS_BUDGET = 5000  # index entries the MATCH may read before common terms are left out
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
STOPWORDS = frozenset(
    (
        "a an and are as at be but by can could did do does for from had has have hi hello how i i'm if in "
        "into is it its just me my no not of on or our please so that the their them then there these they "
        "this to up us was we were what when where which who why will with would you your yours dear thanks "
        "thank regards best "
    ).split()
)


def content_words(text: str) -> set[str]:
    """Lower-cased words without stopwords."""
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS and len(w) > 1}


_POSSESSIVE = re.compile(r"['’]s$")


def query_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """The first ``max_terms`` distinct content words, in order of appearance (the leading chunks count most). A
    possessive is searched as its word ("Phoebe's" as "phoebe"): the index splits at the apostrophe, so
    "phoebe's" would match only "Phoebe's" and never "Phoebe"."""
    words: list[str] = []
    for match in _WORD.finditer(text):
        word = _POSSESSIVE.sub("", match.group(0).lower())
        if word not in STOPWORDS and len(word) > 1 and word not in words:
            words.append(word)
    return words[:max_terms]


def joined_terms(text: str, max_terms: int = MAX_TERMS) -> list[str]:
    """Two neighbouring content words written as one ("step father" → "stepfather", "e-mail" → "email"): people
    write compounds both ways, and a stemmer keeps them apart. Only pairs of letters apart by spaces or a hyphen,
    neither a stopword, in the order of the text; none that is already a word of it. Searched beside the words,
    each counted only where the index holds it (a join found nowhere adds nothing)."""
    found = list(_WORD.finditer(text))
    own = {m.group(0).lower() for m in found}
    joined: list[str] = []
    for first, second in itertools.pairwise(found):
        between = text[first.end() : second.start()]
        a, b = first.group(0).lower(), second.group(0).lower()
        if between.strip(" -") or not between or a in STOPWORDS or b in STOPWORDS or not (a + b).isalpha():
            continue  # apart by more than a space or a hyphen (a comma, a full stop, a line), or a stopword
        if a + b not in own and a + b not in joined:
            joined.append(a + b)
    return joined[:max_terms]


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: the terms OR-ed in the content and tags columns, each quoted, so no user text
    becomes FTS syntax (and no word reaches the owner column)."""
    if not terms:
        return None
    return "{content tags} : (" + " OR ".join(_quoted(t) for t in terms) + ")"


def owner_token(user_id: str | None) -> str:
    """The ``owner_key`` token of a user's memories (migration 0006): the id's UTF-8 in hex between "o" and "z"."""
    return "o" + (user_id or "").encode("utf-8").hex() + "z"


def owned(match: str, owners: Sequence[str | None]) -> str:
    """``match`` narrowed to the memories of ``owners`` (user ids, None for global memories)."""
    return "(" + " OR ".join(f"owner_key : {_quoted(owner_token(o))}" for o in owners) + f") AND {match}"


def fts_query(text: str, max_terms: int = MAX_TERMS) -> str | None:
    """The MATCH expression for ``text``: its content words OR-ed (``query_terms``, ``match_expression``)."""
    return match_expression(query_terms(text, max_terms))


def idf(total: float, found: float) -> float:
    """FTS5's IDF (fts5_aux.c): log((N - n + 0.5) / (n + 0.5)), floored at 1e-6."""
    return max(math.log((total - found + 0.5) / (found + 0.5)), 1e-6)


def document_frequencies(db: Database, terms: Sequence[str]) -> tuple[int, list[int]]:
    """(rows in the index, rows matching each term), in one statement: counting reads no BM25."""
    counts = ", ".join("(SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?)" for _ in terms)
    row = db.query_one(f"SELECT (SELECT count(*) FROM memories), {counts}", [match_expression([t]) for t in terms])
    if not row:
        return 0, [0] * len(terms)
    return int(row[0]), [int(n) for n in row[1:]]


def within_budget(terms: Sequence[str], frequencies: Sequence[int], budget: int = POSTINGS_BUDGET) -> list[str]:
    """The terms to MATCH: rarest first while their postings fit ``budget``, and always the rarest one found."""
    kept: list[str] = []
    used = 0
    for frequency, term in sorted((f, t) for t, f in zip(terms, frequencies, strict=True) if f > 0):
        if kept and used + frequency > budget:
            break
        kept.append(term)
        used += frequency
    return kept


def owned_frequencies(db: Database, owners: Sequence[str | None], terms: Sequence[str]) -> tuple[int, list[int]]:
    """(rows of the owners in the index, rows of theirs matching each term), in one statement."""
    anyone = "(" + " OR ".join(f"owner_key : {_quoted(owner_token(o))}" for o in owners) + ")"
    counts = "".join(", (SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?)" for _ in terms)
    row = db.query_one(
        f"SELECT (SELECT count(*) FROM memories_fts WHERE memories_fts MATCH ?){counts}",
        [anyone, *(owned(match_expression([t]) or "", owners) for t in terms)],
    )
    if not row:
        return 0, [0] * len(terms)
    return int(row[0]), [int(n) for n in row[1:]]


def common_to_owners(
    db: Database, owners: Sequence[str | None], terms: Sequence[str], frequencies: Sequence[int],
    owned_rows: int | None = None,
) -> set[str]:  # fmt: skip
    """The terms found in more than half of the owners' memories, once they hold ``CANDIDATES`` or more.

    The search returns the owners' memories only, so their own statistics are the ones that say what a word is
    worth, and over them BM25's IDF, log((N - n + 0.5) / (n + 0.5)), is zero or below for such a term. FTS5
    scores with the whole index's statistics instead, where a speaker's name that opens half of a user's chat
    turns is rare (other users never write it): it then ranks "Arturo: Mood" first for every question about
    Arturo (issue 14, bench/README.md). Below ``CANDIDATES`` memories every match is a candidate anyway. Only
    terms found that often in the whole index are counted, so most queries read nothing more.
    """
    floor = max(CANDIDATES, owned_rows or 0)
    suspects = [t for t, n in zip(terms, frequencies, strict=True) if 2 * n > floor]
    if not suspects:
        return set()
    rows, counts = owned_frequencies(db, owners, suspects)
    if rows < CANDIDATES:
        return set()
    return {t for t, n in zip(suspects, counts, strict=True) if 2 * n > rows}


def lexical_scores(
    db: Database, where: str, params: Sequence[Any], text: str, columns: str | None = None, *,
    owners: Sequence[str | None] | None = None, owned_rows: int | None = None, budget: int = POSTINGS_BUDGET,
) -> tuple[dict[int, tuple[int, float]], dict[int, Row]]:  # fmt: skip
    """BM25 rank and coverage (BM25 / the query's total IDF, capped at 1) of the best matches under ``where``,
    and their rows, keyed by memory id. ``columns``: what the rows hold, of ``memories m`` with the id first
    (default every column, ``memory_columns("m")``).

    ``owners``: the users (None: global) that ``where`` keeps; the MATCH then reads only their postings, unless
    they hold half the index or more (``owned_rows``, when known), where the extra AND costs more than it saves.
    Terms common to the owners' memories (``common_to_owners``) are left out of the MATCH and of the IDF mass,
    unless every term found is: then the rarest stays.
    """
    words = query_terms(text)
    if not words:
        return {}, {}
    terms = [*words, *joined_terms(text)]
    total, frequencies = document_frequencies(db, terms)
    own_words = set(words)
    if owners:
        common = common_to_owners(db, owners, terms, frequencies, owned_rows)
        present = [(n, t) for t, n in zip(terms, frequencies, strict=True) if n > 0]
        if common and all(t in common for _n, t in present):
            common.discard(min(present)[1])  # all common: the rarest still matches, as in ``within_budget``
        kept = [(t, n) for t, n in zip(terms, frequencies, strict=True) if t not in common]
        terms, frequencies = [t for t, _n in kept], [n for _t, n in kept]
    match = match_expression(within_budget(terms, frequencies, budget))
    if match is None:  # no term occurs anywhere
        return {}, {}
    if owners and (owned_rows is None or 2 * owned_rows < total):
        match = owned(match, owners)
    rows = db.query(
        f"SELECT {BM25}, {columns or memory_columns('m')} FROM memories_fts JOIN memories m"
        f" ON m.id = memories_fts.rowid WHERE memories_fts MATCH ? AND {where} ORDER BY {BM25} LIMIT ?",
        [match, *params, CANDIDATES],
    )
    # A join is another spelling of two words already counted: it adds no IDF to the query's mass.
    mass = max(sum(idf(total, n) for t, n in zip(terms, frequencies, strict=True) if t in own_words), 1e-6)
    scores: dict[int, tuple[int, float]] = {}
    found: dict[int, Row] = {}
    for rank, (bm25, *values) in enumerate(rows, start=1):
        mid = int(values[0])
        found[mid] = tuple(values)
        # FTS5's bm25() is negative (lower is better); a memory matching every query word once scores about -mass.
        scores[mid] = (rank, min(1.0, -float(bm25) / mass))
    return scores, found
