"""Import sources (quinn/mailbox/sources.py, issue 32): what is and is not an mbox or a Maildir, the keys that make
a rerun idempotent, and the batches learning is cut into (quinn/engine/importing.py). In process, on files."""

from __future__ import annotations

import io
import mailbox
from datetime import UTC, datetime
from pathlib import Path

import pytest

from quinn.engine.importing import _batches, batch_email
from quinn.errors import ConfigError
from quinn.mailbox import open_source, parse_email, sources
from quinn.mailbox.sources import content_key, header_of
from tests.lab.inprocess import build_mail

MAIL = build_mail("alice@example.test", "quinn@example.test", "Hi", "I live in Lisbon.", message_id="<m@x>")[1]


def imap_config():  # sources of files never touch it; built without a server
    from quinn.config import ImapConfig

    return ImapConfig(host="127.0.0.1", username="quinn", password_env="NOPE")


@pytest.mark.parametrize(("content", "why"), [
    (b"", "it is empty"),
    (b"%PDF-1.4\n\x00\x01", "it holds binary data"),
    (b"Dear Quinn,\nhello\n", "its first line is 'Dear Quinn,'"),
    (MAIL, "its first line is 'From: Alice Example"),  # one .eml: the hint says how to import it
])  # fmt: skip
def test_a_file_that_is_not_an_mbox_is_named_with_the_fix(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "file"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        open_source(str(path), imap_config())
    assert f"{path} is not an mbox file: {why}" in raised.value.message
    assert "Maildir" in str(raised.value.hint) and "imap:FOLDER" in str(raised.value.hint)


def test_missing_paths_and_directories_that_are_no_maildir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file or directory"):
        open_source(str(tmp_path / "nothing"), imap_config())
    (tmp_path / "cur").mkdir()
    with pytest.raises(ConfigError, match="not a Maildir: it has no new/"):
        open_source(str(tmp_path), imap_config())
    with pytest.raises(ConfigError, match="names no folder"):
        open_source("imap:", imap_config())


def test_file_mails_are_keyed_by_their_bytes_whatever_their_position(tmp_path: Path) -> None:
    other = MAIL.replace(b"Lisbon", b"Porto")
    first, second = mailbox.mbox(tmp_path / "a.mbox"), mailbox.mbox(tmp_path / "b.mbox")
    for box, order in ((first, (MAIL, other)), (second, (other, MAIL))):
        for raw in order:
            box.add(raw)
        box.close()

    def listed(name: str) -> list[tuple[int, str, bytes, bytes]]:
        source = open_source(str(tmp_path / name), imap_config())
        try:
            return [(m.key.uid, m.where, m.header, m.read()) for m in source.mails()]
        finally:
            source.close()

    keys = [{uid for uid, *_ in listed(name)} for name in ("a.mbox", "b.mbox")]
    assert keys[0] == keys[1] and len(keys[0]) == 2
    assert content_key("f", MAIL) == content_key("f", MAIL.replace(b"\n", b"\r\n"))  # line ends do not matter
    [(_, where, header, _raw)] = [m for m in listed("a.mbox") if b"Lisbon" in m[3]]
    assert where.endswith("a.mbox mail #1") and parse_email(header).subject == "Hi"
    assert header_of(b"A: b\n\nbody") == b"A: b\n\n" and header_of(b"A: b") == b"A: b"


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 1 << 20])
def test_a_file_mail_is_listed_a_chunk_at_a_time_with_the_key_and_header_of_its_whole_bytes(
    monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """A mail of gigabytes is never held whole to be listed (``sources.listed``): its key (line ends normalised
    across chunk edges), size and header block are those of its bytes read at once."""
    monkeypatch.setattr(sources, "CHUNK_BYTES", chunk)
    for raw in (b"From: a@x\r\nSubject: s\r\n\r\nbody\r\r\n", b"From: a@x\nSubject: s\n\nbody\n", b"no end\r",
                b"", b"Subject: only a header\r\n\r"):  # fmt: skip
        key, size, header = sources.listed("f", io.BytesIO(raw))
        assert (key, size, header) == (content_key("f", raw), len(raw), header_of(raw)), raw
    monkeypatch.setattr(sources, "HEADER_BYTES", 16)  # a header without an end is cut, the key stays whole
    key, _size, header = sources.listed("f", io.BytesIO(b"X-Long: " + b"y" * 100))
    assert header == b"X-Long: yyyyyyyy" and key == content_key("f", b"X-Long: " + b"y" * 100)


def test_a_maildir_file_that_cannot_be_read_is_named_and_the_others_listed(tmp_path: Path) -> None:
    box = mailbox.Maildir(tmp_path / "box", create=True)
    box.add(b"From: a@x\nSubject: one\n\nbody\n")
    (tmp_path / "box" / "new" / "2.dangling").symlink_to(tmp_path / "gone")
    listed = list(open_source(str(tmp_path / "box"), imap_config()).mails())
    assert [m.error is None for m in listed] == [True, False]
    assert listed[1].where.endswith("2.dangling") and "FileNotFoundError" in (listed[1].error or "")


def test_a_line_of_a_mail_starting_with_from_is_text_unless_it_is_a_separator(tmp_path: Path) -> None:
    """mbox writers escape "From " in a mail's text as ">From ", but not all of them: a line "From here on, ..."
    (no timestamp) is the mail's text, not the start of another mail cut off from it."""
    path = tmp_path / "loose.mbox"
    path.write_bytes(
        b"From alice@example.test Tue Nov 30 09:00:00 2026\nFrom: alice@example.test\nSubject: Plan\n\n"
        b"Line one.\n\nFrom here on, the plan is:\nline two.\n\n"
        b"From MAILER-DAEMON Mon Nov 30 09:33:59 2026\nFrom: bob@example.test\nSubject: Two\n\nBody.\n"
    )
    source = open_source(str(path), imap_config())
    mails = list(source.mails())
    read = [m.read() for m in mails]
    source.close()
    assert read == [
        b"From: alice@example.test\nSubject: Plan\n\nLine one.\n\nFrom here on, the plan is:\nline two.\n",
        b"From: bob@example.test\nSubject: Two\n\nBody.\n",
    ]
    written = mailbox.mbox(tmp_path / "written.mbox")  # what Python's own writer makes reads as before
    for raw in (MAIL, b"From: b@x\n\nFrom the start\n", b"From: c@x\n\nend\r\n\r\n"):
        written.add(raw)
    written.close()
    source = open_source(str(tmp_path / "written.mbox"), imap_config())
    ours = [m.read() for m in source.mails()]
    source.close()
    standard = mailbox.mbox(tmp_path / "written.mbox", create=False)
    assert ours == [standard.get_bytes(k) for k in standard.iterkeys()] and len(ours) == 3
    standard.close()


def test_learning_batches_are_runs_of_one_thread_in_date_order() -> None:
    placed = [  # (user, date, session, message id, text length), sorted as the importer sorts them
        ("a", "2023-01-01", "s1", "m1", 10), ("a", "2023-01-02", "s1", "m2", 10), ("a", "2023-06-01", "s2", "m3", 10),
        ("a", "2023-12-01", "s1", "m4", 10), ("a", "2024-01-01", "s1", "m5", 5995), ("b", "2023-01-03", "s1", "m6", 1),
    ]  # fmt: skip
    # A later mail of another thread ends a run (s1 again in December is a new batch); so does the size bound.
    assert _batches(placed) == [("a", ["m1", "m2"]), ("a", ["m3"]), ("a", ["m4"]), ("a", ["m5"]), ("b", ["m6"])]


def test_a_batch_reads_as_one_mail_with_each_text_dated() -> None:
    one = parse_email(build_mail("a@x.test", "q@x.test", "S", "I live in Lisbon.",
                                 date=datetime(2023, 3, 1, tzinfo=UTC))[1])  # fmt: skip
    two = parse_email(build_mail("a@x.test", "q@x.test", "Re: S", "Locker 12.",
                                 date=datetime(2023, 3, 2, tzinfo=UTC))[1])  # fmt: skip
    assert batch_email([one]) is one
    both = batch_email([one, two])
    assert both.text == "[2023-03-01]\nI live in Lisbon.\n\n[2023-03-02]\nLocker 12."
    assert both.message_id == two.message_id and both.date == two.date and both.attachments == ()
