"""The parsed form of one inbound email, shared by parsing, policy, threading and the agent."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Address:
    """A mailbox: display name and lower-cased address."""

    name: str
    address: str

    def __str__(self) -> str:
        return f"{self.name} <{self.address}>" if self.name else self.address


@dataclass(frozen=True)
class Attachment:
    """An attached file as the sender named and typed it (both attacker-controlled), with its decoded bytes:
    read by quinn/documents for the reply and kept only for an authenticated user (issue 18)."""

    filename: str
    content_type: str
    size: int
    data: bytes = field(default=b"", repr=False, compare=False)


@dataclass(frozen=True)
class InboundEmail:
    """Everything Quinn uses of an email. Header values are decoded text; ids keep their angle brackets."""

    message_id: str
    in_reply_to: str | None
    references: tuple[str, ...]
    from_: Address | None
    to: tuple[Address, ...]
    cc: tuple[Address, ...]
    reply_to: tuple[Address, ...]
    subject: str
    date: datetime | None
    text: str  # clean text: quotes and signature stripped
    full_text: str  # the whole text part, quotes included
    headers: dict[str, tuple[str, ...]] = field(default_factory=dict)  # lower-cased name -> decoded values
    # Received and Authentication-Results fields as (lower-cased name, value), topmost first: their order is
    # what tells our server's stamp from one the sender wrote (quinn/mailbox/authresults.py).
    trace: tuple[tuple[str, str], ...] = ()
    attachments: tuple[Attachment, ...] = ()
    attachments_left_out: int = 0  # attachments past parse.MAX_ATTACHMENTS: counted, not kept (the raw mail has them)
    defects: tuple[str, ...] = ()
    content_type: str = "text/plain"
    size: int = 0

    def header(self, name: str) -> str | None:
        """The first value of a header (case-insensitive), or None."""
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def header_all(self, name: str) -> tuple[str, ...]:
        """Every value of a header, in message order (topmost first)."""
        return self.headers.get(name.lower(), ())

    @property
    def sender(self) -> str | None:
        """The From address, lower-cased."""
        return self.from_.address if self.from_ else None

    @property
    def sender_name(self) -> str:
        """The From display name, "" without one."""
        return self.from_.name if self.from_ and self.from_.name else ""

    @property
    def thread_ids(self) -> tuple[str, ...]:
        """Every id that links this mail to earlier mail: In-Reply-To and References, deduplicated."""
        ids = list(self.references)
        if self.in_reply_to and self.in_reply_to not in ids:
            ids.append(self.in_reply_to)
        return tuple(ids)
