"""The person's whole history, when it fits (issue 32): their past mails' own text, dated, oldest first.

For someone with a short history, the whole of it is a better prompt than retrieved fragments: nothing is missed
and the order of events is plain. Only the mail recall may show is eligible (``passages.passage_filter``: not the
thread buffer, not mail memory has retracted or that another domain's, with others on the mail only what each of
them saw), each mail once, as its stored clean text; attached files and the knowledge base stay with retrieval.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from quinn.db import Database
from quinn.memory.filters import normalise_user
from quinn.memory.passages import Passage, passage_filter, retracted_messages


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
    mails = (
        "FROM messages m WHERE m.id IN (SELECT p.message_row FROM passages p"
        f" WHERE {where} AND p.direction = 'in' AND p.document_id IS NULL)"
    )
    count, chars = db.query_one(f"SELECT count(*), coalesce(sum(length(m.body)), 0) {mails}", params) or (0, 0)
    if not count or int(chars) > max_chars:
        return None
    rows = db.query(
        f"SELECT m.id, m.message_id, m.sent_at, m.subject, m.body, m.from_addr, m.to_addrs {mails}"
        " ORDER BY m.sent_at, m.id",
        params,
    )
    history = []
    for row_id, message_id, sent_at, subject, body, sender, recipients in rows:
        try:
            audience = frozenset({sender, *json.loads(recipients or "[]")} - {""})
        except ValueError:
            audience = frozenset({sender})
        history.append(Passage(int(row_id), user, message_id, "in", sent_at, subject or "", 0, " ".join(body.split()),
                               audience))  # fmt: skip
    return history
