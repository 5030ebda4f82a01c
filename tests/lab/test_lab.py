"""Proof that the test lab itself works: Dovecot, the SMTP lab, sqld and the network guard."""

from __future__ import annotations

import asyncio
import signal
import smtplib
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiosmtplib
import libsql
import pytest
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, LoginError

from quinn.lab.wait import wait_for
from tests.lab.dovecot import Dovecot
from tests.lab.guard import install_network_guard
from tests.lab.process import _group_alive
from tests.lab.smtp import MailLab, SmtpLab, mx_stamp
from tests.lab.sqld import Sqld

Users = Callable[[str], str]


def mail(sender: str, to: str, subject: str, body: str = "Hello.") -> bytes:
    """A minimal RFC 5322 message."""
    return (
        f"From: {sender}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{subject.replace(' ', '-')}@lab>\r\n"
        f"\r\n{body}\r\n"
    ).encode()


@pytest.fixture
def private_dovecot(make_dovecot: Callable[..., Dovecot]) -> Dovecot:
    """A Dovecot of this test's own, for tests that stop or restart it."""
    return make_dovecot()


# -- Dovecot ---------------------------------------------------------------------------------------------------


def test_any_user_logs_in_with_the_lab_password(dovecot: Dovecot, users: Users) -> None:
    user = users("alice")
    with dovecot.connect(user) as client:
        assert client.noop()
        assert b"IDLE" in client.capabilities()
    assert "INBOX" in dovecot.folders(user)
    with IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=5) as client, pytest.raises(LoginError):
        client.login(user, "wrong password")


def test_append_then_fetch_round_trip_leaves_mail_unseen(dovecot: Dovecot, users: Users) -> None:
    user = users("bob")
    first, second = mail("x@example.test", user, "one"), mail("y@example.test", user, "two")
    uid1 = dovecot.append(user, first)
    uid2 = dovecot.append(user, second)
    assert uid1 is not None and uid2 is not None and uid2 > uid1
    assert dovecot.messages(user) == [first, second]
    with dovecot.connect(user) as client:
        client.select_folder("INBOX", readonly=True)
        assert client.search("UNSEEN") == [uid1, uid2]
    dovecot.append(user, first, folder="Archive")
    assert "Archive" in dovecot.folders(user)
    assert dovecot.wait_for_messages(user, 1, folder="Archive", timeout_s=5) == [first]
    assert dovecot.messages(user, folder="Nope") == []
    with pytest.raises(TimeoutError, match="1 of 2"):
        dovecot.wait_for_messages(user, 2, folder="Archive", timeout_s=0.2)


def test_kick_drops_a_live_session(dovecot: Dovecot, users: Users) -> None:
    user = users("carol")
    with dovecot.connect(user) as client:
        client.select_folder("INBOX")
        assert dovecot.sessions(user) == 1
        dovecot.kick(user)
        assert dovecot.sessions(user) == 0
        with pytest.raises((IMAPClientAbortError, OSError)):
            client.noop()
    dovecot.kick(user)  # nobody left to kick: not an error


def test_restart_keeps_port_and_mail(private_dovecot: Dovecot, users: Users) -> None:
    user = users("dave")
    raw = mail("x@example.test", user, "kept")
    private_dovecot.append(user, raw)
    port = private_dovecot.port
    private_dovecot.restart()
    assert private_dovecot.port == port
    assert private_dovecot.messages(user) == [raw]


def test_stopped_server_refuses_connections(private_dovecot: Dovecot) -> None:
    private_dovecot.stop()
    assert not private_dovecot.running
    with pytest.raises(ConnectionRefusedError):
        IMAPClient(private_dovecot.host, port=private_dovecot.port, ssl=False, timeout=5)
    private_dovecot.stop()  # twice is fine


def test_server_without_idle(make_dovecot: Callable[..., Dovecot]) -> None:
    with make_dovecot(idle=False).connect("eve@example.test") as client:
        capabilities = client.capabilities()
    assert b"IDLE" not in capabilities
    assert b"UIDPLUS" in capabilities and b"MOVE" in capabilities


# -- SMTP lab --------------------------------------------------------------------------------------------------


def test_smtp_delivers_to_each_recipients_inbox_with_return_path(mail_lab: MailLab) -> None:
    alice, quinn, cc = mail_lab.new_user("alice"), mail_lab.new_user("quinn"), mail_lab.new_user("cc")
    raw = mail(alice, quinn, "question")
    mail_lab.smtp.send(alice, [quinn, cc], raw)
    # Delivery happens before the 250, so the mail is there without waiting.
    for rcpt in (quinn, cc):
        [delivered] = mail_lab.dovecot.messages(rcpt)
        # As an MX delivers it: Return-Path, then the lab MX's stamp and Received field, then the mail as sent.
        expected = f"Return-Path: <{alice}>\r\n".encode() + mx_stamp(raw, alice)
        assert delivered.replace(b"\r\n", b"\n") == expected.replace(b"\r\n", b"\n")
        assert b"dmarc=pass header.from=example.test" in delivered
    assert [(r.mail_from, r.rcpt_tos, r.data) for r in mail_lab.smtp.received] == [(alice, [quinn, cc], raw)]


def test_null_sender_gets_empty_return_path(mail_lab: MailLab) -> None:
    quinn = mail_lab.new_user("quinn")
    mail_lab.smtp.send("", quinn, mail("MAILER-DAEMON@example.test", quinn, "bounce"))
    [delivered] = mail_lab.dovecot.wait_for_messages(quinn, 1, timeout_s=5)
    assert delivered.startswith(b"Return-Path: <>\r\n")


async def test_aiosmtplib_reaches_the_lab(mail_lab: MailLab) -> None:
    alice, quinn = mail_lab.new_user("alice"), mail_lab.new_user("quinn")
    await aiosmtplib.send(
        mail(quinn, alice, "reply"), sender=quinn, recipients=[alice], hostname="127.0.0.1", port=mail_lab.smtp.port
    )
    messages = await asyncio.to_thread(mail_lab.dovecot.messages, alice)
    assert len(messages) == 1


def test_fail_next_returns_the_code_then_recovers(mail_lab: MailLab) -> None:
    alice, quinn = mail_lab.new_user("alice"), mail_lab.new_user("quinn")
    mail_lab.smtp.fail_next(2, code=451)
    mail_lab.smtp.fail_next(1, code=550)
    for expected in (451, 451, 550):
        with pytest.raises(smtplib.SMTPDataError) as failure:
            mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "retry"))
        assert failure.value.smtp_code == expected
    assert mail_lab.dovecot.messages(quinn) == []
    mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "retry"))
    assert len(mail_lab.dovecot.messages(quinn)) == 1


def test_down_refuses_and_up_comes_back_on_the_same_port(mail_lab: MailLab) -> None:
    alice, quinn = mail_lab.new_user("alice"), mail_lab.new_user("quinn")
    port = mail_lab.smtp.port
    mail_lab.smtp.down()
    with pytest.raises(ConnectionRefusedError):
        mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "down"))
    mail_lab.smtp.up()
    assert mail_lab.smtp.port == port
    mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "up"))
    assert len(mail_lab.dovecot.messages(quinn)) == 1


def test_smtp_auth(dovecot: Dovecot, users: Users) -> None:
    quinn, alice = users("quinn"), users("alice")
    with SmtpLab(dovecot, auth=(quinn, "s3cret")) as lab:
        raw = mail(quinn, alice, "authed")
        with pytest.raises(smtplib.SMTPAuthenticationError) as bad:
            lab.send(quinn, alice, raw, auth=(quinn, "wrong"))
        assert bad.value.smtp_code == 535
        with smtplib.SMTP(lab.host, lab.port, timeout=5) as client, pytest.raises(smtplib.SMTPSenderRefused) as anon:
            client.sendmail(quinn, [alice], raw)
        assert anon.value.smtp_code == 530
        lab.send(quinn, alice, raw)
    assert len(dovecot.messages(alice)) == 1


# -- sqld ------------------------------------------------------------------------------------------------------


def test_sqld_round_trip_through_libsql(sqld: Sqld) -> None:
    conn = libsql.connect(sqld.url)
    try:
        conn.execute("CREATE TABLE lab_notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        conn.execute("INSERT INTO lab_notes (body) VALUES (?), (?)", ("first", "second"))
        conn.commit()
        rows = conn.execute("SELECT id, body FROM lab_notes ORDER BY id").fetchall()
    finally:
        conn.close()
    assert rows == [(1, "first"), (2, "second")]


# -- network guard ---------------------------------------------------------------------------------------------


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """A fresh guard on top of a stand-in for the real connect that never connects anywhere but 127.0.0.1.

    Yields the addresses that got past the guard: if the guard is broken, the test fails and still no packet
    leaves the machine.
    """
    leaked: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def stand_in(real: Callable[..., Any]) -> Callable[..., Any]:
        def connect(self: socket.socket, address: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
                leaked.append(address)
                raise AssertionError(f"the guard let {address!r} through")
            return real(self, address)

        return connect

    monkeypatch.setattr(socket.socket, "connect", stand_in(real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", stand_in(real_connect_ex))
    undo = install_network_guard()
    try:
        yield leaked
    finally:
        undo()


def test_guard_blocks_connects_outside_loopback(tripwire: list[Any]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(RuntimeError, match="outside"):
        sock.connect(("10.255.255.1", 9))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock, pytest.raises(RuntimeError, match="outside"):
        sock.connect_ex(("10.255.255.1", 9))
    with pytest.raises(RuntimeError, match=r"outside 127\.0\.0\.1"):
        socket.create_connection(("10.255.255.1", 9), timeout=1)
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock, pytest.raises(RuntimeError):
        sock.connect(("2001:db8::1", 9, 0, 0))
    with pytest.raises(RuntimeError, match="name lookup"):
        socket.create_connection(("mail.example.com", 993), timeout=1)
    assert tripwire == []


async def test_guard_blocks_asyncio_connects(tripwire: list[Any]) -> None:
    with pytest.raises(RuntimeError, match=r"outside 127\.0\.0\.1"):
        await asyncio.open_connection("10.255.255.1", 9)
    with pytest.raises(RuntimeError, match="name lookup"):
        await asyncio.open_connection("mail.example.com", 25)
    assert tripwire == []


def test_guard_allows_loopback_and_unix_sockets(tripwire: list[Any], dovecot: Dovecot, tmp_path: Path) -> None:
    with socket.create_connection((dovecot.host, dovecot.port), timeout=5) as sock:
        assert sock.recv(4).startswith(b"* OK")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        path = str(tmp_path / "lab.sock")
        server.bind(path)
        server.listen(1)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(path)
    assert tripwire == []


@pytest.mark.lab
def test_a_process_killed_with_sigterm_stops_the_lab_servers_it_started(tmp_path: Path) -> None:
    """A benchmark killed with SIGTERM left its model server running (an orphan holding a core); the lab now turns
    SIGTERM into SystemExit, so ``with`` blocks and the atexit hook stop what it started."""
    script = tmp_path / "holder.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from quinn.lab.process import LabServer\n"
        "class Sleeper(LabServer):\n"
        "    def __init__(self, folder):\n"
        "        self.dir = folder\n"
        "    def start(self, timeout_s=5.0):\n"
        "        self._spawn(['sleep', '600'], self.dir / 'log', lambda: True, timeout_s, RuntimeError)\n"
        "with Sleeper(Path(sys.argv[1])) as server:\n"
        "    server.start()\n"
        "    print(server._proc.pid, flush=True)\n"
        "    time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        child = int(holder.stdout.readline())  # type: ignore[union-attr]
        assert _group_alive(child)
        holder.send_signal(signal.SIGTERM)
        assert holder.wait(20) == 128 + signal.SIGTERM
        wait_for(lambda: not _group_alive(child), "the sleeper gone with its parent", 10)
    finally:
        holder.kill()
        holder.wait(10)
        holder.stdout.close()  # type: ignore[union-attr]
