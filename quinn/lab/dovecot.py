"""A private Dovecot IMAP server, for the tests' lab and for ``quinn demo``.

Each `Dovecot` runs its own ``dovecot -F -c CONF`` from a config file in a temp dir, with its own base_dir,
state_dir, log file and port on 127.0.0.1, so several can run side by side and none touches the system's
Dovecot. Any username is accepted with the one lab password (a static passdb), so tests use a fresh address per
test (``alice-1a2b3c4d@example.test``) and never see each other's mail. Mail is stored as Maildir under the temp
dir, owned by ``nobody`` (Dovecot refuses to run mail processes as root).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import re
import secrets
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientError

from quinn.lab.ports import free_port
from quinn.lab.process import LabServer, kill_group, remove_at_exit, tail, untrack
from quinn.lab.wait import WaitTimeout, wait_for

# Debian's dovecot-imapd puts them here; QUINN_DOVECOT_BIN / QUINN_DOVEADM_BIN name others (read at each use).
DOVECOT_BIN = "/usr/sbin/dovecot"
DOVEADM_BIN = "/usr/bin/doveadm"

# Dovecot 2.3's post-login capability list; `imap_capability` can only replace the list (or add to it with
# "+"), not drop one item, so `Dovecot(idle=False)` and `without=` spell the whole list out minus those.
_CAPABILITIES = (
    "IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE SORT SORT=DISPLAY THREAD=REFERENCES THREAD=REFS "
    "THREAD=ORDEREDSUBJECT MULTIAPPEND URL-PARTIAL CATENATE UNSELECT CHILDREN NAMESPACE UIDPLUS LIST-EXTENDED "
    "I18NLEVEL=1 CONDSTORE QRESYNC ESEARCH ESORT SEARCHRES WITHIN CONTEXT=SEARCH LIST-STATUS BINARY MOVE "
    "SNIPPET=FUZZY PREVIEW=FUZZY PREVIEW STATUS=SIZE SAVEDATE LITERAL+ NOTIFY"
)
# Without root, Dovecot can neither chroot nor hand its sockets to the dovecot group (measured with 2.3.19:
# "chown(.../stats-writer, -1, 105) failed: Operation not permitted").
_UNPRIVILEGED = """\
service imap-login {
  chroot =
}
service anvil {
  chroot =
}
service stats {
  unix_listener stats-writer {
    group =
  }
}
"""
_UNPRIVILEGED += "".join(f"service {s} {{\n  unix_listener {s} {{\n    group =\n  }}\n}}\n" for s in ("imap-hibernate",
                         "dict", "dict-async"))  # fmt: skip
_EX_NOUSER = 68  # doveadm kick: "no such user" = nobody to kick
_APPENDUID = re.compile(rb"\[APPENDUID \d+ (\d+)\]")


def dovecot_binaries() -> tuple[str, str]:
    """The paths of ``dovecot`` and ``doveadm``: $QUINN_DOVECOT_BIN and $QUINN_DOVEADM_BIN, or Debian's."""
    return os.environ.get("QUINN_DOVECOT_BIN", DOVECOT_BIN), os.environ.get("QUINN_DOVEADM_BIN", DOVEADM_BIN)


def dovecot_available() -> bool:
    """Tell whether the Dovecot binaries are installed."""
    return all(os.access(path, os.X_OK) for path in dovecot_binaries())


class DovecotError(RuntimeError):
    """Dovecot did not start, or a doveadm command failed."""


class Dovecot(LabServer):
    """A private Dovecot instance on 127.0.0.1 that accepts any username with `password`.

    Use as a context manager, or call `start()` and finally `close()`.
    """

    def __init__(
        self,
        *,
        idle: bool = True,
        password: str | None = None,
        port: int | None = None,
        without: Sequence[str] = (),
        tls: tuple[Path, Path] | None = None,
        oauth2_introspection_url: str | None = None,
    ) -> None:
        """Prepare the config in a new temp dir; nothing runs until `start()`.

        idle: advertise the IDLE capability (False: a server without IDLE, for the polling fallback).
        without: more capabilities not to advertise, e.g. ``("MOVE", "UIDPLUS")`` (clients must cope).
        tls: ``(cert, key)`` PEM files: STARTTLS on the plain port and implicit TLS on `tls_port`.
        oauth2_introspection_url: also accept SASL XOAUTH2 and OAUTHBEARER, each token checked by Dovecot's
        ``oauth2`` passdb at this RFC 7662 introspection endpoint (``http://id:secret@host:port/path``); the
        introspection's ``username`` must be the login name. The lab password keeps working for PLAIN/LOGIN.
        """
        self.oauth2_introspection_url = oauth2_introspection_url
        self.idle = idle
        self.without = {c.upper() for c in without} | (set() if idle else {"IDLE"})
        self.tls = tls
        self._password = password or f"lab-{secrets.token_hex(4)}"
        self._port = port or free_port()
        self.tls_port = free_port() if tls else 0
        self.dir = Path(tempfile.mkdtemp(prefix="quinn-dovecot-"))
        remove_at_exit(self.dir)
        self.dir.chmod(0o755)
        self.mail_dir = self.dir / "mail"
        for sub in ("run", "state", "mail"):
            (self.dir / sub).mkdir()
        if os.geteuid() == 0:  # Dovecot runs no mail process as root: the mail belongs to nobody
            nobody = pwd.getpwnam("nobody")
            os.chown(self.mail_dir, nobody.pw_uid, nobody.pw_gid)
        self.log_path = self.dir / "dovecot.log"
        self.stderr_path = self.dir / "stderr.log"
        self.conf_path = self.dir / "dovecot.conf"
        self.conf_path.write_text(self._config())
        self._proc: subprocess.Popen[bytes] | None = None

    # -- properties -------------------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address the server listens on."""
        return "127.0.0.1"

    @property
    def port(self) -> int:
        """The plain-IMAP port (kept across `restart()`)."""
        return self._port

    @property
    def password(self) -> str:
        """The password that every username logs in with."""
        return self._password

    @property
    def running(self) -> bool:
        """Whether the master process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle --------------------------------------------------------------------------------------------

    def _config(self) -> str:
        d = self.dir
        capability = ""
        if self.without:
            kept = " ".join(c for c in _CAPABILITIES.split() if c not in self.without)
            capability = f"protocol imap {{\n  imap_capability = {kept}\n}}\n"
        ssl = f"ssl = yes\nssl_cert = <{self.tls[0]}\nssl_key = <{self.tls[1]}" if self.tls else "ssl = no"
        users = "default_internal_user = dovecot\ndefault_login_user = dovenull"
        owner = "uid=nobody gid=nogroup"
        if os.geteuid() != 0:  # `quinn demo` as a normal user: every process runs as that user, nothing chroots
            me, group = pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name
            users = f"default_internal_user = {me}\ndefault_login_user = {me}"
            owner = f"uid={me} gid={group}"
            capability += _UNPRIVILEGED
        mechanisms = "plain login"
        oauth2 = static_only = ""
        if self.oauth2_introspection_url:
            # Dovecot 2.3's oauth2 passdb (doc.dovecot.org 2.3, "Open Authentication v2.0 database"): tokens are
            # validated by RFC 7662 introspection, POSTed (introspection_mode = post), active = true required.
            mechanisms += " xoauth2 oauthbearer"
            ext = self.dir / "dovecot-oauth2.conf.ext"
            ext.write_text(f"introspection_mode = post\nintrospection_url = {self.oauth2_introspection_url}\n"
                           "force_introspection = yes\nusername_attribute = username\n"
                           "active_attribute = active\nactive_value = true\n")  # fmt: skip
            oauth2 = f"passdb {{\n  driver = oauth2\n  mechanisms = xoauth2 oauthbearer\n  args = {ext}\n}}\n"
            static_only = "  mechanisms = plain login\n"  # a token is never compared with the lab password
        return f"""\
# Written by quinn/lab/dovecot.py for one lab or demo run.
instance_name = quinn-lab-{self._port}
base_dir = {d}/run
state_dir = {d}/state
listen = 127.0.0.1
protocols = imap
{ssl}
disable_plaintext_auth = no
auth_mechanisms = {mechanisms}
auth_failure_delay = 0
auth_verbose = yes
log_path = {self.log_path}
mail_location = maildir:{self.mail_dir}/%u/Maildir
{users}
{oauth2}passdb {{
  driver = static
{static_only}  args = password={self._password}
}}
userdb {{
  driver = static
  args = {owner} home={self.mail_dir}/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self._port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {self.tls_port}
  }}
}}
service anvil {{
  unix_listener anvil-auth-penalty {{
    mode = 0
  }}
}}
{capability}"""

    def start(self, timeout_s: float = 10.0) -> None:
        """Start the server and return once a real IMAP login works; raise `DovecotError` with the log tail."""
        if self.running:
            return
        if not dovecot_available():
            raise DovecotError(f"dovecot is not installed ({', '.join(dovecot_binaries())})")
        with contextlib.suppress(FileNotFoundError):
            (self.dir / "run" / "master.pid").unlink()

        def ready() -> bool:
            try:
                with self.connect("lab-probe@example.test", timeout=1.0) as client:
                    client.noop()
                # doveadm who/kick talk to anvil, which may come up after the first login works.
                self.doveadm("who", "-1")
            except (IMAPClientError, DovecotError):
                return False
            return True

        try:
            command = [dovecot_binaries()[0], "-F", "-c", str(self.conf_path)]
            self._spawn(command, self.stderr_path, ready, timeout_s, DovecotError)
        except DovecotError as exc:
            raise DovecotError(f"{exc}\n{self.log_tail()}") from None

    def stop(self) -> None:
        """Kill the whole process group (logged-in imap processes too) and wait; no-op when stopped."""
        proc, self._proc = self._proc, None
        if proc is not None:
            kill_group(proc)
        untrack(self)

    def set_password(self, password: str) -> None:
        """Accept only `password` from now on (the config is rewritten; takes effect at the next `restart()`)."""
        self._password = password
        self.conf_path.write_text(self._config())

    def log_tail(self, lines: int = 30) -> str:
        """The end of Dovecot's log and of its stderr, for error messages."""
        return f"--- {self.log_path} ---\n{tail(self.log_path, lines)}\n--- stderr ---\n{tail(self.stderr_path, 10)}"

    # -- administration ---------------------------------------------------------------------------------------

    def doveadm(self, *args: str, ok_codes: Sequence[int] = (0,)) -> str:
        """Run ``doveadm -c CONF ARGS``; return stdout, raise `DovecotError` on an exit code not in `ok_codes`."""
        result = subprocess.run(
            [dovecot_binaries()[1], "-c", str(self.conf_path), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode not in ok_codes:
            raise DovecotError(f"doveadm {' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def sessions(self, user: str) -> int:
        """How many IMAP sessions `user` has open (``doveadm who``)."""
        out = self.doveadm("who", "-1", user)
        return sum(1 for line in out.splitlines()[1:] if line.split() and line.split()[0] == user.lower())

    def kick(self, user: str, timeout_s: float = 5.0) -> None:
        """Drop all IMAP sessions of `user` (``doveadm kick``) and wait until they are gone.

        A client of a kicked session gets ``* BYE`` or EOF: imapclient raises `IMAPClientAbortError` on its
        next call, then `OSError`s. A user without sessions is fine.
        """
        self.doveadm("kick", user, ok_codes=(0, _EX_NOUSER))
        with contextlib.suppress(WaitTimeout):  # a session that lingers fails the caller's next step, not this
            wait_for(lambda: not self.sessions(user), f"{user}'s sessions gone", timeout_s, interval_s=0.02)

    # -- mailbox helpers (through IMAP, as the user) -------------------------------------------------------

    @contextlib.contextmanager
    def connect(self, user: str, *, timeout: float = 10.0) -> Iterator[IMAPClient]:
        """A logged-in `IMAPClient` for `user`; logged out (or at least closed) on exit."""
        client = IMAPClient(self.host, port=self.port, ssl=False, timeout=timeout)
        try:
            client.login(user, self._password)
            yield client
        finally:
            try:
                client.logout()
            except (IMAPClientError, OSError):
                with contextlib.suppress(OSError):
                    client.shutdown()

    def append(self, user: str, raw: bytes, folder: str = "INBOX", flags: Sequence[str | bytes] = ()) -> int | None:
        """Store `raw` in `user`'s `folder` (created if missing); return its UID (from APPENDUID)."""
        with self.connect(user) as client:
            if folder.upper() != "INBOX" and not client.folder_exists(folder):
                client.create_folder(folder)
            response = client.append(folder, raw, flags=tuple(flags))
        match = _APPENDUID.search(response)
        return int(match.group(1)) if match else None

    def messages(self, user: str, folder: str = "INBOX") -> list[bytes]:
        """The raw bytes of every message in `user`'s `folder`, in UID order, without setting \\Seen.

        A folder that does not exist yet reads as empty.
        """
        with self.connect(user) as client:
            if folder.upper() != "INBOX" and not client.folder_exists(folder):
                return []
            client.select_folder(folder, readonly=True)
            uids = sorted(client.search("ALL"))
            if not uids:
                return []
            data = client.fetch(uids, [b"BODY.PEEK[]"])
            # A message the daemon expunges meanwhile has no body here, and an untagged "* N FETCH (FLAGS ...)"
            # without a UID is keyed by its sequence number, which may equal one of these UIDs (seen in
            # tests/proof/test_outages.py: KeyError b'BODY[]'): what has no body is gone, not in the snapshot.
            return [data[uid][b"BODY[]"] for uid in uids if b"BODY[]" in data.get(uid, {})]

    def flags(self, user: str, folder: str) -> list[tuple[bytes, ...]]:
        """The flags of every message in `user`'s `folder`, in UID order (read-only: nothing changes)."""
        with self.connect(user) as client:
            client.select_folder(folder, readonly=True)
            uids = sorted(client.search("ALL"))
            data = client.fetch(uids, ["FLAGS"]) if uids else {}
            return [data[uid][b"FLAGS"] for uid in uids if uid in data]

    def folders(self, user: str) -> list[str]:
        """The names of `user`'s folders."""
        with self.connect(user) as client:
            return [name for _flags, _delim, name in client.list_folders()]

    def wait_for_messages(self, user: str, count: int, folder: str = "INBOX", timeout_s: float = 30.0) -> list[bytes]:
        """Poll until `user`'s `folder` holds at least `count` messages; return them all.

        Raises `WaitTimeout`, a `TimeoutError` saying how many arrived, when they do not arrive in time.
        """
        found: list[bytes] = []

        def arrived() -> list[bytes] | None:
            found[:] = self.messages(user, folder)
            return found if len(found) >= count else None

        try:
            return wait_for(arrived, f"{count} messages in {user}/{folder}", timeout_s, interval_s=0.05,
                            retry_on=(IMAPClientError, OSError))  # fmt: skip
        except WaitTimeout as exc:
            raise WaitTimeout(f"{user}/{folder}: {len(found)} of {count} messages ({exc})") from None
