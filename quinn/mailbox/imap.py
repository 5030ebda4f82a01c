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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError, LoginError

from quinn.config import ImapConfig
from quinn.errors import ConfigError, ConnectError

if TYPE_CHECKING:
    from quinn.oauth import TokenSource

log = logging.getLogger(__name__)

KEYWORD = b"$QuinnProcessed"
COPIES_READ = 8  # messages of one Message-ID whose bytes a copy check reads, at most
DEAD_CONNECTION: tuple[type[BaseException], ...] = (IMAPClientAbortError, OSError, socket.timeout, ssl.SSLError)


class ImapLoginRejected(ConfigError):
    """The server refused our username/password."""


#: Every IMAP failure that the run loop answers with a reconnect: a dead connection, or a NO/BAD that leaves
#: the session in an unknown state. A rejected login is handled apart (``ImapLoginRejected``).
IMAP_FAILURES: tuple[type[BaseException], ...] = (*DEAD_CONNECTION, IMAPClientError, ConnectError)


@dataclass(frozen=True)
class Fetched:
    """One message's bytes and the server's INTERNALDATE."""

    uid: int
    raw: bytes
    internal_date: datetime | None


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """A verifying TLS context; ``ca_file`` replaces the system CAs (a private CA or a self-signed server)."""
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)


class ImapMailbox:
    """One logged-in IMAP connection watching ``config.folder``."""

    def __init__(self, config: ImapConfig, tokens: TokenSource | None = None) -> None:
        self.config = config
        self.tokens = tokens  # with auth = "oauth2": where the access token comes from
        self._client: Any = None
        self.delimiter = "/"
        self.can_idle = False
        self.can_move = False
        self.can_uidplus = False
        self.uidvalidity = 0
        self.read_only = False  # connect(create_folders=False): the folder is examined, never selected to change
        self.missing_folders: list[str] = []  # after connect(create_folders=False): what a first start creates
        self.idle_cycles = 0  # IDLE commands issued; each ends within idle_renew_s (RFC 2177)
        self.keepalives = 0  # NOOPs sent to keep a quiet connection alive

    @property
    def where(self) -> str:
        """``user@host:port`` for messages (no password)."""
        return f"{self.config.username}@{self.config.host}:{self.config.port}"

    @property
    def connected(self) -> bool:
        """Whether a logged-in connection is held (it may still turn out dead on the next command)."""
        return self._client is not None

    def connect(self, *, create_folders: bool = True) -> None:
        """Connect, log in, learn capabilities and the hierarchy delimiter, create our folders, select.

        ``create_folders=False`` (``quinn check``) changes nothing on the server: the folders Quinn would create
        are listed in ``missing_folders`` instead. Raises ``ImapLoginRejected`` when the password is refused,
        ``HostUnknown`` when the host name does not resolve, and ``ConnectError`` for everything else.
        """
        c = self.config
        context = tls_context(c.ca_file) if c.tls != "none" else None
        try:
            client = IMAPClient(c.host, port=c.port, ssl=c.tls == "ssl", ssl_context=context, timeout=c.timeout_s)
        except socket.gaierror as exc:
            raise HostUnknown(f"IMAP host {c.host!r} does not resolve ({exc.strerror or exc})",
                              "check the spelling of imap.host") from None  # fmt: skip
        except (OSError, IMAPClientError) as exc:
            raise ConnectError(f"IMAP {c.host}:{c.port} unreachable: {_describe(exc)}",
                               tls_hint("imap", c.tls, c.port, exc)) from None  # fmt: skip
        try:
            if c.tls == "starttls":
                client.starttls(context)
        except (OSError, IMAPClientError) as exc:
            _close_quietly(client)
            raise ConnectError(
                f"IMAP {c.host}:{c.port} STARTTLS failed: {_describe(exc)}",
                tls_hint("imap", c.tls, c.port, exc, "check imap.tls and imap.ca_file"),
            ) from None
        try:
            if c.auth == "oauth2":
                self._token_login(client)
            else:
                client.login(c.username, self.config.secret("password") or "")
        except LoginError as exc:
            _close_quietly(client)
            raise ImapLoginRejected(
                f"IMAP login as {c.username} at {c.host}:{c.port} rejected: {_text(exc)}",
                f"check imap.username and the variable {c.password_env}"
                if c.auth == "password"
                else "check imap.username and the app's scopes (IMAP); `quinn auth login` signs in anew",
            ) from None
        except ConfigError as exc:  # no usable token (quinn.oauth.LoginNeeded), or the token endpoint refused us
            _close_quietly(client)
            where = f"{c.username} at {c.host}:{c.port}"
            raise ImapLoginRejected(f"IMAP login as {where}: {exc.message}", exc.hint) from None
        except (*DEAD_CONNECTION, IMAPClientError) as exc:
            _close_quietly(client)
            raise ConnectError(f"IMAP {c.host}:{c.port} failed during login: {_describe(exc)}") from None
        try:
            self._client = client
            caps = {bytes(cap).upper() for cap in client.capabilities()}
            self.can_idle = c.idle and b"IDLE" in caps
            self.can_move = b"MOVE" in caps
            self.can_uidplus = b"UIDPLUS" in caps
            folders = client.list_folders()
            if folders:
                delimiter = folders[0][1]
                self.delimiter = delimiter.decode() if isinstance(delimiter, bytes) else (delimiter or "/")
            if create_folders:
                self.ensure_folders(self.own_folders())
            else:
                self.missing_folders = self.absent(self.own_folders())
                if c.folder in self.missing_folders:  # nothing to select until the first start creates it
                    return
            self.read_only = not create_folders
            self.uidvalidity = int(
                client.select_folder(self.server_name(c.folder), readonly=self.read_only)[b"UIDVALIDITY"]
            )
            self._take_news()  # a fresh connection is followed by a full pass
        except (*DEAD_CONNECTION, IMAPClientError) as exc:
            self.close()
            raise ConnectError(f"IMAP {c.host}:{c.port} failed after login: {_describe(exc)}") from None

    def _select_watched(self) -> None:
        """Select the watched folder again, as ``connect`` did: read-only (EXAMINE) for a connection that changes
        nothing (``quinn check``, an IMAP folder imported), so not even ``\\Recent`` is taken from the owner."""
        self._client.select_folder(self.server_name(self.config.folder), readonly=self.read_only)

    def _token_login(self, client: Any) -> None:
        """SASL XOAUTH2 or OAUTHBEARER (RFC 7628) with the access token; a refused token is renewed once and
        tried again (it may have been revoked or expired early), then the refusal stands."""
        assert self.tokens is not None, 'auth = "oauth2" without a token source'
        token = self.tokens.access_token()
        try:
            self._authenticate(client, token)
        except LoginError:
            self._authenticate(client, self.tokens.access_token(rejected=token))

    def _authenticate(self, client: Any, token: str) -> None:
        c = self.config
        if self.tokens is not None and self.tokens.config.mechanism == "oauthbearer":
            client.oauthbearer_login(c.username, token)
        else:
            client.oauth2_login(c.username, token)

    def own_folders(self) -> list[str]:
        """The folders Quinn reads or writes, as configured."""
        c = self.config
        return [c.folder, c.processed_folder, c.quarantine_folder, c.drafts_folder, c.sent_folder]

    def server_name(self, folder: str) -> str:
        """A configured folder name (``/`` separates levels) in the server's own hierarchy delimiter."""
        return folder.replace("/", self.delimiter) if self.delimiter else folder

    def absent(self, folders: list[str]) -> list[str]:
        """The folders of ``folders`` that do not exist on the server."""
        existing = {name for _flags, _delim, name in self._client.list_folders()}
        return [f for f in folders if f.upper() != "INBOX" and self.server_name(f) not in existing]

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
                except IMAPClientAbortError:
                    raise
                except IMAPClientError as exc:
                    if b"ALREADYEXISTS" not in str(exc).encode().upper() and "exists" not in str(exc).lower():
                        raise ConnectError(f"IMAP cannot create folder {name}: {exc}",
                                           "create it by hand or check the account's rights") from exc  # fmt: skip
                existing.add(name)

    def close(self) -> None:
        """Log out (quietly: the connection may already be dead)."""
        if self._client is not None:
            _close_quietly(self._client)
            self._client = None

    # -- reading ---------------------------------------------------------------------------------------

    def check_uidvalidity(self) -> int | None:
        """The folder's UIDVALIDITY now; returns the old value when it changed (RFC 3501 §2.3.1.1), else None.

        Dovecot drops the session when it changes, but a server may also change it under a live session:
        then every UID we know is void, and one of them may now name another message.
        """
        self._client.noop()  # lets the server catch up with the folder first (Dovecot drops the session here)
        status = self._client.folder_status(self.server_name(self.config.folder), [b"UIDVALIDITY"])
        current = int(status[b"UIDVALIDITY"])
        if current == self.uidvalidity:
            return None
        old, self.uidvalidity = self.uidvalidity, current
        self._select_watched()
        return old

    def uidnext(self) -> int:
        """The UID the folder's next message will get (RFC 3501 §2.3.1.1): every mail now in it is below it."""
        status = self._client.folder_status(self.server_name(self.config.folder), [b"UIDNEXT"])
        return int(status[b"UIDNEXT"])

    def uids(self) -> list[int]:
        """Every UID in the watched folder (handled mail is moved away, so what is left is new or in flight)."""
        self._client.noop()  # Dovecot's SEARCH only sees mail it has announced: let it announce first
        self._take_news()  # this SEARCH covers everything announced so far
        return sorted(int(u) for u in self._client.search(["NOT", "DELETED"]))

    def _take_news(self) -> bool:
        """Whether the server announced new mail (RFC 3501 §7.3.1 EXISTS) in a response to any command since the
        last call, and forget it.

        A server announces new mail once, in the response to whatever command comes next (a FETCH, a MOVE, our
        NOOP); IDLE reports only what was not announced yet. Mail that arrived while a pass was busy would
        otherwise wait for the next IDLE renewal (measured: a 25-minute stall). imapclient does not expose these
        unsolicited responses, so they are read where imaplib collects them.
        """
        pending = self._client._imap.untagged_responses
        return bool(pending.pop("EXISTS", None)) | bool(pending.pop("RECENT", None))

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

    def headers(self, uids: list[int]) -> dict[int, tuple[int, bytes, datetime | None]]:
        """Size, header block (``BODY.PEEK[HEADER]``: nothing is flagged) and INTERNALDATE of each UID of the
        selected folder (`quinn import` orders a folder by date before it reads any body)."""
        if not uids:
            return {}
        found = {}
        for uid, item in self._client.fetch(uids, ["RFC822.SIZE", "BODY.PEEK[HEADER]", "INTERNALDATE"]).items():
            moment = item.get(b"INTERNALDATE")
            if isinstance(moment, datetime) and moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            found[int(uid)] = (int(item.get(b"RFC822.SIZE", 0)), bytes(item.get(b"BODY[HEADER]", b"")), moment)
        return found

    def recent_headers(self, folders: list[str], count: int = 5) -> list[bytes]:
        """The header blocks of the newest ``count`` messages of each existing folder, read-only (``quinn check``
        reads the trust stamp off them); the watched folder stays selected."""
        found: list[bytes] = []
        try:
            for folder in dict.fromkeys(folders):
                name = self.server_name(folder)
                if not self._client.folder_exists(name):
                    continue
                self._client.select_folder(name, readonly=True)
                uids = sorted(int(u) for u in self._client.search(["NOT", "DELETED"]))[-count:]
                if uids:
                    data = self._client.fetch(uids, ["BODY.PEEK[HEADER]"])
                    found.extend(bytes(item[b"BODY[HEADER]"]) for item in data.values() if b"BODY[HEADER]" in item)
        finally:
            if self.config.folder not in self.missing_folders:  # quinn check before the watched folder exists
                self._select_watched()
        return found

    def holds_message_id(
        self, message_id: str, folders: list[str], carries: Callable[[bytes], bool] | None = None
    ) -> bool:
        """Whether any of ``folders`` holds a message with this Message-ID (read-only; the watched folder is
        selected again afterwards). How a send interrupted by a crash is confirmed from its copy. ``carries``:
        only a message whose bytes it accepts counts (a Message-ID alone anyone can write; ``outbox.carries_raw``)."""
        watched = self.config.folder
        try:
            for folder in folders:
                if folder != watched:
                    self._client.select_folder(self.server_name(folder), readonly=True)
                else:
                    self._select_watched()
                uids = [int(u) for u in self._client.search(["HEADER", "Message-ID", message_id])]
                if self._accepted(uids, carries):
                    return True
            return False
        finally:
            self._select_watched()

    def _accepted(self, uids: list[int], carries: Callable[[bytes], bool] | None) -> list[int]:
        """Of ``uids`` in the selected folder, those whose bytes ``carries`` accepts (all without it), the first
        ``COPIES_READ`` read: mail carrying one Message-ID is a copy or two, unless someone forged more."""
        if carries is None or not uids:
            return uids
        data = self._client.fetch(sorted(uids)[:COPIES_READ], ["BODY.PEEK[]"])
        return [int(uid) for uid, item in data.items() if b"BODY[]" in item and carries(bytes(item[b"BODY[]"]))]

    # -- filing ----------------------------------------------------------------------------------------

    def file_away(self, uid: int, folder: str, *, answered: bool = False) -> None:
        """Flag the message (our keyword, and \\Answered when replied) and move it to ``folder``.

        The copy always exists before the original goes: MOVE (RFC 6851) is atomic; without it, COPY then
        \\Deleted then UID EXPUNGE (RFC 4315) of this one UID. Without UIDPLUS the original keeps \\Deleted
        and is left for the owner: a plain EXPUNGE would also remove mail someone else marked deleted.
        """
        flags = [KEYWORD, b"\\Answered"] if answered else [KEYWORD]
        self._client.add_flags([uid], flags)
        target = self.server_name(folder)
        try:
            self._transfer(uid, target)
        except IMAPClientAbortError:
            raise
        except IMAPClientError as exc:
            if "TRYCREATE" not in str(exc).upper():
                raise
            # RFC 3501 §6.4.7: the folder went away under us (deleted by a person): create it and try again.
            log.warning("IMAP folder %s is missing; creating it again", target)
            self.ensure_folders([folder])
            self._transfer(uid, target)

    def copy_folders(self) -> list[str]:
        """Where the copy of a reply Bcc'd to ourselves arrives: INBOX, and the watched folder if it is another."""
        return list(dict.fromkeys([self.config.folder, "INBOX"]))

    def file_copies(self, message_id: str, folder: str, carries: Callable[[bytes], bool] | None = None) -> int:
        """Move every message with this Message-ID from ``copy_folders()`` to ``folder``; returns how many.
        ``carries``: only those whose bytes it accepts (``holds_message_id``); others stay for the pipeline."""
        watched, moved = self.config.folder, 0
        try:
            for source in self.copy_folders():
                if source != watched:
                    self._client.select_folder(self.server_name(source))
                self._client.noop()  # Dovecot searches only mail it has announced; a NOOP brings in new arrivals
                found = [int(u) for u in self._client.search(["UNDELETED", "HEADER", "Message-ID", message_id])]
                uids = self._accepted(found, carries)
                for uid in uids:
                    self.file_away(uid, folder)
                moved += len(uids)
        finally:
            if self.copy_folders() != [watched]:
                self._select_watched()
        return moved

    def purge_folders(self) -> list[str]:
        """Where a purged user's mail can be: the watched folder, INBOX (copies), processed, quarantine and sent
        folders. Not drafts: those wait for the person who reviews them."""
        c = self.config
        return [c.folder, "INBOX", c.processed_folder, c.quarantine_folder, c.sent_folder]

    def purge_address(
        self, address: str, own_address: str, folders: list[str] | None = None, *,
        received_before: datetime | None = None,
    ) -> int:  # fmt: skip
        """Delete from ``folders`` (default ``purge_folders()``) the mail ``address`` sent and Quinn's own mail to
        them (after a purge); returns how many messages went. Folders named twice are searched once, those that
        do not exist are skipped; the watched folder stays selected.

        ``received_before`` (the sweep after a purge by email): the watched folder is left alone (unprocessed and
        deferred mail waits there), and mail from ``address`` goes only if the server received it before that
        moment (INTERNALDATE, kept by MOVE and COPY: RFC 3501 §6.4.7), so mail the real user sends after a purge
        (a forged one, say) is never deleted unread. Quinn's own replies to them go whenever they arrived.

        SEARCH matches addresses as substrings (RFC 3501 §6.4.4: "bob@x" finds "jacob@x"), so each candidate's
        ENVELOPE is checked for the exact address before anything is deleted. The messages are expunged by UID
        (RFC 4315); without UIDPLUS they keep \\Deleted for the owner, as in ``file_away``.
        """
        address, own = address.strip().lower(), own_address.strip().lower()
        watched, removed = self.config.folder, 0
        chosen = self.purge_folders() if folders is None else folders
        if received_before is not None:
            chosen = [f for f in chosen if f != watched]
        try:
            for folder in dict.fromkeys(chosen):
                name = self.server_name(folder)
                if folder != watched and not self._client.folder_exists(name):
                    continue
                self._client.select_folder(name)
                self._client.noop()  # Dovecot searches only mail it has announced
                uids = self._client.search(["UNDELETED", "OR", "FROM", address, "OR", "TO", address, "CC", address])
                if not uids:
                    continue
                envelopes = self._client.fetch(uids, ["ENVELOPE", "INTERNALDATE"])
                doomed = [
                    uid for uid, item in envelopes.items()
                    if _sent_by_or_to(item.get(b"ENVELOPE"), address, own)
                    and (received_before is None or _ours_or_before(item, own, received_before))
                ]  # fmt: skip
                if not doomed:
                    continue
                self._client.add_flags(doomed, [b"\\Deleted"])
                if self.can_uidplus:
                    self._client.uid_expunge(doomed)
                removed += len(doomed)
        finally:
            self._select_watched()
        return removed

    def remove_message_id(self, message_id: str, folder: str) -> int:
        """Delete the messages with this Message-ID from ``folder`` (a reviewed draft leaving the drafts folder);
        returns how many. Expunged by UID (RFC 4315); without UIDPLUS they keep \\Deleted, as in ``file_away``.
        A folder that does not exist holds nothing; the watched folder stays selected."""
        name = self.server_name(folder)
        try:
            if not self._client.folder_exists(name):
                return 0
            self._client.select_folder(name)
            uids = self._client.search(["UNDELETED", "HEADER", "Message-ID", message_id])
            if uids:
                self._client.add_flags(uids, [b"\\Deleted"])
                if self.can_uidplus:
                    self._client.uid_expunge(uids)
            return len(uids)
        finally:
            self._select_watched()

    def _transfer(self, uid: int, target: str) -> None:
        if self.can_move:
            self._client.move([uid], target)
            return
        self._client.copy([uid], target)
        self._client.delete_messages([uid])
        if self.can_uidplus:
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
            self._select_watched()

    # -- waiting ---------------------------------------------------------------------------------------

    def wait(self, timeout_s: float, stop: threading.Event) -> bool:
        """Block until the folder may have changed, ``timeout_s`` passes, or ``stop`` is set.

        With IDLE: a NOOP, then one IDLE command, never longer than ``idle_renew_s`` (RFC 2177: re-issue it
        before the server's 29-minute inactivity timeout), checked every second so a stop is seen quickly. Without IDLE:
        sleep, sending a NOOP keep-alive every ``keepalive_s``, then a NOOP that is the poll itself.
        Returns True when the server reported something. A BYE or dead socket raises ``IMAPClientAbortError``.
        """
        c = self.config
        if self._take_news():
            return True  # new mail was announced while the last pass ran: no need to wait
        if not self.can_idle:
            start = quiet_since = time.monotonic()
            deadline = start + timeout_s
            while (now := time.monotonic()) < deadline and not stop.is_set():
                if now - quiet_since >= c.keepalive_s:
                    self._noop()
                    self.keepalives += 1
                    quiet_since = now
                stop.wait(min(0.25, max(0.0, deadline - now)))
            return self._noop() | self._take_news()
        # Dovecot's IDLE reports only changes after it began; one that came since our last command would wait
        # in the server until IDLE ends (measured). A NOOP first asks for them; what slips in between the NOOP
        # and IDLE (one round trip) is reported when this IDLE ends, within poll_interval_s (see the run loop).
        if self._noop():
            return True
        deadline = time.monotonic() + min(timeout_s, c.idle_renew_s)
        self._client.idle()
        self.idle_cycles += 1
        changed = False
        try:
            while (started := time.monotonic()) < deadline and not stop.is_set():
                slice_s = min(1.0, deadline - started)
                responses = self._client.idle_check(timeout=slice_s)
                if _has_bye(responses):
                    raise IMAPClientAbortError("server said BYE during IDLE")
                if any(_is_change(r) for r in responses):
                    changed = True
                    break
                if not responses and slice_s >= 0.5 and time.monotonic() - started < slice_s / 2:
                    # imapclient's idle_check swallows EOF and returns [] at once: the socket is readable but
                    # closed (a killed server sends no BYE). End IDLE; DONE on a dead socket raises.
                    break
        finally:
            self._client.idle_done()
        return changed

    def _noop(self) -> bool:
        _resp, untagged = self._client.noop()
        if _has_bye(untagged):
            raise IMAPClientAbortError("server said BYE")
        return any(_is_change(r) for r in untagged)


def _is_change(response: Any) -> bool:
    """EXISTS/RECENT/EXPUNGE/FETCH mean the folder changed; "* OK Still here" (Dovecot's keep-alive) does not."""
    return isinstance(response, tuple) and len(response) > 1 and response[1] in (b"EXISTS", b"RECENT", b"EXPUNGE",
                                                                                   b"FETCH")  # fmt: skip


def _has_bye(responses: list[Any]) -> bool:
    """An untagged BYE (RFC 3501 §7.1.5), parsed by imapclient as ``(b"BYE", b"Server", b"shutting", …)``."""
    return any((isinstance(r, tuple) and r and r[0] == b"BYE") or r == b"BYE" for r in responses or ())


class HostUnknown(ConnectError):
    """The server's host name does not resolve: a typo in the config, not an outage (fails a first start)."""


def tls_hint(section: str, tls: str, port: int, exc: BaseException, default: str | None = None) -> str:
    """What to try when a connection fails: OpenSSL's WRONG_VERSION_NUMBER means TLS met a server that speaks
    plain text on that port (or the reverse)."""
    text = str(exc).upper()
    if isinstance(exc, ssl.SSLError) and ("WRONG_VERSION_NUMBER" in text or "UNKNOWN_PROTOCOL" in text):
        return (
            f'the server does not speak TLS right away on port {port}: with {section}.tls = "{tls}" try '
            f'{section}.tls = "starttls" (IMAP port 143, SMTP 587), or the implicit-TLS port (IMAP 993, SMTP 465)'
        )
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the server's certificate is not trusted: fix the certificate, or set {section}.ca_file to its CA"
    return default or f"check {section}.host, port and tls"


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


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


def _addresses(field: Any) -> set[str]:
    """The lower-cased addresses of one ENVELOPE address list (imapclient ``Address`` tuples)."""
    found = set()
    for entry in field or ():
        if entry.mailbox and entry.host:
            found.add(f"{entry.mailbox.decode(errors='replace')}@{entry.host.decode(errors='replace')}".lower())
    return found


def _ours_or_before(item: dict[bytes, Any], own: str, moment: datetime) -> bool:
    """Quinn's own message, or one the server received before ``moment`` (no INTERNALDATE: kept)."""
    envelope = item.get(b"ENVELOPE")
    if envelope is not None and own in _addresses(envelope.from_):
        return True
    received = item.get(b"INTERNALDATE")
    if not isinstance(received, datetime):
        return False
    if received.tzinfo is None:
        received = received.replace(tzinfo=UTC)  # imapclient normalises to local time without tz (as in fetch)
    return received < moment


def _sent_by_or_to(envelope: Any, address: str, own: str) -> bool:
    """Whether the message is from ``address``, or ours (from ``own``) to or copying ``address``."""
    if envelope is None:
        return False
    senders = _addresses(envelope.from_)
    return address in senders or (own in senders and address in _addresses(envelope.to) | _addresses(envelope.cc))
