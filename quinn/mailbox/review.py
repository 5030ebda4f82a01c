"""Drafts awaiting review (draft mode): what a draft says, and the same draft with a reviewer's text. Pure.

A reply is composed as a plain-text body, an HTML alternative of the same text and, for an export, attachments
(``smtp.compose_reply``). A reviewer's edit replaces the text and rebuilds that structure around it: the headers
that make it a reply in its thread (Message-ID, In-Reply-To, References, From, To, Cc, Subject, ours) stay as
they were, the MIME parts are made anew by the email package, and attachments are carried over.
"""

from __future__ import annotations

import email
import email.policy
from dataclasses import dataclass
from email.message import EmailMessage

from quinn.mailbox.smtp import html_alternative  # the same HTML part as a composed reply

#: Headers that describe the old body; the rebuilt message writes its own.
_BODY_HEADERS = frozenset({"content-type", "content-transfer-encoding", "mime-version", "content-disposition"})
MAX_DRAFT_CHARS = 50_000


@dataclass(frozen=True)
class DraftText:
    """What a draft says, for the reviewer: its recipients, subject and plain-text body."""

    to: str
    cc: str
    subject: str
    body: str


def read_draft(raw: bytes) -> DraftText:
    """The draft's To, Cc, Subject and plain-text body (empty strings for what it lacks)."""
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(msg, EmailMessage)
    part = msg.get_body(preferencelist=("plain",))
    body = part.get_content().replace("\r\n", "\n") if part is not None else ""
    return DraftText(str(msg.get("To", "")), str(msg.get("Cc", "")), str(msg.get("Subject", "")), body)


def with_body(raw: bytes, body: str) -> bytes:
    """``raw`` with ``body`` as its text: the reply's headers kept, the plain part and its HTML alternative made
    from ``body``, the attachments carried over. Line endings are normalised to CRLF on the wire (RFC 5322 §2.3)."""
    old = email.message_from_bytes(raw, policy=email.policy.SMTP)
    assert isinstance(old, EmailMessage)
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    new = EmailMessage(policy=email.policy.SMTP)
    for name, value in old.items():
        if name.lower() not in _BODY_HEADERS:
            new[name] = value
    new.set_content(text)
    new.add_alternative(html_alternative(text), subtype="html")
    for attachment in old.iter_attachments():
        assert isinstance(attachment, EmailMessage)
        data, subtype = attachment.get_content(), attachment.get_content_subtype()
        if isinstance(data, str):  # a text/* file: the email package takes it as text
            new.add_attachment(data, subtype=subtype, filename=attachment.get_filename())
        else:
            new.add_attachment(data, maintype=attachment.get_content_maintype(), subtype=subtype,
                               filename=attachment.get_filename())  # fmt: skip
    return new.as_bytes()
