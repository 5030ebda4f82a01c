"""Quinn's mailbox: mail in (IMAP, parsing, trust policy, threads) and out (SMTP, the outbox, delivery), and the
mailbox's own tables (the ledger, the outbox, sessions and messages, watched folders).

This is the mailbox's face: what other packages may use (tests/test_layers.py). It loads each module on first
use (``quinn.faces``), so `quinn --help` imports no IMAP or SMTP client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quinn.faces import lazy_face

# name -> the module it lives in ("": a module used as a namespace).
HOMES = {
    "ledger": "",
    "outbox": "",
    "threads": "",
    "ANSWER_HINT": "backlog",
    "WatchMark": "backlog",
    "Watches": "backlog",
    "first_uid": "backlog",
    "Backoff": "backoff",
    "Delivery": "delivery",
    "canonical_address": "identity",
    "user_for": "identity",
    "Fetched": "imap",
    "IMAP_FAILURES": "imap",
    "HostUnknown": "imap",
    "ImapLoginRejected": "imap",
    "ImapMailbox": "imap",
    "FINAL_STATES": "ledger",
    "HANDED_ON_STATES": "ledger",
    "MailKey": "ledger",
    "MailLedger": "ledger",
    "MailRecord": "ledger",
    "POISON_STRIKES": "ledger",
    "Address": "message",
    "Attachment": "message",
    "InboundEmail": "message",
    "Draft": "outbox",
    "Outbox": "outbox",
    "carries_text_of": "outbox",
    "html_to_text": "parse",
    "parse_email": "parse",
    "parse_or_reason": "parse",
    "UNVERIFIED_PREFIX": "policy",
    "MAX_DRAFT_CHARS": "review",
    "DraftText": "review",
    "read_draft": "review",
    "with_body": "review",
    "Decision": "policy",
    "Rules": "policy",
    "check_trust": "policy",
    "decide": "policy",
    "decide_sent": "policy",
    "trust_warnings": "policy",
    "LOOP_HEADER": "smtp",
    "Reply": "smtp",
    "SmtpSender": "smtp",
    "compose_reply": "smtp",
    "html_alternative": "smtp",
    "reply_addresses": "smtp",
    "reply_message_id": "smtp",
    "IMPORT_PREFIX": "sources",
    "MailSource": "sources",
    "SourceMail": "sources",
    "open_source": "sources",
    "Sessions": "threads",
    "thread_key": "threads",
}
__all__ = [*HOMES]
__getattr__ = lazy_face(__name__, HOMES)

if TYPE_CHECKING:
    from quinn.mailbox import ledger as ledger
    from quinn.mailbox import outbox as outbox
    from quinn.mailbox import threads as threads
    from quinn.mailbox.backlog import ANSWER_HINT as ANSWER_HINT
    from quinn.mailbox.backlog import Watches as Watches
    from quinn.mailbox.backlog import WatchMark as WatchMark
    from quinn.mailbox.backlog import first_uid as first_uid
    from quinn.mailbox.backoff import Backoff as Backoff
    from quinn.mailbox.delivery import Delivery as Delivery
    from quinn.mailbox.identity import canonical_address as canonical_address
    from quinn.mailbox.identity import user_for as user_for
    from quinn.mailbox.imap import IMAP_FAILURES as IMAP_FAILURES
    from quinn.mailbox.imap import Fetched as Fetched
    from quinn.mailbox.imap import HostUnknown as HostUnknown
    from quinn.mailbox.imap import ImapLoginRejected as ImapLoginRejected
    from quinn.mailbox.imap import ImapMailbox as ImapMailbox
    from quinn.mailbox.ledger import FINAL_STATES as FINAL_STATES
    from quinn.mailbox.ledger import HANDED_ON_STATES as HANDED_ON_STATES
    from quinn.mailbox.ledger import POISON_STRIKES as POISON_STRIKES
    from quinn.mailbox.ledger import MailKey as MailKey
    from quinn.mailbox.ledger import MailLedger as MailLedger
    from quinn.mailbox.ledger import MailRecord as MailRecord
    from quinn.mailbox.message import Address as Address
    from quinn.mailbox.message import Attachment as Attachment
    from quinn.mailbox.message import InboundEmail as InboundEmail
    from quinn.mailbox.outbox import Draft as Draft
    from quinn.mailbox.outbox import Outbox as Outbox
    from quinn.mailbox.outbox import carries_text_of as carries_text_of
    from quinn.mailbox.parse import html_to_text as html_to_text
    from quinn.mailbox.parse import parse_email as parse_email
    from quinn.mailbox.parse import parse_or_reason as parse_or_reason
    from quinn.mailbox.policy import UNVERIFIED_PREFIX as UNVERIFIED_PREFIX
    from quinn.mailbox.policy import Decision as Decision
    from quinn.mailbox.policy import Rules as Rules
    from quinn.mailbox.policy import check_trust as check_trust
    from quinn.mailbox.policy import decide as decide
    from quinn.mailbox.policy import decide_sent as decide_sent
    from quinn.mailbox.policy import trust_warnings as trust_warnings
    from quinn.mailbox.review import MAX_DRAFT_CHARS as MAX_DRAFT_CHARS
    from quinn.mailbox.review import DraftText as DraftText
    from quinn.mailbox.review import read_draft as read_draft
    from quinn.mailbox.review import with_body as with_body
    from quinn.mailbox.smtp import LOOP_HEADER as LOOP_HEADER
    from quinn.mailbox.smtp import Reply as Reply
    from quinn.mailbox.smtp import SmtpSender as SmtpSender
    from quinn.mailbox.smtp import compose_reply as compose_reply
    from quinn.mailbox.smtp import html_alternative as html_alternative
    from quinn.mailbox.smtp import reply_addresses as reply_addresses
    from quinn.mailbox.smtp import reply_message_id as reply_message_id
    from quinn.mailbox.sources import IMPORT_PREFIX as IMPORT_PREFIX
    from quinn.mailbox.sources import MailSource as MailSource
    from quinn.mailbox.sources import SourceMail as SourceMail
    from quinn.mailbox.sources import open_source as open_source
    from quinn.mailbox.threads import Sessions as Sessions
    from quinn.mailbox.threads import thread_key as thread_key
