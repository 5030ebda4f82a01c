"""The periodic digest (issue 15): "here is what I learnt about you", and corrections by replying to it.

Every ``[scheduler] digest_every_days`` (0, the default: never) each user who has not opted out of memory and
of whom Quinn learnt something new since their last digest gets one mail listing those memories, numbered, the
most important first. Three steps, each owned here:

1. ``plan`` (the ``digest`` job): who is due and which memories, written as a ``digests`` row (migration 0012).
   The job knows no mail settings; a row is the promise of a mail.
2. ``compose`` (the daemon, after a folder pass): the row becomes a mail to the user's own address alone (what
   carries a user's memory goes only to that user), marked ``Auto-Submitted: auto-generated`` (RFC 3834 §5)
   so responders do not answer it; its Message-ID is recorded on the row, and it goes through the outbox and
   delivery like a reply (sent exactly once, a copy filed). Below the list, what else shapes replies in short
   (``known.in_brief``: the short-term state notes, how many summaries, reviews, links and files), unless the
   user opted out since the plan.
3. ``corrections`` (the agent, on a reply to a digest by its owner): "forget 2", "3 and 5 are wrong", "the
   second one is wrong" forget those items (or the versions that replaced them since); the reply lists each
   change back (``memory_mail.changes_footer``). A correction that also says what is right ("number 2 is
   wrong, I live in Braga now") is learnt by extraction like any statement.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, formataddr

from quinn.agent import consent, known
from quinn.clock import iso
from quinn.db import Database, Transaction
from quinn.mailbox import LOOP_HEADER, Reply, html_alternative
from quinn.memory import CURRENT, Memory, MemoryStore

TEMPLATE = "digest"  # the outbox's template column: a digest, not a reply to a mail
_CURRENT = f"{CURRENT} AND immutable = 0"  # an operator's immutable memories are not the user's to correct
_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
             "eleventh", "twelfth")  # fmt: skip
_ITEM = r"(?:(?:number|no\.?|item|#)\s*)?"
_NUMBERS = rf"{_ITEM}\d{{1,3}}(?:\s*(?:,|and|&)\s*{_ITEM}\d{{1,3}})*"
_ORDINAL = rf"(?:the\s+)?(?:{'|'.join(_ORDINALS)})(?:\s+(?:one|item|thing|memory))?"
_WRONG = r"(?:is|are)\s+(?:wrong|incorrect|not\s+true|untrue|false|outdated|no\s+longer\s+true)"
_FORGET_ITEMS = re.compile(rf"\b(?:forget|delete|remove)\s+({_NUMBERS}|{_ORDINAL})", re.I)
# "2 and 5 are wrong": the items first, then what follows them. As one pattern, every number of a long list
# ("1, 1, 1, ...") began a match that ran to the list's end and failed: quadratic (16,000 characters: 5 s).
_ITEMS = re.compile(rf"(?<![\w.])({_NUMBERS}|{_ORDINAL})", re.I)
_WRONG_AFTER = re.compile(rf"\s+{_WRONG}", re.I)


@dataclass(frozen=True)
class Planned:
    """A digest the job decided on, not yet mailed."""

    id: int
    user_id: str
    since: str
    memory_ids: tuple[int, ...]


def plan(db: Database, every_days: float, max_items: int, now: datetime) -> list[int]:
    """The digest job: a ``digests`` row for every user due one; returns their ids. Due: the last digest is
    ``every_days`` old or more (or there is none), the user has not opted out, and memories were learnt since
    (the first digest covers the last ``every_days``). Nothing is due when ``every_days`` is 0."""
    if every_days <= 0:
        return []
    window = iso(now - timedelta(days=every_days))
    planned = []
    users = db.query(
        f"SELECT DISTINCT user_id FROM memories WHERE user_id IS NOT NULL AND {_CURRENT}"
        " AND user_id NOT IN (SELECT user_id FROM memory_consent) ORDER BY user_id"
    )
    for (user,) in users:
        last = db.query_one(
            "SELECT created_at, memory_ids FROM digests WHERE user_id = ? ORDER BY created_at DESC, id DESC LIMIT 1",
            (user,),
        )
        if last is not None and last[0] > window:
            continue
        since = last[0] if last else window
        # Times are kept to the second: a memory learnt in the second the last digest was planned is new unless
        # that digest listed it.
        listed = last[1] if last else "[]"
        rows = db.query(
            f"SELECT id FROM memories WHERE user_id = ? AND {_CURRENT} AND created_at >= ?"
            " AND id NOT IN (SELECT value FROM json_each(?)) ORDER BY importance DESC, created_at, id LIMIT ?",
            (user, since, listed, max_items),
        )
        if not rows:
            continue
        with db.transaction() as tx:
            tx.execute(
                "INSERT INTO digests (user_id, since, created_at, memory_ids) VALUES (?, ?, ?, ?)",
                (user, since, iso(now), json.dumps([int(r[0]) for r in rows])),
            )
            planned.append(int(tx.query("SELECT last_insert_rowid()")[0][0]))
    return planned


def unsent(db: Database) -> list[Planned]:
    """Digests planned and not yet composed, oldest first."""
    return [
        Planned(int(i), user, since, tuple(int(m) for m in json.loads(ids)))
        for i, user, since, ids in db.query(
            "SELECT id, user_id, since, memory_ids FROM digests WHERE message_id IS NULL ORDER BY id"
        )
    ]


def compose(
    store: MemoryStore, digest: Planned, *, own_address: str, own_name: str, now: datetime
) -> tuple[Reply, list[int]] | None:
    """The mail for a planned digest and the memory ids it lists (those still current); None, and the row
    deleted, when nothing of it is current any more. Deterministic per row: composing again after a crash gives
    the same Message-ID, which the outbox keeps once. ``composed`` records it once the outbox has the mail."""
    memories = [m for m in (store.get(i, user_id=digest.user_id) for i in digest.memory_ids) if m and m.current]
    if not memories:
        store.db.execute("DELETE FROM digests WHERE id = ?", (digest.id,))
        return None
    message_id = f"<quinn.digest.{digest.id}@{own_address.rsplit('@', 1)[1]}>"
    # What else shapes replies (issue 35), in short: the mail goes to the user alone, and only while they let
    # Quinn remember them (an opt-out since the plan leaves it out).
    shaping = (
        "" if consent.opted_out(store.db, digest.user_id) else known.in_brief(known.shaping(store, digest.user_id))
    )
    body = digest_body(memories, digest.since[:10], shaping)
    subject = f"What I learnt about you since {digest.since[:10]}"
    msg = EmailMessage(policy=SMTP)
    msg["From"] = formataddr((own_name, own_address))
    msg["To"] = digest.user_id
    msg["Subject"] = subject
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = message_id
    msg["Auto-Submitted"] = "auto-generated"  # RFC 3834 §5: not a reply, and no responder should answer it
    msg["X-Auto-Response-Suppress"] = "All"
    msg[LOOP_HEADER] = own_address
    msg.set_content(body)
    msg.add_alternative(html_alternative(body), subtype="html")
    return Reply(message_id, [digest.user_id], subject, body, msg.as_bytes()), [m.id for m in memories]


def composed(db: Database, digest_id: int, message_id: str, memory_ids: Sequence[int]) -> None:
    """The digest's mail is in the outbox: its Message-ID and the list as mailed (replies are read against it)."""
    db.execute("UPDATE digests SET message_id = ?, memory_ids = ? WHERE id = ?",
               (message_id, json.dumps(list(memory_ids)), digest_id))  # fmt: skip


def digest_body(memories: Sequence[Memory], since: str, shaping: str = "") -> str:
    """The digest's text: the numbered list, what else shapes replies (``known.in_brief``) and how to correct
    it. Memory text is data, shown as stored."""
    lines = [f"Hi,\n\nHere is what I learnt about you since {since} ({len(memories)} "
             f"{'thing' if len(memories) == 1 else 'things'}):\n"]  # fmt: skip
    for n, memory in enumerate(memories, 1):
        unsure = " (not sure)" if memory.metadata.get("confidence") == "low" else ""
        lines.append(f"{n}. {' '.join(memory.content.split())}{unsure}")
    if shaping:
        lines.append(f"\nAlso shaping my replies:\n{shaping}")
    lines.append(
        '\nIf something is wrong, reply to this email: "forget 2", "3 and 5 are wrong" or "the second one is '
        'wrong". To tell me what is right instead, just say it ("I live in Braga now"). Write "what do you know '
        'about me" for everything I remember, or "stop remembering me".'
    )
    return "\n".join(lines)


def numbered(db: Database, message_id: str | None, user_id: str) -> list[int] | None:
    """The memory ids of the user's digest with ``message_id``, in the mail's order; None when it is not one
    (or is someone else's: a reply to another user's digest corrects nothing)."""
    if not message_id:
        return None
    row = db.query_one("SELECT memory_ids FROM digests WHERE message_id = ? AND user_id = ?", (message_id, user_id))
    return [int(i) for i in json.loads(row[0])] if row else None


def corrections(text: str) -> list[int]:
    """The item numbers a reply to a digest marks wrong or asks to forget, in order, each once. Pure."""
    found: list[tuple[int, int]] = []  # (position in the text, item number)
    wrong = (m for m in _ITEMS.finditer(text) if _WRONG_AFTER.match(text, m.end()))
    for match in (*_FORGET_ITEMS.finditer(text), *wrong):
        words = match.group(1).lower()
        numbers = [int(n) for n in re.findall(r"\d+", words)]
        numbers += [_ORDINALS.index(w) + 1 for w in re.findall(r"[a-z]+", words) if w in _ORDINALS]
        found += [(match.start(), n) for n in numbers if n > 0]
    seen: list[int] = []
    for _, number in sorted(found):
        if number not in seen:
            seen.append(number)
    return seen


def current_version(store: MemoryStore, memory_id: int, user_id: str) -> Memory | None:
    """The memory an item names as it is now: the item itself, or what replaced it since the digest (an update
    supersedes a row with a new one); None when it was forgotten, archived or ended."""
    memory = store.get(memory_id, user_id=user_id)
    for _ in range(20):  # a chain of updates; bounded, as a loop in bad data must not hang a reply
        if memory is None or memory.current or memory.superseded_by is None:
            break
        memory = store.get(memory.superseded_by, user_id=user_id)
    return memory if memory is not None and memory.current else None


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The user's digests, in a purge."""
    return {"digests": tx.delete("digests", "user_id = ?", (user,))}
