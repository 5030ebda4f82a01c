"""Sessions on a real libSQL file: joined by the id graph, merged when a mail links two, and a subject fallback
that stays with one correspondent and one window (FACTS.md: subject threading merged an unrelated "Re: Q3")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from quinn.db import Database
from quinn.mailbox.message import InboundEmail
from quinn.mailbox.parse import parse_email
from quinn.mailbox.threads import Sessions, thread_key
from tests.lab.mails import make_mail

NOW = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)
ALICE, BOB = "alice@example.test", "bob@example.test"


@pytest.fixture
def sessions(tmp_path: Path) -> Iterator[Sessions]:
    db = Database.open(str(tmp_path / "quinn.db"))
    try:
        yield Sessions(db, subject_window_days=14)
    finally:
        db.close()


def mail(
    sender: str,
    message_id: str,
    subject: str = "Q3 report",
    *,
    in_reply_to: str | None = None,
    references: list[str] | None = None,
) -> InboundEmail:
    return parse_email(
        make_mail(
            sender, "quinn@quinn.test", subject, message_id=message_id, in_reply_to=in_reply_to, references=references
        )
    )


def members(sessions: Sessions, session_id: str) -> set[str]:
    rows = sessions.db.query("SELECT message_id FROM session_ids WHERE session_id = ?", (session_id,))
    return {r[0] for r in rows}


def test_reply_joins_by_in_reply_to_and_by_references(sessions: Sessions) -> None:
    first = sessions.assign(mail(ALICE, "<a1@x>"), ALICE, NOW)
    assert sessions.assign(mail(ALICE, "<a2@x>", "Re: Q3 report", in_reply_to="<a1@x>"), ALICE, NOW) == first
    assert sessions.assign(mail(ALICE, "<a3@x>", "other words", references=["<a1@x>", "<a2@x>"]), ALICE, NOW) == first
    assert members(sessions, first) == {"<a1@x>", "<a2@x>", "<a3@x>"}


def test_a_reply_to_our_reply_joins_through_our_id(sessions: Sessions) -> None:
    first = sessions.assign(mail(ALICE, "<a1@x>"), ALICE, NOW)
    sessions.link(first, "<quinn.1@quinn.test>")
    # Her client only names our reply (a trimmed References): still the same session.
    assert sessions.assign(mail(ALICE, "<a2@x>", in_reply_to="<quinn.1@quinn.test>"), ALICE, NOW) == first


def test_assign_is_idempotent(sessions: Sessions) -> None:
    first = sessions.assign(mail(ALICE, "<a1@x>"), ALICE, NOW)
    assert sessions.assign(mail(ALICE, "<a1@x>"), ALICE, NOW + timedelta(hours=1)) == first
    assert sessions.db.query_value("SELECT count(*) FROM sessions") == 1


def test_a_mail_linking_two_sessions_merges_them_into_the_older(sessions: Sessions) -> None:
    older = sessions.assign(mail(ALICE, "<a1@x>", "Trip"), ALICE, NOW)
    newer = sessions.assign(mail(ALICE, "<b1@x>", "Budget"), ALICE, NOW + timedelta(minutes=5))
    assert older != newer
    sessions.store_inbound(newer, ALICE, mail(ALICE, "<b1@x>", "Budget"))
    joined = sessions.assign(
        mail(ALICE, "<c1@x>", "Re: both", references=["<a1@x>", "<b1@x>"]), ALICE, NOW + timedelta(minutes=10)
    )
    assert joined == older
    assert members(sessions, older) == {"<a1@x>", "<b1@x>", "<c1@x>"}
    assert members(sessions, newer) == set()
    assert [m.message_id for m in sessions.thread(older)] == ["<b1@x>"]  # the stored message moved along
    row = sessions.db.query_one("SELECT merged_into, status FROM sessions WHERE id = ?", (newer,))
    assert row == (older, "merged")
    # Later mail that names only the merged session's id lands in the surviving one.
    assert sessions.assign(mail(ALICE, "<d1@x>", in_reply_to="<b1@x>"), ALICE, NOW + timedelta(hours=1)) == older


def test_subject_fallback_only_without_ids_same_person_within_the_window(sessions: Sessions) -> None:
    first = sessions.assign(mail(ALICE, "<a1@x>", "Q3 report"), ALICE, NOW)
    # No ids at all (a client that drops them), same correspondent, same normalised subject: joined.
    assert sessions.assign(mail(ALICE, "<a2@x>", "AW: Re: Q3  Report"), ALICE, NOW + timedelta(days=3)) == first
    # Too late: a new session.
    late = sessions.assign(mail(ALICE, "<a3@x>", "Re: Q3 report"), ALICE, NOW + timedelta(days=30))
    assert late != first


def test_re_q3_report_from_someone_else_is_not_merged(sessions: Sessions) -> None:
    alices = sessions.assign(mail(ALICE, "<a1@x>", "Q3 report"), ALICE, NOW)
    bobs = sessions.assign(mail(BOB, "<b1@x>", "Re: Q3 report"), BOB, NOW + timedelta(minutes=1))
    assert bobs != alices
    assert members(sessions, alices) == {"<a1@x>"}


def test_unknown_ids_do_not_fall_back_to_the_subject(sessions: Sessions) -> None:
    first = sessions.assign(mail(ALICE, "<a1@x>", "Q3 report"), ALICE, NOW)
    # A reply within another conversation (ids we never saw) that happens to share the subject: not joined.
    other = sessions.assign(mail(ALICE, "<a2@x>", "Re: Q3 report", in_reply_to="<colleague@y>"), ALICE, NOW)
    assert other != first


def test_a_reference_to_someone_elses_session_does_not_join_it(sessions: Sessions) -> None:
    alices = sessions.assign(mail(ALICE, "<a1@x>", "Private"), ALICE, NOW)
    bobs = sessions.assign(mail(BOB, "<b1@x>", "Re: Private", in_reply_to="<a1@x>"), BOB, NOW)
    assert bobs != alices
    assert sessions.db.query_value("SELECT user_id FROM sessions WHERE id = ?", (bobs,)) == BOB
    assert members(sessions, alices) == {"<a1@x>"}


def test_thread_key_is_the_root_id() -> None:
    assert thread_key(mail(ALICE, "<a1@x>")) == "<a1@x>"
    assert thread_key(mail(ALICE, "<a2@x>", in_reply_to="<a1@x>")) == "<a1@x>"
    assert thread_key(mail(ALICE, "<a3@x>", in_reply_to="<a2@x>", references=["<a1@x>", "<a2@x>"])) == "<a1@x>"


def test_many_ids_are_asked_in_bounded_chunks(sessions: Sessions) -> None:
    """Issue 30: one SQL parameter per id made 80,000 ids fail with "too many SQL variables". Built without the
    parser (which keeps 20 References ids): the store itself must hold any number, older session first."""
    older = sessions.assign(mail(ALICE, "<old@x>"), ALICE, NOW)
    sessions.assign(mail(ALICE, "<new@x>", "other"), ALICE, NOW + timedelta(minutes=1))
    ids = tuple(f"<n{i}@x>" for i in range(40_000))
    linked = replace(mail(ALICE, "<link@x>", "third"), references=(*ids[:30_000], "<new@x>", *ids[30_000:], "<old@x>"))
    assert sessions.assign(linked, ALICE, NOW + timedelta(minutes=2)) == older
    assert "<new@x>" in members(sessions, older)
