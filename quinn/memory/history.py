"""The person's whole history, when it fits (issue 32): their past mails' own text, dated, oldest first.

For someone with a short history, the whole of it is a better prompt than retrieved fragments: nothing is missed
and the order of events is plain. Only the mail recall may show is eligible (``passages.passage_filter``: not the
thread buffer, not mail memory has retracted or that another domain's, with others on the mail only what each of
them saw), each mail once, as the text of its passages: what recall would show, so a secret masked there (issue
35) or a fact a forget took out of them is not brought back by the mail's stored body; attached files and the
knowledge base stay with retrieval.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from quinn.db import Database
from quinn.memory.filters import normalise_user
from quinn.memory.passages import OVERLAP_CHARS, Passage, passage_filter, retracted_messages


def whole_history(
    db: Database, user_id: str, max_chars: int, *, exclude_message_ids: Sequence[str] = (),
    others: Sequence[str] = (), domains: Sequence[str] = (),
) -> list[Passage] | None:  # fmt: skip
    """The user's own recallable mails as one passage each, oldest first, when their text together holds at most
    ``max_chars`` characters (and there is at least one); None otherwise (then recall retrieves). The size is
    summed in SQL first: a long history is never read whole."""
    user = normalise_user(user_id)
    if not user or max_chars <= 0:
        return None
    where, params = passage_filter(user, exclude_message_ids, others, retracted_messages(db, user, domains))
    mine = f"{where} AND p.direction = 'in' AND p.document_id IS NULL"
    # Summed over the passages (their overlaps counted twice: an overestimate, on the safe side).
    count, chars = db.query_one(
        f"SELECT count(DISTINCT p.message_row), coalesce(sum(length(p.content)), 0) FROM passages p WHERE {mine}",
        params,
    ) or (0, 0)
    if not count or int(chars) > max_chars:
        return None
    rows = db.query(
        f"SELECT p.message_row, p.message_id, p.sent_at, p.subject, p.content, p.audience FROM passages p"
        f" WHERE {mine} ORDER BY p.sent_at, p.message_row, p.position",
        params,
    )
    history: list[Passage] = []
    for row, message_id, sent_at, subject, content, audience in rows:
        if history and history[-1].id == int(row):
            last = history[-1]
            history[-1] = Passage(last.id, user, last.message_id, "in", last.sent_at, last.subject, 0,
                                  _joined(last.content, content), last.audience)  # fmt: skip
            continue
        try:
            seen = frozenset(json.loads(audience or "[]"))
        except ValueError:
            seen = frozenset()
        history.append(Passage(int(row), user, message_id, "in", sent_at, subject or "", 0, " ".join(content.split()),
                               seen))  # fmt: skip
    return history


def _joined(text: str, following: str) -> str:
    """``text`` and the next passage of the same mail, without the sentences the two share (a passage begins with
    the last ``OVERLAP_CHARS`` or so of the one before: passages.split_passages)."""
    following = " ".join(following.split())
    for k in range(min(len(following), len(text), 3 * OVERLAP_CHARS), 0, -1):
        # At a word's end, and more than a few characters: not a full stop that both happen to share.
        if k > 15 and following[k : k + 1] in ("", " ") and text.endswith(following[:k]):
            return f"{text}{following[k:]}"
    return f"{text} {following}"
