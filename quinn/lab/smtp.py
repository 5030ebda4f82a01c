"""An SMTP server that delivers into the lab's Dovecot mailboxes (the tests' lab and ``quinn demo``).

`SmtpLab` runs an aiosmtpd `Controller` on 127.0.0.1. Each accepted message is stored in every recipient's
Dovecot INBOX by IMAP APPEND, with a ``Return-Path:`` header put on top as an MTA's final delivery would, before
the server answers 250: when `smtplib`/`aiosmtplib` returns, the mail is already in the mailbox. Failures can be
scripted (`fail_next`) and the listener can go away and come back on the same port (`down`/`up`).

It is also the lab's MX (`mx_stamp`): like Postfix with OpenDMARC it removes incoming Authentication-Results
fields that claim its authserv-id ``LAB_AUTHSERV`` (RFC 8601 §5) and puts its own verdict on top, above the
Received field of the hop. The lab cannot look up DNS, so its DMARC stands in: pass when the envelope sender's
domain is the (single) From domain, as SPF-aligned DMARC would for a domain whose SPF record lists the lab;
fail otherwise. A forger who writes alice's From and sends from their own domain gets dmarc=fail, as in life.
A From domain in ``no_dmarc`` publishes no DMARC record: its mail gets dmarc=none, the "no verdict" of a stranger.
``strip_forged=False`` plays a misconfigured MX that leaves the sender's fields in place.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import smtplib
import ssl
import threading
from collections.abc import Callable, Sequence
from email.utils import getaddresses
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from quinn.lab.dovecot import Dovecot
from quinn.lab.ports import free_port
from quinn.lab.process import track, untrack


class Received(NamedTuple):
    """One message the lab accepted: the envelope and the bytes as sent (without the Return-Path added)."""

    mail_from: str
    rcpt_tos: list[str]
    data: bytes


LAB_AUTHSERV = "mx.lab.example.test"


def lab_dmarc(raw: bytes, mail_from: str) -> str:
    """The lab MX's stand-in DMARC result: "pass" when the envelope sender's domain is the single From domain."""
    head = raw.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("utf-8", "replace")
    froms = [line for line in _fields(head) if line.lower().startswith("from:")]
    addresses = [a for _, a in getaddresses([f.split(":", 1)[1] for f in froms]) if "@" in a]
    if len(froms) != 1 or len(addresses) != 1 or "@" not in mail_from:
        return "fail"
    return "pass" if addresses[0].rpartition("@")[2].lower() == mail_from.rpartition("@")[2].lower() else "fail"


def from_domain(raw: bytes) -> str:
    """The domain of the mail's first From address ("" when there is none)."""
    head = raw.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0].decode("utf-8", "replace")
    froms = [f.split(":", 1)[1] for f in _fields(head) if f.lower().startswith("from:")]
    found = [a for _, a in getaddresses(froms) if "@" in a]
    return found[0].rpartition("@")[2].lower() if found else ""


def mx_stamp(raw: bytes, mail_from: str, *, strip_forged: bool = True, authserv: str = LAB_AUTHSERV,
             result: str | None = None) -> bytes:  # fmt: skip
    """``raw`` as the lab's MX passes it on: fields claiming ``authserv`` removed (unless ``strip_forged`` is
    off), then its Authentication-Results (``result``, default `lab_dmarc`) and its Received field on top."""
    text = raw.replace(b"\r\n", b"\n")
    head, sep, body = text.partition(b"\n\n")
    kept = [
        f for f in _fields(head.decode("utf-8", "surrogateescape"))
        if not (strip_forged and f.lower().startswith("authentication-results:") and _claims(f, authserv))
    ]  # fmt: skip
    verdict = result or lab_dmarc(raw, mail_from)
    domain = from_domain(raw) or "unknown.invalid"
    sender = mail_from or "<>"
    top = (f"Authentication-Results: {authserv}; spf={verdict} smtp.mailfrom={sender};"
           f" dmarc={verdict} header.from={domain}\n" + _received(authserv))  # fmt: skip
    return (top + "\n".join(kept)).encode("utf-8", "surrogateescape") + b"\n" + sep + body


def mx_received(raw: bytes, authserv: str = LAB_AUTHSERV) -> bytes:
    """``raw`` as an MX that checks nothing passes it on: only its Received field on top."""
    return _received(authserv).encode() + raw.replace(b"\r\n", b"\n")


def _received(authserv: str) -> str:
    return (f"Received: from client.lab.example.test (localhost [127.0.0.1]) by {authserv} (lab MX) with ESMTP;"
            " Mon, 23 Nov 2026 10:00:00 +0000\n")  # fmt: skip


def _fields(head: str) -> list[str]:
    """Header fields with their continuation lines, in order."""
    fields: list[str] = []
    for line in head.split("\n"):
        if line[:1] in (" ", "\t") and fields:
            fields[-1] += "\n" + line
        elif line:
            fields.append(line)
    return fields


def _claims(field: str, authserv: str) -> bool:
    value = field.split(":", 1)[1].strip().lower()
    return value.split(";", 1)[0].split()[0:1] == [authserv.lower()] if value else False


def return_path(mail_from: str) -> bytes:
    """The Return-Path header line an MTA adds for envelope sender `mail_from` (``<>`` for the null sender)."""
    address = "" if mail_from in ("", "<>") else mail_from
    return f"Return-Path: <{address}>\r\n".encode()


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context with the certificate (the tests' STARTTLS and implicit-TLS servers)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


class _Handler:
    """aiosmtpd hooks; all state lives on the `SmtpLab`."""

    def __init__(self, lab: SmtpLab) -> None:
        self.lab = lab

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        if (self.lab.auth is not None or self.lab.oauth is not None) and not session.authenticated:
            return "530 5.7.0 Authentication required"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        failure = self.lab._take_failure()
        if failure is not None:
            return failure
        raw = envelope.original_content or b""
        mail_from = envelope.mail_from or ""
        rcpt_tos = list(envelope.rcpt_tos)
        try:
            # Shielded: a client that dies during DATA (the crash tests kill Quinn mid-send) cancels this
            # handler, but the delivery thread runs on, and a mail delivered must also be counted.
            await asyncio.shield(asyncio.to_thread(self.lab._deliver_and_record, mail_from, rcpt_tos, raw))
        except Exception as exc:
            return f"451 4.3.0 Delivery to the mailbox failed: {type(exc).__name__}"
        return "250 2.0.0 OK: delivered"


class _OAuthHandler(_Handler):
    """The hooks plus SASL XOAUTH2 and OAUTHBEARER (RFC 7628), each token checked by ``lab.oauth(user, token)``."""

    async def auth_XOAUTH2(self, server: SMTP, args: list[str]) -> AuthResult:
        return await self._bearer(server, args, "XOAUTH2")

    async def auth_OAUTHBEARER(self, server: SMTP, args: list[str]) -> AuthResult:
        return await self._bearer(server, args, "OAUTHBEARER")

    async def _bearer(self, server: SMTP, args: list[str], mechanism: str) -> AuthResult:
        try:
            text = base64.b64decode(args[1] if len(args) > 1 else "", validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return AuthResult(success=False, handled=False)
        fields = dict(part.split("=", 1) for part in text.split("\x01") if "=" in part)
        user = fields.get("user", "")
        if mechanism == "OAUTHBEARER":  # gs2-header "n,a=USER," (RFC 7628 §3.1, RFC 5801 §4)
            gs2 = text.split("\x01", 1)[0]
            named = next((p[2:] for p in gs2.split(",") if p.startswith("a=")), "")
            user = named.replace("=2C", ",").replace("=3D", "=")
        token = fields.get("auth", "").removeprefix("Bearer ")
        check = self.lab.oauth
        assert check is not None
        valid: bool = bool(user and token) and await asyncio.to_thread(check, user, token)
        if valid:
            self.lab.oauth_logins.append((mechanism, user))
            return AuthResult(success=True, auth_data=user)
        # RFC 7628 §3.2.2: the error as a JSON challenge; the client answers (%x01, or an empty line for XOAUTH2)
        error = json.dumps({"status": "invalid_token", "schemes": "bearer", "scope": "mail"})
        await server.challenge_auth(error)
        self.lab.oauth_refusals.append((mechanism, user))
        return AuthResult(success=False, handled=False)


class SmtpLab:
    """An SMTP server on 127.0.0.1 that delivers into `dovecot`'s INBOXes.

    auth: ``(user, password)`` to require SMTP AUTH (PLAIN/LOGIN; offered without TLS when `tls` is "none");
    None accepts anyone.
    oauth: ``check(user, token) -> bool`` to require SMTP AUTH with XOAUTH2 or OAUTHBEARER instead (the tests ask
    the lab's OAuth server, as Dovecot's oauth2 passdb does).
    tls: "starttls" (required before MAIL) or "ssl" (implicit TLS), with `cert` = ``(cert.pem, key.pem)``.
    """

    def __init__(
        self,
        dovecot: Dovecot,
        *,
        auth: tuple[str, str] | None = None,
        port: int | None = None,
        data_size_limit: int = 33_554_432,
        tls: str = "none",
        cert: tuple[Path, Path] | None = None,
        stamp: bool = True,
        strip_forged: bool = True,
        oauth: Callable[[str, str], bool] | None = None,
        no_dmarc: Sequence[str] = (),
    ) -> None:
        """Prepare; nothing listens until `start()`. ``stamp``: act as the MX (`mx_stamp`); off, only a Received
        field is added (an MX that checks nothing: an unstamped path into the mailbox). ``no_dmarc``: From domains
        without a DMARC record, stamped dmarc=none (no verdict)."""
        if tls not in ("none", "starttls", "ssl") or (tls != "none") != (cert is not None):
            raise ValueError("tls is none, starttls or ssl; starttls and ssl need cert=(cert, key)")
        self.dovecot = dovecot
        self.auth = auth
        self.oauth = oauth
        self.oauth_logins: list[tuple[str, str]] = []  # (mechanism, user) of each accepted token
        self.oauth_refusals: list[tuple[str, str]] = []
        self.tls = tls
        self.cert = cert
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.data_size_limit = data_size_limit
        self.stamp = stamp
        self.strip_forged = strip_forged
        self.no_dmarc = {d.lower() for d in no_dmarc}
        self.received: list[Received] = []
        self._failures: list[str] = []
        self._lock = threading.Lock()
        self._controller: Controller | None = None

    # -- lifecycle --------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the listener is up."""
        return self._controller is not None

    def start(self) -> None:
        """Start listening on `port` (no-op when already up)."""
        if self._controller is not None:
            return
        kwargs: dict[str, Any] = {}
        if self.auth is not None or self.oauth is not None:
            kwargs = {"authenticator": self._authenticate, "auth_require_tls": self.tls == "starttls"}
        if self.cert is not None and self.tls == "ssl":
            kwargs["ssl_context"] = server_context(*self.cert)
        elif self.cert is not None:
            kwargs |= {"tls_context": server_context(*self.cert), "require_starttls": True}
        controller = Controller(
            _OAuthHandler(self) if self.oauth is not None else _Handler(self),
            hostname=self.host,
            port=self.port,
            server_hostname="smtp.lab.example.test",
            data_size_limit=self.data_size_limit,
            ready_timeout=10.0,
            **kwargs,
        )
        controller.start()
        self._controller = controller
        track(self)

    def stop(self) -> None:
        """Stop listening (no-op when stopped)."""
        controller, self._controller = self._controller, None
        if controller is not None:
            controller.stop()
        untrack(self)

    def down(self) -> None:
        """Take the listener away: connections are refused until `up()`."""
        self.stop()

    def up(self) -> None:
        """Bring the listener back on the same port."""
        self.start()

    close = stop

    def __enter__(self) -> SmtpLab:
        """Start; stop on exit."""
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop."""
        self.stop()

    # -- scripted failures ------------------------------------------------------------------------------------

    def fail_next(self, n: int = 1, code: int = 451, message: str | None = None) -> None:
        """Answer the next `n` DATA commands with `code` (4xx: temporary, 5xx: permanent) instead of delivering."""
        if not 400 <= code <= 599:
            raise ValueError(f"not an SMTP error code: {code}")
        text = message or ("4.3.0 Try again later (lab)" if code < 500 else "5.7.1 Rejected (lab)")
        with self._lock:
            self._failures.extend([f"{code} {text}"] * n)

    def _take_failure(self) -> str | None:
        with self._lock:
            return self._failures.pop(0) if self._failures else None

    # -- delivery ---------------------------------------------------------------------------------------------

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        # handled=False on failure: with the default (True) aiosmtpd sends nothing and the client hangs.
        if self.auth is None or not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        user, password = self.auth
        ok = auth_data.login == user.encode() and auth_data.password == password.encode()
        return AuthResult(success=ok, handled=False)

    def _deliver_and_record(self, mail_from: str, rcpt_tos: Sequence[str], raw: bytes) -> None:
        self._deliver(mail_from, rcpt_tos, raw)
        with self._lock:
            self.received.append(Received(mail_from, list(rcpt_tos), raw))

    def _deliver(self, mail_from: str, rcpt_tos: Sequence[str], raw: bytes) -> None:
        # An MTA always adds its Received field, even one that checks nothing (stamp off).
        result = "none" if from_domain(raw) in self.no_dmarc else None
        raw = mx_stamp(raw, mail_from, strip_forged=self.strip_forged, result=result) if self.stamp else (
            mx_received(raw))  # fmt: skip
        stamped = return_path(mail_from) + raw
        for rcpt in rcpt_tos:
            self.dovecot.append(rcpt, stamped)

    # -- client side ------------------------------------------------------------------------------------------

    def send(
        self,
        from_addr: str,
        to_addrs: str | Sequence[str],
        raw: bytes,
        *,
        auth: tuple[str, str] | None = None,
    ) -> None:
        """Send `raw` through the lab with smtplib (as a person emailing Quinn would); bare LFs become CRLF.

        auth: credentials to log in with; defaults to the lab's own `auth`. Raises smtplib's errors.
        """
        recipients = [to_addrs] if isinstance(to_addrs, str) else list(to_addrs)
        options = ["SMTPUTF8"] if not all(a.isascii() for a in [from_addr, *recipients]) else []
        credentials = auth or self.auth
        with smtplib.SMTP(self.host, self.port, timeout=10) as client:
            if credentials is not None:
                client.login(*credentials)
            client.sendmail(from_addr, recipients, re.sub(rb"\r?\n", b"\r\n", raw), mail_options=options)
