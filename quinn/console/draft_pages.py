"""Drafts awaiting review on the Mail page (draft mode, ``[smtp] reply_mode = "draft"``): each draft with its
recipients, subject, time and text, and Approve, Edit (a new text, then approved) and Discard for the admin role.

The console never sends mail: a decision is written through the outbox (``Outbox.review``) and the daemon sends an
approved draft at its next pass and removes reviewed drafts from the drafts folder (``engine/reviews.py``). Each
decision is one audit row ("approve draft", "edit draft", "discard draft"; never the text). The text is the
model's answer to someone's mail, so it is shown escaped, as everything is.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quinn.agent import audit_log, reply_trace
from quinn.console.app import SECURITY_HEADERS, Console, Endpoint, FormError, audit, form_of
from quinn.db import Database
from quinn.mailbox import MAX_DRAFT_CHARS, Draft, Outbox, read_draft

DRAFTS_LIMIT = 200
ACTIONS = {"approve": ("approved", "approve draft"), "edit": ("approved", "edit draft"),
           "discard": ("discarded", "discard draft")}  # fmt: skip


@dataclass(frozen=True)
class DraftRow:
    """One draft as the page shows it."""

    draft: Draft
    to: str
    cc: str
    subject: str
    body: str
    trace_id: int | None  # its "why did Quinn say that?" page


def listing(db: Database) -> list[DraftRow]:
    """The drafts awaiting review (and reviewed ones not sent yet), read on the DB thread."""
    drafts = Outbox(db).drafts(DRAFTS_LIMIT)
    traces = reply_trace.for_messages(db, [d.item.in_reply_to for d in drafts if d.item.in_reply_to])
    rows = []
    for draft in drafts:
        text = read_draft(draft.item.raw)
        rows.append(DraftRow(draft, text.to, text.cc, text.subject, text.body, traces.get(draft.item.in_reply_to)))
    return rows


def decide(console: Console, action: str) -> Endpoint:
    """POST /mail/drafts/{approve|edit|discard}: the admin's decision on one draft, audited (admin role)."""
    decision, audit_action = ACTIONS[action]

    async def decide_draft(request: Request) -> Response:
        form = form_of(request)
        message_id = form.get("message_id", "").strip()
        if not message_id:
            raise FormError("message_id: which draft is missing", "use the buttons of the Mail page")
        body = None
        if action == "edit":
            body = form.get("body", "")
            if not body.strip():
                raise FormError("body: the new text is empty", "write the reply's text, or discard the draft")
            if len(body) > MAX_DRAFT_CHARS:
                raise FormError(f"body: {len(body)} characters; at most {MAX_DRAFT_CHARS}", "shorten it")
        admin = console.admin_of(request)
        db = console.store.db
        item = await db.run(Outbox(db).review, message_id, decision, admin.name, body=body)
        to = ", ".join(item.recipients)
        detail = {"approve": f"to {to}", "edit": f"to {to}; text replaced", "discard": f"was to {to}"}[action]
        await db.run(audit_log.record, db, admin.name, audit_action, f"draft {message_id}", user_id=item.user_id,
                     detail=detail)  # fmt: skip
        audit.info("console: %s %s draft %s", admin.name, decision, message_id)
        return RedirectResponse(f"/mail?reviewed={quote(decision)}#drafts", status_code=303, headers=SECURITY_HEADERS)

    decide_draft.__name__ = f"{action}_draft"
    return decide_draft
