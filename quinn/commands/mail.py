"""``quinn mail status``: what happened to the mail (counts per state, what needs the operator), and retries.

A mail is named by its ledger key ``FOLDER:UIDVALIDITY:UID`` (as the table shows it). ``--retry KEY`` takes a
``failed`` mail (a permanent SMTP rejection, or too many transient failures) or a ``quarantined`` one back, through
``engine/retry.py`` (the console's Mail page uses the same function).

``quinn mail drafts`` lists the drafts awaiting review (draft mode); ``--approve ID`` / ``--discard ID`` decide on
one (ID: its Message-ID, as listed) through ``Outbox.review``, as the console's Mail page does, audited as
``cli:<login name>``; the daemon sends an approved draft at its next pass (``engine/reviews.py``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.console import Console

from quinn.agent import audit_log
from quinn.commands.database import DATABASE_ONLY, opened_database
from quinn.commands.output import add_json_flag, answer, shorten, table
from quinn.config import Config, resolve_secrets
from quinn.db import Database
from quinn.engine.retry import key_text, retry
from quinn.errors import ConfigError
from quinn.mailbox import MailKey, MailLedger, Outbox, read_draft

ATTENTION_STATES = ("failed", "quarantined", "deferred", "handling", "retried")


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn mail status``."""
    group = sub.add_parser("mail", help="mail processing state")
    commands = group.add_subparsers(dest="mail_command", metavar="COMMAND", required=True)
    status = with_config(add_json_flag(commands.add_parser(
        "status", help="counts per state, quarantined and failed mail with reasons; --retry KEY retries one",
    )))  # fmt: skip
    status.add_argument("--retry", metavar="KEY", help="retry a failed mail (KEY as listed: FOLDER:UIDVALIDITY:UID)")
    status.add_argument("--limit", type=int, default=50, help="list at most this many mails per state (default 50)")
    status.set_defaults(handler=mail_status, secrets_of=DATABASE_ONLY)
    drafts = with_config(add_json_flag(commands.add_parser(
        "drafts", help="drafts awaiting review (draft mode); --approve ID or --discard ID decides on one",
    )))  # fmt: skip
    decide = drafts.add_mutually_exclusive_group()
    decide.add_argument("--approve", metavar="ID", help="approve a draft (ID: its Message-ID): the daemon sends it")
    decide.add_argument("--discard", metavar="ID", help="discard a draft (ID: its Message-ID): it is never sent")
    drafts.set_defaults(handler=mail_drafts, secrets_of=DATABASE_ONLY)


def parse_key(text: str) -> MailKey:
    """``INBOX:1700000000:42`` -> MailKey (the folder may itself contain ``:``)."""
    folder, _, rest = text.rpartition(":")
    folder, _, uidvalidity = folder.rpartition(":")
    try:
        return MailKey(folder, int(uidvalidity), int(rest))
    except ValueError:
        raise ConfigError(f"mail key {text!r} is not FOLDER:UIDVALIDITY:UID",
                          "copy the key from `quinn mail status`") from None  # fmt: skip


def status_report(db: Database, limit: int) -> dict[str, Any]:
    """Counts per state and the mails that need attention, newest first."""
    ledger = MailLedger(db)
    counts = ledger.counts()
    items = []
    for state in ATTENTION_STATES:
        for entry in ledger.listing(state=state, limit=limit):
            mail = entry.record
            items.append({"key": key_text(mail.key.folder, mail.key.uidvalidity, mail.key.uid), "state": mail.state,
                          "reason": mail.reason, "message_id": mail.message_id, "user": mail.user_id,
                          "attempts": mail.attempts, "next_attempt_at": mail.next_attempt_at,
                          "updated_at": entry.updated_at})  # fmt: skip
    outbox = Outbox(db).counts()
    return {"counts": counts, "total": sum(counts.values()), "outbox": outbox, "attention": items}


def mail_status(args: argparse.Namespace, config: Config) -> int:
    """Print the status, or retry one mail."""
    if args.retry:
        key = parse_key(args.retry)
        resolve_secrets(config, os.environ, ("imap",))  # the retry talks to IMAP: now the password is needed
        with opened_database(config) as db:
            done = retry(config, db, key)
        return answer(args, done, lambda out: out.print(
            f"{done['key']}: moved back to {done.get('to', 'the watched folder')}; "
            "the daemon answers it on its next pass"))  # fmt: skip
    with opened_database(config) as db:
        report = status_report(db, args.limit)

    def show(out: Console) -> None:
        counts = [{"state": s, "mails": n} for s, n in sorted(report["counts"].items())]
        out.print(table(f"Mail by state ({report['total']} in all)", ["state", "mails"], counts, empty="no mail yet"))
        outbox = [{"state": s, "replies": n} for s, n in sorted(report["outbox"].items())]
        out.print(table("Replies by delivery state", ["state", "replies"], outbox, empty="no replies yet"))
        rows = [{**item, "reason": shorten(item["reason"], 100)} for item in report["attention"]]
        out.print(table("Needs attention", ["key", "state", "reason", "message_id", "attempts", "updated_at"], rows,
                        empty="nothing: no failed, quarantined or deferred mail"))  # fmt: skip
        if any(item["state"] == "failed" for item in report["attention"]):
            out.print("Retry a failed mail with: quinn mail status --retry KEY")

    return answer(args, report, show)


def drafts_report(db: Database) -> list[dict[str, Any]]:
    """The drafts awaiting review and the reviewed ones not sent yet, oldest first."""
    rows = []
    for draft in Outbox(db).drafts():
        text = read_draft(draft.item.raw)
        rows.append({"id": draft.item.message_id, "state": draft.item.state, "to": text.to, "subject": text.subject,
                     "drafted_at": draft.drafted_at, "reviewed_by": draft.reviewed_by, "blanked": draft.blanked,
                     "error": draft.item.last_error, "body": text.body})  # fmt: skip
    return rows


def mail_drafts(args: argparse.Namespace, config: Config) -> int:
    """List the drafts, or approve or discard one (audited)."""
    if args.approve or args.discard:
        decision, message_id = ("approved", args.approve) if args.approve else ("discarded", args.discard)
        actor = audit_log.cli_actor()
        with opened_database(config) as db:
            item = Outbox(db).review(message_id, decision, actor)
            verb = "approve draft" if decision == "approved" else "discard draft"
            audit_log.record(db, actor, verb, f"draft {message_id}", user_id=item.user_id,
                             detail=f"to {', '.join(item.recipients)}")  # fmt: skip
        then = "the daemon sends it on its next pass" if decision == "approved" else "it will not be sent"
        return answer(args, {"id": message_id, "state": decision},
                      lambda out: out.print(f"{message_id}: {decision}; {then}"))  # fmt: skip
    with opened_database(config) as db:
        rows = drafts_report(db)

    def show(out: Console) -> None:
        listed = [{**row, "body": shorten(row["body"], 80)} for row in rows]
        out.print(table("Drafts awaiting review", ["id", "state", "to", "subject", "drafted_at", "body"], listed,
                        empty="no drafts awaiting review"))  # fmt: skip
        if any(row["state"] == "drafted" for row in rows):
            out.print("Decide with: quinn mail drafts --approve ID  (or --discard ID)")

    return answer(args, rows, show)
