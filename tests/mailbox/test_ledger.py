"""The mail ledger and the outbox on a real libSQL file: states, UIDVALIDITY resync, rate caps, in-flight sends,
and the leases several daemons on one database claim mail and learning with."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quinn.agent import learning
from quinn.db import Database
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.outbox import Outbox, carries_raw

NOW = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database.open(str(tmp_path / "quinn.db"))
    try:
        yield database
    finally:
        database.close()


def test_receive_is_idempotent_and_states_carry_reasons(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    assert ledger.receive(key).state == "received"
    ledger.set(key, "handling", "authenticated", message_id="<m@x>", user_id="alice@x", thread_key="<root@x>")
    again = ledger.receive(key)
    assert (again.state, again.reason, again.message_id, again.user_id) == (
        "handling",
        "authenticated",
        "<m@x>",
        "alice@x",
    )
    ledger.set(key, "replied", "authenticated")
    assert ledger.get(key).final  # type: ignore[union-attr]
    assert ledger.counts() == {"replied": 1}


def test_defer_counts_attempts_unless_told_not_to(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    ledger.receive(key)
    assert ledger.defer(key, "model down", NOW + timedelta(minutes=1)) == 1
    assert ledger.defer(key, "rate cap", NOW + timedelta(minutes=30), count_attempt=False) == 1
    record = ledger.get(key)
    assert record is not None and record.state == "deferred" and record.reason == "rate cap"
    assert ledger.next_due("INBOX", 7) == NOW + timedelta(minutes=30)
    assert ledger.next_due("INBOX", 8) is None


def test_finished_mail_gone_from_the_folder_is_settled_as_filed(db: Database) -> None:
    """A crash between the IMAP move and ``mark_moved``: the folder no longer holds the mail, so it was filed."""
    ledger = MailLedger(db)
    moved_away, still_here, open_one, other_validity = (MailKey("INBOX", 7, 1), MailKey("INBOX", 7, 2),
                                                        MailKey("INBOX", 7, 3), MailKey("INBOX", 6, 4))  # fmt: skip
    for key in (moved_away, still_here, open_one, other_validity):
        ledger.receive(key)
    for key in (moved_away, still_here, other_validity):
        ledger.set(key, "replied", "ok")
    ledger.set(open_one, "handling", "ok")
    assert ledger.settle_moved("INBOX", 7, [2, 3]) == 1
    moved = {key.uid: ledger.get(key).moved for key in (moved_away, still_here, open_one, other_validity)}  # type: ignore[union-attr]
    assert moved == {1: True, 2: False, 3: False, 4: False}
    assert ledger.settle_moved("INBOX", 7, [2, 3]) == 0


def test_uidvalidity_resync_supersedes_unfinished_rows_and_carries_them_over(db: Database) -> None:
    ledger = MailLedger(db)
    done, waiting, unread = MailKey("INBOX", 1, 1), MailKey("INBOX", 1, 2), MailKey("INBOX", 1, 3)
    for key in (done, waiting, unread):
        ledger.receive(key)
    ledger.set(done, "replied", "ok", message_id="<done@x>")
    ledger.set(waiting, "handling", "ok", message_id="<waiting@x>")
    ledger.defer(waiting, "model down", NOW + timedelta(hours=2))
    ledger.defer(waiting, "model down", NOW + timedelta(hours=2))
    assert ledger.resync("INBOX", 1) == 0  # nothing under another UIDVALIDITY
    assert ledger.resync("INBOX", 2) == 2
    assert ledger.resync("INBOX", 2) == 0
    assert ledger.get(done).state == "replied"  # type: ignore[union-attr]
    old = ledger.get(waiting)
    assert old is not None and old.state == "superseded" and old.moved
    assert "UIDVALIDITY of INBOX is now 2" in old.reason and "deferred" in old.reason
    # The same mails under their new keys: the replied one is found final, the waiting one carries on.
    assert ledger.elsewhere("<done@x>", MailKey("INBOX", 2, 1)).state == "replied"  # type: ignore[union-attr]
    new_key = MailKey("INBOX", 2, 2)
    ledger.receive(new_key)
    earlier = ledger.elsewhere("<waiting@x>", new_key)
    assert earlier is not None and earlier.key == waiting
    carried = ledger.carry_over(earlier, new_key)
    assert (carried.state, carried.attempts, carried.next_attempt_at) == ("deferred", 2, old.next_attempt_at)
    assert ledger.get(waiting).reason.endswith("carried on as 2/2")  # type: ignore[union-attr]


def test_elsewhere_prefers_a_final_row(db: Database) -> None:
    ledger = MailLedger(db)
    live, final = MailKey("INBOX", 1, 1), MailKey("INBOX", 1, 2)
    for key in (live, final):
        ledger.receive(key)
        ledger.set(key, "handling", "", message_id="<m@x>")
    ledger.set(final, "ignored", "duplicate")
    assert ledger.elsewhere("<m@x>", MailKey("INBOX", 1, 3)).key == final  # type: ignore[union-attr]
    assert ledger.elsewhere("<m@x>", final).key == live  # type: ignore[union-attr]
    assert ledger.elsewhere("<other@x>", live) is None


def test_a_retried_mail_is_carried_on_under_its_new_uid_with_fresh_attempts(db: Database) -> None:
    """`quinn mail status --retry` moves a failed mail back: it returns under a new UID and must be handled."""
    ledger = MailLedger(db)
    failed = MailKey("INBOX", 1, 1)
    ledger.receive(failed)
    ledger.set(failed, "handling", "ok", message_id="<m@x>")
    for _ in range(3):
        ledger.defer(failed, "model down", NOW)
    ledger.set(failed, "failed", "gave up after 3 attempts")
    ledger.retry(failed, "retry requested by the operator")
    assert ledger.resync("INBOX", 2) == 0  # a retried row is not unfinished work of its own
    again = MailKey("INBOX", 1, 2)
    ledger.receive(again)
    earlier = ledger.elsewhere("<m@x>", again)
    assert earlier is not None and (earlier.key, earlier.state, earlier.attempts) == (failed, "retried", 0)
    carried = ledger.carry_over(earlier, again)
    assert (carried.state, carried.message_id, carried.attempts) == ("received", "<m@x>", 0)
    assert ledger.get(failed).reason.endswith("carried on as 1/2")  # type: ignore[union-attr]


def test_rate_caps_per_sender_and_per_thread(db: Database) -> None:
    ledger = MailLedger(db)
    for uid in range(1, 4):
        key = MailKey("INBOX", 1, uid)
        ledger.receive(key)
        ledger.set(key, "replied", "ok", user_id="alice@x", thread_key=f"<t{uid % 2}@x>")
    stamps = ["2026-11-22T08:10:00+00:00", "2026-11-22T08:20:00+00:00", "2026-11-22T08:30:00+00:00"]
    for uid, stamp in zip(range(1, 4), stamps, strict=True):
        db.execute("UPDATE mail_state SET replied_at = ? WHERE uid = ?", (stamp, uid))
    assert ledger.cap_reached("alice@x", "<new@x>", per_sender=4, per_thread=2, now=NOW) is None
    reason, until = ledger.cap_reached("alice@x", "<new@x>", per_sender=3, per_thread=2, now=NOW)  # type: ignore[misc]
    assert reason.startswith("rate cap: 3 replies to this sender") and until == datetime(
        2026, 11, 22, 9, 10, tzinfo=UTC
    )
    # uids 1 and 3 share thread <t1@x>: with a cap of 2 the oldest (08:10) must leave the window first.
    reason, until = ledger.cap_reached("bob@x", "<t1@x>", per_sender=9, per_thread=2, now=NOW)  # type: ignore[misc]
    assert "this thread" in reason and until == datetime(2026, 11, 22, 9, 10, tzinfo=UTC)
    # Older than an hour: not counted.
    assert ledger.cap_reached("alice@x", "<t1@x>", 3, 2, now=NOW + timedelta(hours=2)) is None


def test_outbound_caps_per_domain_in_all_and_to_strangers(db: Database) -> None:
    """Issue 30: an attacker has unlimited local parts, so a reply also counts for each domain it touches, for all
    replies together, and (to a sender nobody vouched for) for all such replies; the mail waits for the oldest."""
    ledger = MailLedger(db)
    ledger.count_outbound({"victims.test"}, NOW - timedelta(days=2))  # swept by the next count: older than a day
    for minute in (10, 20, 30):  # three replies from attacker.test to victims.test
        ledger.count_outbound({"attacker.test", "victims.test"}, NOW - timedelta(minutes=60 - minute))
    assert db.query_value("SELECT count(*) FROM outbound_domains WHERE domain = 'victims.test'") == 3
    caps = {"per_domain": 3, "per_hour": 10, "unverified": False, "per_unverified": 1, "now": NOW}
    reason, until = ledger.outbound_cap_reached({"victims.test"}, **caps)  # type: ignore[misc, arg-type]
    assert reason == "rate cap: 3 replies touching victims.test in the last hour (cap 3)"
    assert until == datetime(2026, 11, 22, 9, 10, tzinfo=UTC)  # when the 08:10 one leaves the hour
    assert ledger.outbound_cap_reached({"example.test"}, **caps) is None  # type: ignore[arg-type]
    for uid, key in enumerate(("alice@x", "unverified:carol@y"), start=1):
        mail = MailKey("INBOX", 1, uid)
        ledger.receive(mail)
        ledger.set(mail, "replied", "ok", sender_key=key)
        db.execute("UPDATE mail_state SET replied_at = ? WHERE uid = ?", (f"2026-11-22T08:{uid}5:00+00:00", uid))
    reason, until = ledger.outbound_cap_reached({"y"}, **{**caps, "unverified": True})  # type: ignore[misc, arg-type]
    assert reason.startswith("rate cap: 1 replies to unverified senders") and until.minute == 25
    assert ledger.outbound_cap_reached({"x"}, **caps) is None  # type: ignore[arg-type]  # alice is vouched for
    reason, _ = ledger.outbound_cap_reached({"x"}, **{**caps, "per_hour": 2})  # type: ignore[misc, arg-type]
    assert reason == "rate cap: 2 replies in the last hour (cap 2)"
    assert ledger.outbound_cap_reached({"victims.test"}, **{**caps, "now": NOW + timedelta(hours=2)}) is None  # type: ignore[arg-type]


def test_a_copy_carries_the_replys_body_whatever_the_server_did_to_headers_spaces_and_line_ends() -> None:
    ours = b"Message-ID: <r1@q>\r\nSubject: Re: Hi\r\n\r\nHello Alice,\r\n\r\nThe answer is 42.\r\n"
    delivered = b"Return-Path: <q@x>\nReceived: from lab\nMessage-ID: <r1@q>\n\nHello Alice,\n\nThe answer is 42.\n"
    assert carries_raw(ours, delivered)
    assert carries_raw(ours, delivered.replace(b"42.\n", b"42.\n\n-- \nScanned by the server\n"))  # a banner
    assert carries_raw(ours.replace(b"\r\n", b"\n"), delivered)  # our bytes with bare line ends
    assert not carries_raw(ours, b"Message-ID: <r1@q>\r\n\r\nHello Alice, the answer is 41.\r\n")  # forged
    assert not carries_raw(b"Message-ID: <r1@q>\r\n\r\n", delivered)  # an empty body proves nothing
    assert not carries_raw(b"", delivered)


def test_outbox_in_flight_states(db: Database) -> None:
    outbox = Outbox(db)
    item = outbox.put("<quinn.1@q>", "<m@x>", "alice@x", None, ["alice@x"], b"raw")
    assert (item.state, item.attempts, item.in_flight) == ("pending", 0, False)
    assert outbox.put("<quinn.1@q>", "<m@x>", None, None, [], b"other").raw == b"raw"  # first write wins
    item = outbox.begin("<quinn.1@q>", "sending")
    assert (item.state, item.attempts, item.in_flight) == ("sending", 1, True)
    assert [i.message_id for i in outbox.pending()] == ["<quinn.1@q>"]
    item = outbox.mark("<quinn.1@q>", "pending", "451 try later")
    assert (item.state, item.last_error, item.attempts) == ("pending", "451 try later", 1)
    outbox.begin("<quinn.1@q>", "sending")
    assert outbox.mark("<quinn.1@q>", "sent").state == "sent"
    assert outbox.pending() == [] and outbox.counts() == {"sent": 1}
    with pytest.raises(ValueError, match="in-flight"):
        outbox.begin("<quinn.1@q>", "sent")


# -- leases (migration 0015): several daemons on one database; one holder at a time, taken over only once the
# -- lease ran out by the clock (or its holder is known dead), given back when done.

A, B = "host-a:ns:101:aaaaaa", "host-b:ns:202:bbbbbb"


def test_one_holder_claims_a_mail_until_its_lease_runs_out(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    ledger.receive(key)
    mine = ledger.claim(key, A, NOW, 15)
    assert mine is not None and mine.state == "received"
    assert ledger.lease_of(key) == (A, (NOW + timedelta(seconds=15)).isoformat())
    assert ledger.claim(key, B, NOW + timedelta(seconds=14), 15) is None  # A's still
    renewed = ledger.claim(key, A, NOW + timedelta(seconds=10), 15)  # A renews its own
    assert renewed is not None
    assert ledger.claim(key, B, NOW + timedelta(seconds=24), 15) is None  # the renewal counts
    # A was killed: nobody renews; once the lease ran out, B takes the mail over, and sees where A left it.
    ledger.set(key, "handling", "authenticated", message_id="<m@x>")
    taken = ledger.claim(key, B, NOW + timedelta(seconds=26), 15)
    assert taken is not None and (taken.state, taken.message_id) == ("handling", "<m@x>")
    assert ledger.claim(key, A, NOW + timedelta(seconds=27), 15) is None  # A, back, does not get it back


def test_a_released_lease_is_free_and_only_its_holder_releases_it(db: Database) -> None:
    ledger = MailLedger(db)
    key, other = MailKey("INBOX", 7, 1), MailKey("INBOX", 7, 2)
    ledger.receive(key)
    ledger.receive(other)
    assert ledger.claim(key, A, NOW, 900) is not None
    assert ledger.claim(other, B, NOW, 900) is not None  # a lease is per mail
    ledger.release_lease(key, B)  # not B's: nothing happens
    assert ledger.lease_of(key)[0] == A
    ledger.release_lease(key, A)
    assert ledger.lease_of(key) == (None, None)
    assert ledger.claim(key, B, NOW + timedelta(seconds=1), 900) is not None  # at once, no waiting for expiry
    assert ledger.claim(MailKey("INBOX", 7, 3), A, NOW, 900) is None  # a mail never received has no row


def test_one_daemon_learns_from_a_mail_and_a_dead_ones_try_is_taken_over(db: Database) -> None:
    learning.put(db, "<m@x>", "alice@x", b"Subject: hi\r\n\r\nhello\r\n", None)
    first = learning.begin(db, "<m@x>", A, NOW, 15)
    assert first is not None and not first.interrupted
    assert learning.begin(db, "<m@x>", B, NOW + timedelta(seconds=5), 15) is None  # A is learning from it
    again = learning.begin(db, "<m@x>", B, NOW + timedelta(seconds=16), 15)  # A's lease ran out: A died
    assert again is not None and again.interrupted and again.user_id == "alice@x"
    learning.done(db, "<m@x>")
    assert learning.begin(db, "<m@x>", A, NOW + timedelta(seconds=40), 15) is None  # learnt: off the queue


def test_a_lease_of_a_holder_known_dead_is_taken_at_once(db: Database) -> None:
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 1)
    ledger.receive(key)
    assert ledger.claim(key, A, NOW, 900) is not None
    assert ledger.claim(key, B, NOW, 900, dead="someone-else") is None  # only the named dead holder's
    assert ledger.claim(key, B, NOW, 900, dead=A) is not None  # A's process is gone: no waiting 900 s
    learning.put(db, "<m@x>", "alice@x", b"Subject: hi\r\n\r\nhello\r\n", None)
    assert learning.begin(db, "<m@x>", A, NOW, 900) is not None
    assert learning.holder_of(db, "<m@x>") == A
    assert learning.begin(db, "<m@x>", B, NOW, 900) is None
    taken = learning.begin(db, "<m@x>", B, NOW, 900, dead=A)
    assert taken is not None and taken.interrupted


def test_settling_leaves_a_mail_another_daemon_is_filing(db: Database) -> None:
    """B finished a mail that arrived after A listed the folder and is moving it: not in A's list, yet still in
    the folder. A must not mark it filed; once B's lease ran out (B died before filing it), A may."""
    ledger = MailLedger(db)
    key = MailKey("INBOX", 7, 5)
    ledger.receive(key)
    assert ledger.claim(key, B, NOW, 15) is not None
    ledger.set(key, "replied", "ok")
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW + timedelta(seconds=1)) == 0
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=B, now=NOW + timedelta(seconds=1)) == 1  # B's own
    other = MailKey("INBOX", 7, 6)
    ledger.receive(other)
    assert ledger.claim(other, B, NOW, 15) is not None
    ledger.set(other, "replied", "ok")
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW + timedelta(seconds=16)) == 1  # ran out
    third = MailKey("INBOX", 7, 7)
    ledger.receive(third)
    assert ledger.claim(third, B, NOW, 15) is not None
    ledger.set(third, "replied", "ok")  # B crashed after moving it, before saying so; restarted as A
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW, dead=lambda h: h == "nobody") == 0
    assert ledger.settle_moved("INBOX", 7, [1, 2], holder=A, now=NOW, dead=lambda h: h == B) == 1  # no waiting


def test_strikes_count_tries_that_never_ended_and_a_try_that_ends_clears_them(db: Database) -> None:
    """Issue 30: a try at reading a mail is a strike until it ends; kills leave them counted, per mail."""
    ledger = MailLedger(db)
    key, other = MailKey("INBOX", 7, 1), MailKey("INBOX", 7, 2)
    ledger.receive(key)
    ledger.receive(other)
    assert ledger.get(key).strikes == 0  # type: ignore[union-attr]
    assert ledger.strike(key) == 1
    assert ledger.strike(key) == 2  # the daemon was killed during the first try
    assert ledger.get(other).strikes == 0  # type: ignore[union-attr]
    ledger.clear_strikes(key)
    assert ledger.get(key).strikes == 0  # type: ignore[union-attr]
