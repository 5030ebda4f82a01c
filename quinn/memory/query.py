"""What a search reads from a question besides its words: the days it names, its parts, and the rank fusion.

Measured on the real development set of issue 31 (bench/real_recall.py): a question that names a day ("what did
we say about the trip on Wednesday 26 February?") is answered by memories of that day, which neither leg can
find from the words "Wednesday" and "February" alone (every memory of a user carries a date); a question in two
parts ("..., and about X?") is two searches, and one leg over both parts finds the better-matched part only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import date

from quinn.memory.lexical import content_words

RRF_K = 60  # Cormack et al. 2009; not tuned here (bench/real_recall.py shows k=60 against the legs alone)
MAX_DAYS = 4
MAX_PARTS = 4
SHORT_QUERY = 300  # characters: longer text is an email, cut into chunks by ``search.query_chunks`` instead

_MONTHS = (
    "january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november",
    "december",
)  # fmt: skip
_MONTH = r"(?P<month>" + "|".join(m[:3] + f"(?:{m[3:]})?" if len(m) > 3 else m for m in _MONTHS) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>(?:19|20)\d\d))?"
_DAY_MONTH = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b{_YEAR}", re.IGNORECASE)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\s+{_DAY}\b{_YEAR}", re.IGNORECASE)
_ISO = re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b")
_PARTS = re.compile(r",\s*and\s+(?=\w)|;\s*|\band also\b", re.IGNORECASE)


def _month_number(name: str) -> int:
    if name.isdigit():
        return int(name)
    return next(i for i, m in enumerate(_MONTHS, start=1) if m.startswith(name.lower()[:3]))


def named_days(text: str) -> list[tuple[int | None, int, int]]:
    """The calendar days a question names, as (year or None, month, day), at most ``MAX_DAYS``, in order.

    "26 February 2025", "Wednesday 26 Feb", "February 26th, 2025", "2025-02-26"; a day without a year matches that
    day of any year. Relative days ("yesterday") are not read: the question's own date is not known here.
    Impossible dates (31 February) are dropped.
    """
    found: list[tuple[int | None, int, int]] = []
    for pattern in (_ISO, _DAY_MONTH, _MONTH_DAY):
        for m in pattern.finditer(text):
            year = int(m.group("year")) if m.group("year") else None
            month, day = _month_number(m.group("month")), int(m.group("day"))
            try:
                date(year or 2000, month, day)  # 2000: a leap year, so 29 February without a year stands
            except ValueError:
                continue
            if (year, month, day) not in found:
                found.append((year, month, day))
    return found[:MAX_DAYS]


# What makes a question look back in time (issue 32): without one, the version a memory replaced is left out of
# the prompt. The 1.5B of bench/long_memory, asked "Which city do I live in at the moment?", answered the city of
# "earlier: We live in Split now, ... (until 2025-03-19)" on the line of the move, and the old commute from it.
_PAST_WORDS = re.compile(
    r"\b(?:used to|before|previous(?:ly)?|earlier|formerly|originally|at (?:that|the) time|back (?:then|when|in)"
    r"|ago|last (?:year|month|spring|summer|autumn|fall|winter)|in the past|old|former|first|change[ds]?"
    r"|switch(?:ed)?)\b",
    re.IGNORECASE,
)  # fmt: skip
_YEAR_NUMBER = re.compile(r"\b(?:19|20)\d\d\b")
# A month as a name, capitalised ("march" is a verb); "May" only beside a day, or after "in"/"of" ("May I ask").
_MONTH_NAME = re.compile(
    r"\b(?:" + "|".join(m.capitalize() for m in _MONTHS if m != "may") + r")\b"
    r"|\b(?:[Ii]n|[Oo]f|[Ss]ince|[Uu]ntil) May\b|\bMay \d|\d(?:st|nd|rd|th)? May\b"
)  # fmt: skip


def looks_back(text: str, today: date) -> bool:
    """Whether ``text`` (an email) may ask what held before now: it says "before", "used to", "changed", ...,
    names a month, or a year up to ``today``'s. Not "still" or "no longer": they ask what holds now, and an old
    value shown beside the new invites "yes, still". English words; a year in digits counts in any language."""
    if _PAST_WORDS.search(text) or _MONTH_NAME.search(text) or named_days(text):
        return True
    return any(int(year) <= today.year for year in _YEAR_NUMBER.findall(text))


def day_clause(days: Sequence[tuple[int | None, int, int]], column: str) -> tuple[str, list[str]]:
    """SQL that keeps rows whose ISO timestamp ``column`` falls on one of ``days`` (UTC calendar days)."""
    clauses, params = [], []
    for year, month, day in days:
        if year is None:
            clauses.append(f"substr({column}, 6, 5) = ?")
            params.append(f"{month:02d}-{day:02d}")
        else:
            clauses.append(f"substr({column}, 1, 10) = ?")
            params.append(f"{year:04d}-{month:02d}-{day:02d}")
    return "(" + " OR ".join(clauses) + ")", params


def query_parts(text: str) -> list[str]:
    """A short question's parts when it asks for several things ("..., and about X?"; "...; ..."), else [].

    Each part must hold a content word; at most ``MAX_PARTS``. Long text (an email) is not split here.
    """
    flat = " ".join(text.split())
    if len(flat) > SHORT_QUERY:
        return []
    parts = [p.strip(" ,;") for p in _PARTS.split(flat)]
    parts = [p for p in parts if p and content_words(p)]
    return parts[:MAX_PARTS] if len(parts) > 1 else []


def rrf(rankings: Iterable[Sequence[int] | Sequence[tuple[int, float | None]]], k: int = RRF_K) -> dict[int, float]:
    """Reciprocal rank fusion: per id, the sum of 1 / (k + rank) over the rankings that hold it.

    A ranking is ids best first, or (id, score) pairs best first: then equal scores (not None) share the better
    rank (two copies of one text are equally relevant, and importance and recency, not the order of insertion,
    should tell them apart)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        rank, previous = 0, None
        for position, entry in enumerate(ranking, start=1):
            item, score = entry if isinstance(entry, tuple) else (entry, None)
            if score is None or score != previous:
                rank = position
            previous = score
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused
