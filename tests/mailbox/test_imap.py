"""ImapMailbox against a real Dovecot: folders, fetch, filing without loss, waiting, and every failure mode."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from quinn.errors import ConnectError
from quinn.mailbox.imap import IMAP_FAILURES, KEYWORD, HostUnknown, ImapLoginRejected, ImapMailbox
from tests.lab.dovecot import Dovecot
from tests.lab.mails import lab_settings, make_mail

Users = Callable[[str], str]


def mailbox(dovecot: Dovecot, user: str, **imap: object) -> ImapMailbox:
    box = ImapMailbox(lab_settings(dovecot, user, imap=dict(imap)).imap)
    box.connect()
    return box


def test_connect_creates_missing_folders_once(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user, processed_folder="Quinn/Done/2026", quarantine_folder="Bad")
    box.close()
    folders = set(dovecot.folders(user))
    assert {"Quinn", "Quinn.Done", "Quinn.Done.2026", "Bad", "Drafts", "Quinn.Sent"} <= folders
    again = mailbox(dovecot, user, processed_folder="Quinn/Done/2026", quarantine_folder="Bad")  # all exist now
    assert again.uidvalidity > 0
    again.close()
    assert set(dovecot.folders(user)) == folders


def test_fetch_leaves_mail_unseen_and_sizes_come_first(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    raw = make_mail("alice@example.test", user, body="line of text\n" * 400)
    uid = dovecot.append(user, raw)
    box = mailbox(dovecot, user)
    assert box.uids() == [uid]
    assert box.sizes([uid])[uid] >= 5200
    fetched = box.fetch(uid)
    assert fetched is not None and fetched.raw.count(b"line of text\r\n") == 400
    assert fetched.internal_date is not None and fetched.internal_date.tzinfo is not None
    assert box.fetch(uid + 100) is None
    box.close()
    assert b"\\Seen" not in dovecot.flags(user, "INBOX")[0]


def test_file_away_moves_with_keyword_and_answered(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    first, second = (dovecot.append(user, make_mail("a@example.test", user, subject=s)) for s in ("one", "two"))
    box = mailbox(dovecot, user)
    box.file_away(first, "Quinn/Processed", answered=True)
    box.file_away(second, "Quinn/Quarantine")
    box.close()
    assert dovecot.messages(user) == []
    [done] = dovecot.flags(user, "Quinn.Processed")
    assert KEYWORD in done and b"\\Answered" in done
    [bad] = dovecot.flags(user, "Quinn.Quarantine")
    assert KEYWORD in bad and b"\\Answered" not in bad


def test_without_move_the_copy_exists_before_the_original_goes(
    make_dovecot: Callable[..., Dovecot], users: Users
) -> None:
    server = make_dovecot(without=("MOVE",))
    user = users("quinn")
    uid = server.append(user, make_mail("a@example.test", user))
    box = mailbox(server, user)
    assert not box.can_move and box.can_uidplus
    box.file_away(uid, "Quinn/Processed")
    box.close()
    assert server.messages(user) == []  # UID EXPUNGE of that one UID
    assert len(server.messages(user, "Quinn.Processed")) == 1


def test_without_uidplus_nothing_is_expunged(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot(without=("MOVE", "UIDPLUS"))
    user = users("quinn")
    mine = server.append(user, make_mail("a@example.test", user, subject="mine"))
    theirs = server.append(user, make_mail("b@example.test", user, subject="theirs"), flags=["\\Deleted"])
    box = mailbox(server, user)
    box.file_away(mine, "Quinn/Processed")
    assert box.uids() == []  # ours is \Deleted now, so it is not looked at again
    box.close()
    # A plain EXPUNGE would have removed "theirs" (deleted by someone else, not copied): both stay.
    assert len(server.messages(user)) == 2
    assert len(server.messages(user, "Quinn.Processed")) == 1
    assert theirs


def test_purge_address_deletes_exactly_their_mail_and_ours_to_them(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    alice, malice, bob = "alice@example.test", "malice@example.test", "bob@example.test"
    placed = {
        "from alice": ("INBOX", make_mail(alice.upper(), user)),  # addresses compare case-insensitively
        "ours to alice": ("Quinn.Processed", make_mail(user, alice, subject="Re: Hello")),
        "ours copying alice": ("Quinn.Sent", make_mail(user, bob, subject="Re: Team", cc=[alice])),
        "from malice": ("INBOX", make_mail(malice, user)),  # SEARCH FROM alice matches her too: a substring
        "bob's copying alice": ("Quinn.Processed", make_mail(bob, user, subject="Team", cc=[alice])),  # bob's mail
        "ours to bob": ("Quinn.Sent", make_mail(user, bob, subject="Re: Other")),
    }
    for folder, raw in placed.values():
        dovecot.append(user, raw, folder)
    box = mailbox(dovecot, user)
    removed = box.purge_address(alice, user, ["INBOX", "Quinn/Processed", "Quinn/Sent", "Quinn/Missing"])
    assert removed == 3
    assert len(box.uids()) == 1  # the watched folder (INBOX) is selected again, with malice's mail only
    box.close()
    left = {folder: len(dovecot.messages(user, folder)) for folder in ("INBOX", "Quinn.Processed", "Quinn.Sent")}
    assert left == {"INBOX": 1, "Quinn.Processed": 1, "Quinn.Sent": 1}
    assert malice.encode() in dovecot.messages(user)[0]
    assert b"Subject: Team" in dovecot.messages(user, "Quinn.Processed")[0]


def test_the_sweep_after_a_purge_spares_waiting_mail_and_later_mail(dovecot: Dovecot, users: Users) -> None:
    """After a purge by email: mail waiting in the watched folder stays, and so does mail from the user that
    arrived after the purge was confirmed (a forged purge must never delete the real user's new mail)."""
    user, alice = users("quinn"), "alice@example.test"
    dovecot.append(user, make_mail(alice, user, subject="Waiting"))  # unprocessed or deferred, in the watched folder
    dovecot.append(user, make_mail(alice, user, subject="Old"), "Quinn.Processed")
    time.sleep(1.1)  # INTERNALDATE has whole seconds
    moment = datetime.now(UTC)
    time.sleep(1.1)
    dovecot.append(user, make_mail(alice, user, subject="New"), "Quinn.Processed")
    dovecot.append(user, make_mail(user, alice, subject="Re: Old"), "Quinn.Sent")  # ours: goes whenever it came
    box = mailbox(dovecot, user)
    assert box.purge_address(alice, user, received_before=moment) == 2
    box.close()
    assert [b"Subject: New" in m for m in dovecot.messages(user, "Quinn.Processed")] == [True]
    assert len(dovecot.messages(user)) == 1 and not dovecot.messages(user, "Quinn.Sent")


def test_file_away_recreates_a_folder_deleted_under_us(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    uid = dovecot.append(user, make_mail("a@example.test", user))
    box = mailbox(dovecot, user)
    with dovecot.connect(user) as client:
        client.delete_folder("Quinn.Processed")
    box.file_away(uid, "Quinn/Processed")
    box.close()
    assert len(dovecot.messages(user, "Quinn.Processed")) == 1


def test_message_id_search_and_filing_copies(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    dovecot.append(user, make_mail(user, "alice@example.test", message_id="<quinn.1@example.test>"))
    dovecot.append(user, make_mail("bob@example.test", user, message_id="<other@example.test>"))
    dovecot.append(user, make_mail(user, "carol@example.test", message_id="<quinn.2@example.test>"), "Quinn.Sent")
    assert box.holds_message_id("<quinn.1@example.test>", ["INBOX", "Quinn/Sent"])
    assert box.holds_message_id("<quinn.2@example.test>", ["INBOX", "Quinn/Sent"])
    assert not box.holds_message_id("<quinn.3@example.test>", ["INBOX", "Quinn/Sent", "Drafts"])
    assert len(box.uids()) == 2  # the watched folder is selected again
    assert box.file_copies("<quinn.1@example.test>", "Quinn/Sent") == 1
    assert len(box.uids()) == 1
    box.close()
    assert len(dovecot.messages(user, "Quinn.Sent")) == 2


# --- waiting ------------------------------------------------------------------------------------------


def test_idle_wakes_on_new_mail(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    assert box.can_idle
    threading.Timer(0.3, dovecot.append, (user, make_mail("a@example.test", user))).start()
    assert box.wait(60, threading.Event()) is True
    assert len(box.uids()) == 1
    box.close()


def test_mail_announced_during_a_pass_is_not_waited_for(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    assert box.uids() == []
    dovecot.append(user, make_mail("a@example.test", user))
    # Any command in the pass (here the NOOP before a search for our own copy) is answered with "* 1 EXISTS";
    # IDLE would never report that message again, so wait() must return at once instead of idling 25 minutes.
    assert box.file_copies("<nothing@example.test>", "Quinn/Sent") == 0
    assert box.wait(600, threading.Event()) is True
    assert len(box.uids()) == 1
    box.close()


def test_mail_arriving_between_commands_and_idle_is_seen(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    assert box.uids() == []
    dovecot.append(user, make_mail("a@example.test", user))  # after our last command, before any IDLE
    # Dovecot's IDLE would hold this one back until the IDLE ends; the NOOP before IDLE gets it now.
    assert box.wait(600, threading.Event()) is True
    assert len(box.uids()) == 1
    box.close()


def test_idle_is_renewed_and_still_sees_mail(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user, idle_renew_s=1)
    stop = threading.Event()
    # The caller asks for 10 minutes; each IDLE ends after idle_renew_s and the connection stays usable.
    assert box.wait(600, stop) is False
    assert box.wait(600, stop) is False
    assert box.idle_cycles == 2
    threading.Timer(0.2, dovecot.append, (user, make_mail("a@example.test", user))).start()
    assert box.wait(600, stop) is True
    box.close()


def test_stop_ends_a_wait(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    assert box.wait(600, stop) is False  # the pytest timeout would fail a wait that ignores stop
    box.close()


def test_polling_without_idle_sends_keepalives(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot(idle=False)
    user = users("quinn")
    box = mailbox(server, user, keepalive_s=0.3)
    assert not box.can_idle
    assert box.wait(1.2, threading.Event()) is False
    assert box.keepalives >= 2
    server.append(user, make_mail("a@example.test", user))
    assert box.wait(0.1, threading.Event()) is True  # the poll's NOOP reports the new message
    box.close()


def test_kick_during_idle_raises(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    threading.Timer(0.3, dovecot.kick, (user,)).start()
    with pytest.raises(IMAP_FAILURES):
        box.wait(600, threading.Event())
    box.close()


def test_server_killed_during_idle_raises(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot()
    user = users("quinn")
    box = mailbox(server, user)
    threading.Timer(0.3, server.stop).start()  # SIGKILL: no BYE, only EOF, which imapclient's idle_check swallows
    with pytest.raises(IMAP_FAILURES):
        box.wait(600, threading.Event())
    box.close()


def test_kick_between_commands_raises_abort(dovecot: Dovecot, users: Users) -> None:
    user = users("quinn")
    box = mailbox(dovecot, user)
    dovecot.kick(user)
    with pytest.raises(IMAP_FAILURES):  # IMAPClientAbortError or BrokenPipeError, whichever the socket sees first
        box.uids()
    with pytest.raises(IMAP_FAILURES):
        box.uids()
    box.close()


# --- connecting ---------------------------------------------------------------------------------------


def test_wrong_password_is_a_login_rejection(dovecot: Dovecot, users: Users) -> None:
    config = lab_settings(dovecot, users("quinn"), env={"QUINN_TEST_IMAP_PASSWORD": "wrong"}).imap
    with pytest.raises(ImapLoginRejected, match=r"IMAP login as \S+ at \S+ rejected") as caught:
        ImapMailbox(config).connect()
    assert "QUINN_TEST_IMAP_PASSWORD" in str(caught.value) and dovecot.password not in str(caught.value)


def test_refused_is_a_connect_error(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot()
    server.stop()
    with pytest.raises(ConnectError, match="unreachable: ConnectionRefusedError"):
        mailbox(server, users("quinn"))


def test_hung_server_times_out(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot()
    user = users("quinn")
    box = mailbox(server, user, timeout_s=1)
    assert server._proc is not None
    os.killpg(server._proc.pid, signal.SIGSTOP)  # our own lab server: a hung, not a dead, peer
    try:
        with pytest.raises(IMAP_FAILURES):
            box.uids()
        with pytest.raises(ConnectError, match="IMAP"):
            ImapMailbox(box.config).connect()
    finally:
        os.killpg(server._proc.pid, signal.SIGCONT)
    box.close()
    time.sleep(0)  # the server resumes; the fixture stops it


def test_uidvalidity_change_is_noticed(make_dovecot: Callable[..., Dovecot], users: Users) -> None:
    server = make_dovecot()
    user = users("quinn")
    server.append(user, make_mail("a@example.test", user))
    box = mailbox(server, user)
    old = box.uidvalidity
    server.doveadm("mailbox", "update", "-u", user, "--uid-validity", str(old + 1000), "INBOX")
    # Either the live session learns it (and reselects), or Dovecot drops it and the next connection learns it.
    try:
        assert box.check_uidvalidity() == old
    except IMAP_FAILURES:
        box.close()
        box.connect()
    assert box.uidvalidity == old + 1000
    assert box.check_uidvalidity() is None
    assert len(box.uids()) == 1
    box.close()


# --- TLS ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tls", ["ssl", "starttls"])
def test_tls_with_a_private_ca(make_dovecot: Callable[..., Dovecot], users: Users, tls_cert, tls: str) -> None:
    server = make_dovecot(tls=tls_cert)
    user = users("quinn")
    port = server.tls_port if tls == "ssl" else server.port
    box = mailbox(server, user, tls=tls, port=port, ca_file=str(tls_cert[0]))
    assert box.uids() == []
    box.close()
    with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        mailbox(server, user, tls=tls, port=port)  # the system CAs do not know the lab's certificate


def test_connect_for_a_check_creates_nothing(dovecot: Dovecot, users: Users) -> None:
    """quinn check used to create five folders as a side effect; now it lists what the first start creates."""
    user = users("quinn")
    box = ImapMailbox(lab_settings(dovecot, user).imap)
    box.connect(create_folders=False)
    assert box.missing_folders == ["Quinn/Processed", "Quinn/Quarantine", "Drafts", "Quinn/Sent"]
    assert box.recent_headers(["INBOX", "Quinn/Processed"]) == []
    box.close()
    assert not [f for f in dovecot.folders(user) if f.startswith(("Quinn", "Drafts"))]
    watched = ImapMailbox(lab_settings(dovecot, user, imap={"folder": "Quinn/In"}).imap)
    watched.connect(create_folders=False)  # the watched folder itself does not exist yet: nothing is selected
    assert "Quinn/In" in watched.missing_folders
    watched.close()


def test_tls_against_a_plain_port_says_what_to_try(dovecot: Dovecot, users: Users) -> None:
    box = ImapMailbox(lab_settings(dovecot, users("quinn"), imap={"tls": "ssl"}).imap)
    with pytest.raises(ConnectError) as info:
        box.connect()
    assert "does not speak TLS right away" in str(info.value) and 'tls = "starttls"' in str(info.value)


def test_a_host_name_that_does_not_resolve_is_its_own_error(dovecot: Dovecot, users: Users) -> None:
    """A typo, not an outage: quinn run stops at start with it instead of retrying forever."""
    settings = lab_settings(dovecot, users("quinn"))
    # A name that fails to resolve without asking DNS (tests make no lookups off the machine): a loopback
    # address with an interface that does not exist.
    box = ImapMailbox(settings.imap.model_copy(update={"host": "::1%quinn-no-such-if"}))
    with pytest.raises(HostUnknown, match="does not resolve"):
        box.connect()
