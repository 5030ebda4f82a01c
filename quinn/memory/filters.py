"""Which memories a read sees: one parameterised WHERE clause shared by ``get_all`` and every search.

By default only what holds now: active, not superseded, not expired. ``as_of`` asks what held at a past moment
(the versions valid then); ``include_inactive`` lifts the validity rules altogether (history, forgotten rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from quinn.errors import StoreError
from quinn.memory.models import SCOPES, iso, utcnow
from quinn.users import fold_address

FILTER_NAMES = (
    "scope", "domain", "type", "tags", "tags_mode", "since", "until", "min_importance", "include_inactive",
    "include_global", "as_of",
)  # fmt: skip
"""The keyword filters ``get_all``, ``search`` and ``memory_filter`` accept."""


def memory_filter(
    user_id: str | None,
    *,
    scope: str | None = None,
    domain: str | None = None,
    type: str | None = None,
    tags: Sequence[str] | str | None = None,
    tags_mode: str = "any",
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    min_importance: float | None = None,
    include_inactive: bool = False,
    include_global: bool = False,
    as_of: datetime | str | None = None,
    alias: str = "m",
) -> tuple[str, list[Any]]:
    """A parameterised WHERE clause for one user's memories; filters compose with AND.

    ``tags`` with ``tags_mode`` "any" (at least one) or "all"; ``since``/``until`` bound ``valid_from`` (when the
    memory started to hold), ``until`` exclusive; ``user_id`` None selects global memories only, and
    ``include_global`` adds them to a user's. Bad filter values raise ``StoreError`` naming the filter.
    """
    a = alias
    clauses: list[str] = []
    params: list[Any] = []
    if user_id is None:
        clauses.append(f"{a}.user_id IS NULL")
    elif include_global:
        clauses.append(f"({a}.user_id = ? OR {a}.user_id IS NULL)")
        params.append(normalise_user(user_id))
    else:
        clauses.append(f"{a}.user_id = ?")
        params.append(normalise_user(user_id))
    if as_of is not None:
        moment = _moment("as_of", as_of)
        clauses.append(
            f"{a}.valid_from <= ? AND ({a}.valid_to IS NULL OR {a}.valid_to > ?)"
            f" AND ({a}.expires_at IS NULL OR {a}.expires_at > ?)"
        )
        params += [moment, moment, moment]
        if not include_inactive:
            clauses.append(f"{a}.active = 1")
    elif not include_inactive:
        clauses.append(f"{current(a)} AND ({a}.expires_at IS NULL OR {a}.expires_at > ?)")
        params.append(iso(utcnow()))
    if scope is not None and scope not in SCOPES:
        raise StoreError(f"filter scope {scope!r} is not one of {', '.join(SCOPES)}")
    for column, value in (("scope", scope), ("domain", domain), ("type", type)):
        if value is not None:
            clauses.append(f"{a}.{column} = ?")
            params.append(value)
    if isinstance(tags, str):  # one tag given bare: a string is a Sequence of characters, not of tags
        tags = [tags]
    if tags:
        if tags_mode not in ("any", "all"):
            raise StoreError(f"filter tags_mode {tags_mode!r} must be 'any' or 'all'")
        joiner = " AND " if tags_mode == "all" else " OR "
        clauses.append(
            "(" + joiner.join(f"EXISTS (SELECT 1 FROM json_each({a}.tags) WHERE value = ?)" for _ in tags) + ")"
        )
        params += list(tags)
    if since is not None:
        clauses.append(f"{a}.valid_from >= ?")
        params.append(_moment("since", since))
    if until is not None:
        clauses.append(f"{a}.valid_from < ?")
        params.append(_moment("until", until))
    if min_importance is not None:
        clauses.append(f"{a}.importance >= ?")
        params.append(float(min_importance))
    return " AND ".join(clauses), params


def normalise_user(user_id: str | None) -> str | None:
    """User ids are email addresses: compared trimmed, ASCII letters lower-cased, as ``canonical_address``
    makes them (a local part's other letters are the mailbox's own: "Àlice@" and "àlice@" may be two people)."""
    return fold_address(user_id.strip()) if user_id else None


def _moment(name: str, value: datetime | str) -> str:
    try:
        moment = iso(value)
    except (TypeError, ValueError):
        raise StoreError(f"filter {name} {value!r} is not a date", "use ISO 8601, e.g. 2026-07-01") from None
    assert moment is not None
    return moment


def current(alias: str = "") -> str:
    """The one rule of a current memory, for a query that names the table ``alias`` (see ``CURRENT``)."""
    p = f"{alias}." if alias else ""
    return f"{p}active = 1 AND {p}superseded_by IS NULL AND {p}valid_to IS NULL"


#: The current version of a memory: not forgotten or archived, not replaced by an update, not ended (expiry is a
#: clock's question, asked by the caller). Every query for current memories uses it (``memory_filter`` too).
CURRENT = current()

#: Rows out of use: forgotten or archived, an old version, or ended; a memory that merely expired is not.
NOT_CURRENT = f"NOT ({CURRENT})"

#: The condition of the partial index ``memories_retracted`` (migration 0008), word for word: SQLite uses a
#: partial index only for a query that repeats its condition. No longer current, or may expire.
MAY_BE_RETRACTED = "(active = 0 OR superseded_by IS NOT NULL OR valid_to IS NOT NULL OR expires_at IS NOT NULL)"

#: Where a memory's age is counted from, everywhere (search's effective importance, decay, cleanup): its last use,
#: or when Quinn learnt it. Not ``valid_from``: a fact from an old mail processed today is new to Quinn.
AGE_ANCHOR = "coalesce(last_accessed_at, created_at)"
