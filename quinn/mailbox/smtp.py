"""Composing replies (RFC 5322 threading headers, RFC 3834 auto-reply marking) and sending them over SMTP."""

from __future__ import annotations

import asyncio
import hashlib
import html
import logging
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, formataddr
from typing import TYPE_CHECKING

import aiosmtplib

from quinn.clock import utcnow
from quinn.config import SmtpConfig
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.policy import reply_subject

if TYPE_CHECKING:
    from quinn.oauth import TokenSource

log = logging.getLogger(__name__)

LOOP_HEADER = "X-Quinn-Loop"
MAX_REFERENCES = 20


def reply_message_id(inbound_message_id: str, own_address: str) -> str:
    """Our Message-ID for the reply to ``inbound_message_id``: deterministic, so a retry after a crash reuses it."""
    digest = hashlib.sha256(inbound_message_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"<quinn.{digest}@{own_address.rsplit('@', 1)[1]}>"


def reply_recipients(email: InboundEmail) -> list[str]:
    """Reply-To when given, else From (RFC 5322 §3.6.2)."""
    if email.reply_to:
        return _unique(a.address for a in email.reply_to)
    return [email.sender] if email.sender else []


def reply_all_cc(email: InboundEmail, own_address: str) -> list[str]:
    """For reply-all: the mail's other To and Cc recipients, without Quinn (any +tag) and without the To."""
    to = set(reply_recipients(email))
    own = own_address.lower()
    return _unique(a.address for a in (*email.to, *email.cc) if a.address not in to and not _is_own(a.address, own))


def reply_addresses(email: InboundEmail, own_address: str, *, reply_all: bool = False, sender_only: bool = False,
                    limit: int | None = None) -> tuple[list[str], list[str], int]:  # fmt: skip
    """(To, Cc, left out) of the reply to ``email``: To is Reply-To or From (From alone with ``sender_only``), Cc
    the other recipients with ``reply_all``; at most ``limit`` addresses together, To first, and how many more
    the mail named (they get nothing: one mail must not make Quinn write to hundreds)."""
    to = [email.sender] if sender_only and email.sender else reply_recipients(email)
    cc = reply_all_cc(email, own_address) if reply_all and not sender_only else []
    if limit is None:
        return to, cc, 0
    kept_to = to[:limit]
    kept_cc = cc[: max(limit - len(kept_to), 0)]
    return kept_to, kept_cc, len(to) + len(cc) - len(kept_to) - len(kept_cc)


def left_out_note(left_out: int, limit: int) -> str:
    """What a reply says when the mail named more addresses than it may go to; it names none of them."""
    return (
        f"This email asked for a reply to {left_out + limit} addresses. I write to at most {limit}, so {left_out} "
        "of them got nothing from me."
    )


def _is_own(address: str, own: str) -> bool:
    local, _, domain = address.lower().rpartition("@")
    return address.lower() == own or f"{local.split('+', 1)[0]}@{domain}" == own


def _unique(addresses: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for address in addresses:
        if address and address.lower() not in seen:
            seen[address.lower()] = None
    return list(seen)


def references_for(email: InboundEmail) -> list[str]:
    """Parent's References (or its In-Reply-To) plus the parent's id, trimmed to the first and the last ones."""
    chain = list(email.references) or ([email.in_reply_to] if email.in_reply_to else [])
    chain = [c for c in chain if c != email.message_id] + [email.message_id]
    if len(chain) > MAX_REFERENCES:
        # Keep the thread's root, drop the middle (RFC 5322 §3.6.4 lets a client trim References).
        chain = [chain[0], *chain[-(MAX_REFERENCES - 1) :]]
    return chain


@dataclass(frozen=True)
class Reply:
    """A composed reply, ready for the outbox."""

    message_id: str
    recipients: list[str]  # every envelope recipient: To and Cc
    subject: str
    body: str
    raw: bytes
    left_out: int = 0  # addresses the mail named beyond the recipients cap: they get nothing


def compose_reply(
    email: InboundEmail, body: str, *, own_address: str, own_name: str = "Quinn", reply_all: bool = False,
    attachments: Sequence[tuple[str, str, bytes]] = (), sender_only: bool = False, max_recipients: int | None = None,
) -> Reply:  # fmt: skip
    """The reply to ``email`` with ``body`` as plain text and a simple HTML alternative.

    To is Reply-To or From; with ``reply_all`` the mail's other recipients stay on Cc. ``sender_only`` sends it to
    the From address alone, whatever Reply-To and Cc say: for what carries a user's memory wholesale (exports,
    digests, confirmation codes) and for mail whose sender nobody vouched for. ``attachments`` are (filename,
    content type, data); with any, the message becomes multipart/mixed. ``max_recipients`` caps To and Cc together
    (``reply_addresses``); the body then says how many addresses got nothing, without naming them.
    """
    message_id = reply_message_id(email.message_id, own_address)
    to, cc, left_out = reply_addresses(email, own_address, reply_all=reply_all, sender_only=sender_only,
                                       limit=max_recipients)  # fmt: skip
    if left_out and max_recipients is not None:
        body = f"{body}\n\n---\n{left_out_note(left_out, max_recipients)}"
    subject = reply_subject(email.subject)
    msg = EmailMessage(policy=SMTP)
    msg["From"] = formataddr((own_name, own_address))
    msg["To"] = ", ".join(to)
    if cc:
        msg["Cc"] = ", ".join(cc)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(utcnow())
    msg["Message-ID"] = message_id
    msg["In-Reply-To"] = email.message_id
    msg["References"] = " ".join(references_for(email))
    msg["Auto-Submitted"] = "auto-replied"  # RFC 3834 §5.1: marks us as an automatic responder
    msg["X-Auto-Response-Suppress"] = "All"  # ask Exchange-style responders not to answer us
    msg[LOOP_HEADER] = own_address
    msg.set_content(body)
    msg.add_alternative(html_alternative(body), subtype="html")
    for filename, content_type, data in attachments:
        maintype, _, subtype = content_type.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype or "octet-stream", filename=filename)
    return Reply(message_id, [*to, *cc], subject, body, msg.as_bytes(), left_out)


def html_alternative(body: str) -> str:
    """The HTML part beside a plain-text body: its paragraphs, every character of the text escaped."""
    paragraphs = "".join(f"<p>{html.escape(p).replace(chr(10), '<br>')}</p>" for p in body.split("\n\n") if p.strip())
    return f"<!doctype html><html><body>{paragraphs}</body></html>"


class MaybeSent(RetryLater):
    """The conversation broke after the message was handed over (timeout or disconnect during or after DATA):
    the server may have accepted it (RFC 1047). The outbox keeps it in flight, so the next try checks first."""


class SmtpSender:
    """Sends raw messages over SMTP with the configured TLS mode and AUTH."""

    def __init__(self, config: SmtpConfig, tokens: TokenSource | None = None) -> None:
        self.config = config
        self.tokens = tokens  # with auth = "oauth2": where the access token comes from

    @property
    def uses_token(self) -> bool:
        """Whether the login is SASL XOAUTH2/OAUTHBEARER with an OAuth access token."""
        return self.config.auth == "oauth2" and bool(self.config.username)

    def _kwargs(self) -> dict[str, object]:
        c = self.config
        kwargs: dict[str, object] = {
            "hostname": c.host, "port": c.port, "timeout": c.timeout_s,
            "use_tls": c.tls == "ssl", "start_tls": c.tls == "starttls",
        }  # fmt: skip
        if c.tls != "none":
            kwargs["tls_context"] = ssl.create_default_context(cafile=str(c.ca_file) if c.ca_file else None)
        if c.username and not self.uses_token:
            kwargs["username"] = c.username
            kwargs["password"] = c.secret("password") or ""
        return kwargs

    async def _access_token(self, rejected: str | None = None) -> str:
        """A token from the source (renewing it is a blocking HTTP call: off the loop). An unreachable token
        endpoint is an outage, not the message's fault: the reply waits."""
        assert self.tokens is not None, 'smtp.auth = "oauth2" without a token source'
        try:
            return await asyncio.to_thread(self.tokens.access_token, rejected)
        except ConnectError as exc:
            raise RetryLater(exc.message, exc.hint) from None

    async def _token_login(self, client: aiosmtplib.SMTP) -> None:
        """SASL XOAUTH2 or OAUTHBEARER (RFC 7628); a refused token is renewed once and tried again on the same
        connection (RFC 4954 §4 allows another AUTH after a failed one), then the refusal stands."""
        token = await self._access_token()
        try:
            await self._authenticate(client, token)
        except aiosmtplib.SMTPAuthenticationError:
            await self._authenticate(client, await self._access_token(rejected=token))

    async def _authenticate(self, client: aiosmtplib.SMTP, token: str) -> None:
        from quinn.oauth import encoded, oauthbearer

        username = self.config.username or ""
        assert self.tokens is not None
        if self.tokens.config.mechanism != "oauthbearer":
            await client.auth_xoauth2(username, token)
            return
        await client._ehlo_or_helo_if_needed()
        response = await client.execute_command(b"AUTH", b"OAUTHBEARER",
                                                encoded(oauthbearer(username, token, self.config.host,
                                                                    self.config.port)).encode())  # fmt: skip
        if response.code == 334:  # RFC 7628 §3.2.3: an error challenge, answered with a lone %x01
            response = await client.execute_command(b"AQ==")
        if response.code != 235:
            raise aiosmtplib.SMTPAuthenticationError(response.code, response.message)

    async def _send_with_token(self, raw: bytes, sender: str, recipients: list[str]) -> None:
        client = aiosmtplib.SMTP(**self._kwargs())  # type: ignore[arg-type]
        async with client:
            await self._token_login(client)
            await client.sendmail(sender, recipients, raw)

    async def send(self, raw: bytes, sender: str, recipients: list[str]) -> None:
        """Send one message; ``RetryLater`` for transient failures (``MaybeSent`` when the server may have
        accepted it), ``ConnectError`` for permanent (5xx) ones, ``ConfigError`` when the login is refused (5xx):
        the operator's to fix, not the message's fault."""
        try:
            if self.uses_token:
                await self._send_with_token(raw, sender, recipients)
            else:
                await aiosmtplib.send(raw, sender=sender, recipients=recipients, **self._kwargs())  # type: ignore[arg-type]
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = [r.code for r in exc.recipients]
            if all(code >= 500 for code in codes):
                raise ConnectError(f"SMTP refused every recipient: {exc}") from exc
            raise RetryLater(f"SMTP refused recipients temporarily: {exc}") from exc
        except aiosmtplib.SMTPAuthenticationError as exc:
            message = f"SMTP login as {self.config.username} rejected ({exc.code})"
            if exc.code >= 500:  # wrong credentials: every reply would fail alike, so the daemon holds mail
                hint = ("check smtp.username, and that the app may send mail (its scopes); `quinn auth login` signs "
                        "in anew") if self.uses_token else "check smtp.username and the password variable"  # fmt: skip
                raise ConfigError(message, hint) from exc
            raise RetryLater(message, "the server said the failure is temporary") from exc
        except aiosmtplib.SMTPResponseException as exc:
            if 500 <= exc.code < 600:
                raise ConnectError(f"SMTP rejected the message permanently: {exc.code} {exc.message}") from exc
            raise RetryLater(f"SMTP answered {exc.code} {exc.message}") from exc
        except (aiosmtplib.SMTPConnectError, aiosmtplib.SMTPConnectTimeoutError, ConnectionRefusedError) as exc:
            raise RetryLater(f"SMTP {self.config.host}:{self.config.port} unreachable: {exc}") from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise MaybeSent(f"SMTP {self.config.host}:{self.config.port} broke off: {exc}") from exc

    async def check(self) -> None:
        """Connect, say EHLO, log in when configured, and quit: for ``quinn check``."""
        kwargs = self._kwargs()
        username = kwargs.pop("username", None)
        password = kwargs.pop("password", None)
        client = aiosmtplib.SMTP(**kwargs)  # type: ignore[arg-type]
        try:
            await client.connect()
            if self.uses_token:
                await self._token_login(client)
            elif username:
                await client.login(str(username), str(password))
            await client.quit()
        except aiosmtplib.SMTPAuthenticationError as exc:
            raise ConnectError(f"SMTP login as {username} rejected ({exc.code})") from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise ConnectError(f"SMTP {self.config.host}:{self.config.port}: {exc}") from exc
        finally:
            if client.is_connected:  # a failed login leaves the connection open; do not leak it
                client.close()
