"""The IMAP side: connect, watch a folder (IDLE, or polling), fetch by UID, and file handled mail away.

imapclient is synchronous: an ``ImapMailbox`` is used from one thread at a time (the app runs it on its own
executor). Failure modes measured on Dovecot (FACTS.md): a killed session raises ``IMAPClientAbortError``
then ``OSError``; BYE during IDLE; refused; timeout. ``DEAD_CONNECTION`` lists what means "reconnect".
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError, LoginError

from quinn.config import ImapConfig
from quinn.errors import ConfigError, ConnectError

log = logging.getLogger(__name__)

KEYWORD = b"$QuinnProcessed"
IDLE_MAX_S = 25 * 60  # RFC 2177: re-issue IDLE before the server's 29-minute inactivity limit
DEAD_CONNECTION: tuple[type[BaseException], ...] = (IMAPClientAbortError, OSError, socket.timeout, ssl.SSLError)


class ImapLoginRejected(ConfigError):
    """The server refused our username/password."""


@dataclass(frozen=True)
class Fetched:
    """One message's bytes and the server's INTERNALDATE."""

    uid: int
    raw: bytes
    internal_date: datetime | None


class ImapMailbox:
    """One logged-in IMAP connection watching ``config.folder``."""

    def __init__(self, config: ImapConfig) -> None:
        self.config = config
        self._client: Any = None
        self.delimiter = "/"
        self.can_idle = False
        self.can_move = False
        self.uidvalidity = 0

    @property
    def where(self) -> str:
        """``user@host:port`` for messages (no password)."""
        return f"{self.config.username}@{self.config.host}:{self.config.port}"

    def connect(self) -> None:
        """Connect, log in, learn capabilities and the hierarchy delimiter, create our folders, select."""
        c = self.config
        try:
            client = IMAPClient(c.host, port=c.port, ssl=c.tls == "ssl", timeout=c.timeout_s)
            if c.tls == "starttls":
                client.starttls()
        except (OSError, IMAPClientError) as exc:
            raise ConnectError(f"IMAP {c.host}:{c.port} unreachable: {exc}", "check imap.host, port and tls") from None
        try:
            client.login(c.username, self.config.secret("password") or "")
        except LoginError as exc:
            _close_quietly(client)
            raise ImapLoginRejected(
                f"IMAP login as {c.username} at {c.host}:{c.port} rejected: {_text(exc)}",
                f"check imap.username and the variable {c.password_env}",
            ) from None
        except (*DEAD_CONNECTION, IMAPClientError) as exc:
            _close_quietly(client)
            raise ConnectError(f"IMAP {c.host}:{c.port} failed during login: {exc}") from exc
        self._client = client
        caps = {bytes(cap).upper() for cap in client.capabilities()}
        self.can_idle = c.idle and b"IDLE" in caps
        self.can_move = b"MOVE" in caps
        folders = client.list_folders()
        if folders:
            delimiter = folders[0][1]
            self.delimiter = delimiter.decode() if isinstance(delimiter, bytes) else (delimiter or "/")
        self.ensure_folders([c.folder, c.processed_folder, c.quarantine_folder, c.drafts_folder])
        self.uidvalidity = int(client.select_folder(c.folder)[b"UIDVALIDITY"])

    def server_name(self, folder: str) -> str:
        """A configured folder name (``/`` separates levels) in the server's own hierarchy delimiter."""
        return folder.replace("/", self.delimiter) if self.delimiter else folder

    def ensure_folders(self, folders: list[str]) -> None:
        """Create each folder (and its parents) that does not exist yet."""
        existing = {name for _flags, _delim, name in self._client.list_folders()}
        for folder in folders:
            parts = folder.split("/")
            for depth in range(1, len(parts) + 1):
                name = self.server_name("/".join(parts[:depth]))
                if name.upper() == "INBOX" or name in existing:
                    continue
                try:
                    self._client.create_folder(name)
                    self._client.subscribe_folder(name)
                    log.info("created IMAP folder %s", name)
                except IMAPClientError as exc:
                    if b"ALREADYEXISTS" not in str(exc).encode().upper() and "exists" not in str(exc).lower():
                        raise ConnectError(f"IMAP cannot create folder {name}: {exc}") from exc
                existing.add(name)

    def close(self) -> None:
        """Log out (quietly: the connection may already be dead)."""
        if self._client is not None:
            _close_quietly(self._client)
            self._client = None

    # -- reading ---------------------------------------------------------------------------------------

    def uids(self) -> list[int]:
        """Every UID in the watched folder (handled mail is moved away, so what is left is new or in flight)."""
        return sorted(int(u) for u in self._client.search(["NOT", "DELETED"]))

    def sizes(self, uids: list[int]) -> dict[int, int]:
        """RFC822.SIZE of each UID, read before the body so oversize mail is never downloaded."""
        if not uids:
            return {}
        data = self._client.fetch(uids, ["RFC822.SIZE"])
        return {int(uid): int(item[b"RFC822.SIZE"]) for uid, item in data.items()}

    def fetch(self, uid: int) -> Fetched | None:
        """The message's bytes (BODY.PEEK[] leaves it unseen) and INTERNALDATE; None when it has gone."""
        data = self._client.fetch([uid], ["BODY.PEEK[]", "INTERNALDATE"])
        item = data.get(uid)
        if item is None or b"BODY[]" not in item:
            return None
        moment = item.get(b"INTERNALDATE")
        if isinstance(moment, datetime) and moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)  # imapclient normalises to local time without tz
        return Fetched(uid, bytes(item[b"BODY[]"]), moment)

    # -- filing ----------------------------------------------------------------------------------------

    def file_away(self, uid: int, folder: str, *, answered: bool = False) -> None:
        """Flag the message (our keyword, and \\Answered when replied) and move it to ``folder``."""
        flags = [KEYWORD, b"\\Answered"] if answered else [KEYWORD]
        self._client.add_flags([uid], flags)
        target = self.server_name(folder)
        if self.can_move:
            self._client.move([uid], target)
        else:
            # COPY first, delete second: a crash in between leaves a duplicate, never a loss.
            self._client.copy([uid], target)
            self._client.delete_messages([uid])
            self._client.uid_expunge([uid])

    def append(self, folder: str, raw: bytes, flags: tuple[bytes, ...] = ()) -> None:
        """APPEND a message (draft mode)."""
        self._client.append(self.server_name(folder), raw, flags=flags)

    def restore(self, message_id: str, from_folder: str) -> int:
        """Move the messages with this Message-ID from ``from_folder`` back to the watched folder, without our
        keyword (``quinn mail status --retry``); returns how many were moved. The watched folder stays selected.
        """
        source = self.server_name(from_folder)
        self._client.select_folder(source)
        try:
            uids = self._client.search(["HEADER", "Message-ID", message_id])  # RFC 9051 §6.4.4: substring match
            if not uids:
                return 0
            self._client.remove_flags(uids, [KEYWORD])
            target = self.server_name(self.config.folder)
            if self.can_move:
                self._client.move(uids, target)
            else:
                self._client.copy(uids, target)
                self._client.delete_messages(uids)
                self._client.uid_expunge(uids)
            return len(uids)
        finally:
            self._client.select_folder(self.server_name(self.config.folder))

    # -- waiting ---------------------------------------------------------------------------------------

    def wait(self, timeout_s: float, stop: threading.Event) -> bool:
        """Block until the folder may have changed, ``timeout_s`` passes, or ``stop`` is set.

        Uses IDLE when available (checked every second so a stop is seen quickly); a NOOP poll otherwise.
        Returns True when the server reported something. A BYE or dead socket raises ``IMAPClientAbortError``.
        """
        deadline = time.monotonic() + min(timeout_s, IDLE_MAX_S)
        if not self.can_idle:
            while time.monotonic() < deadline and not stop.is_set():
                stop.wait(min(0.25, max(0.0, deadline - time.monotonic())))
            _resp, untagged = self._client.noop()
            return _has_bye(untagged) or bool(untagged)
        self._client.idle()
        changed = False
        try:
            while time.monotonic() < deadline and not stop.is_set():
                responses = self._client.idle_check(timeout=1)
                if _has_bye(responses):
                    raise IMAPClientAbortError("server said BYE during IDLE")
                if responses:
                    changed = True
                    break
        finally:
            self._client.idle_done()
        return changed


def _has_bye(responses: list[Any]) -> bool:
    return any((isinstance(r, tuple) and r and r[-1] == b"BYE") or r == b"BYE" for r in responses or ())


def _text(exc: BaseException) -> str:
    text = str(exc)
    return text.removeprefix("b'").removesuffix("'") or exc.__class__.__name__


def _close_quietly(client: Any) -> None:
    try:
        client.logout()
    except Exception:  # the connection may be dead already; logging out is a courtesy
        try:
            client.shutdown()
        except Exception:
            log.debug("IMAP shutdown failed", exc_info=True)
