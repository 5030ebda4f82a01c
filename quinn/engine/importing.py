"""`quinn import`: a person's history taken in without answering it (issue 32).

The mails of a source (``quinn.mailbox.sources``: an mbox, a Maildir, an IMAP folder) go along the daemon's own
path (``MailHandler`` with ``replying=False``): the ledger (keyed per source, so a rerun skips what is done and a
killed run carries on where it stopped), the size limit, parsing, duplicates by Message-ID, the policy (trust from
the Authentication-Results, or the operator's ``--vouch``; lists, bounces and robots ignored; not allowed ones
rejected), then for a trusted sender the session, the stored message, its recall passages and files, and the
learning queue. Nothing is sent and the source is never changed. Mails are taken in oldest first (a thread's
first mail before its replies; an earlier value before the one that replaces it).

Then memory is formed as the daemon forms it, in fewer calls: the queued mails of one person are learnt in
batches, each a run of consecutive mails of one thread (by date) within ``BATCH_CHARS``, in one extraction call
over their dated texts; and the session jobs (summarize, session close) run over the imported threads, which are
dated by their mails and so already quiet (session close reviews a person's latest thread only: the older ones
hold no reply of Quinn's to judge, and extraction learnt them from the same words). A mail that cannot be parsed
is quarantined in the ledger, and a copy of its bytes is written to the quarantine directory: nothing is lost (and
the source still holds it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quinn.agent import learning
from quinn.confined import ChildFailed
from quinn.engine.conversation import Conversation
from quinn.engine.mail import NOT_TRUSTED_PREFIX, MailHandler
from quinn.engine.parts import Parts
from quinn.engine.parts import scheduler as job_runner
from quinn.engine.purges import MailboxPurges
from quinn.errors import ConnectError, QuinnError, RetryLater
from quinn.faults import fault_point
from quinn.hold import SetupHold
from quinn.mailbox import (
    IMAP_FAILURES,
    Fetched,
    InboundEmail,
    MailLedger,
    MailSource,
    Sessions,
    SourceMail,
    decide,
    decide_sent,
)
from quinn.metrics import Metrics
from quinn.scheduler import holder_is_dead

log = logging.getLogger(__name__)

IMPORT_TEMPLATE = "import"  # what learning is told the "reply" was: none, and nothing that forbids learning
BATCH_CHARS = 6000  # a batch's own text at most (~1,500 tokens): room for the extract template and memories
BATCH_MAILS = 12
SESSION_JOBS = ("summarize", "session_close")
_LAST = datetime.max.replace(tzinfo=UTC)

#: What a mail's import came to, as the summary counts it.
OUTCOMES = ("imported", "already imported", "duplicate", "not trusted", "ignored", "rejected", "quarantined",
            "deferred", "waiting", "unreadable")  # fmt: skip
UNREADABLE_HINT = "fix what is named (a dangling link, a file's permissions) and run the same import again"

Progress = Callable[[str, int, int], None]  # (what, done, total)


@dataclass(frozen=True)
class Planned:
    """One mail of the source (without its header block, read once to plan: a source of a million mails is
    not held in memory), the date it is ordered by and its sender, as its header says."""

    mail: SourceMail
    date: datetime | None
    position: int
    sender: str | None = None


@dataclass
class ImportReport:
    """What an import did (or, in a dry run, would do)."""

    source: str
    dry_run: bool
    seen: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)  # "outcome: reason" of what was not imported
    untrusted: Counter[str] = field(default_factory=Counter)  # sender -> mails not imported for want of trust
    quarantined: list[tuple[str, str, str]] = field(default_factory=list)  # (where in the source, why, copy)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (where in the source, why)
    people: set[str] = field(default_factory=set)
    batches: int = 0
    learnt: int = 0  # mails learnt from
    memories_new: int = 0
    memories_updated: int = 0
    learning_deferred: int = 0
    jobs: dict[str, str] = field(default_factory=dict)


class Importer:
    """Imports one source through the mail engine with the reply switched off (``MailHandler(replying=False)``).

    ``parts`` has its memory open (``Parts.open_memory``). ``vouch``: senders (addresses or bare domains) the
    operator vouches for; ``quarantine_dir``: where copies of unparseable mails go; ``run_jobs``: run the session
    jobs at the end (else the daemon's scheduler does, on its interval). For a dry run only, ``parts`` may have no
    memory open: ``parts.db`` an existing database opened without migrating (its ledger says what is done), or
    None (nothing is)."""

    def __init__(self, parts: Parts, *, vouch: Sequence[str] = (), quarantine_dir: Path, run_jobs: bool = True,
                 progress: Progress | None = None, sent: bool = False) -> None:  # fmt: skip
        self.parts = parts
        self.rules = dataclasses.replace(parts.rules, vouched=tuple(v.strip().lower() for v in vouch if v.strip()))
        self.quarantine_dir = quarantine_dir
        self.run_jobs = run_jobs
        self.progress = progress or (lambda what, done, total: None)
        metrics = Metrics()
        self._db = parts.db.run if parts.db is not None else _no_database
        self.conversation = Conversation(parts, metrics, self._db, MailboxPurges())
        self.handler = MailHandler(parts, self.conversation, SetupHold(), metrics, self._db, _no_watched_folder,
                                   replying=False, rules=self.rules, sent=sent)  # fmt: skip
        self.sent = sent
        self.ledger = MailLedger(parts.db) if parts.db is not None else None
        self._judged: set[str] = set()  # a dry run's Message-IDs of mails it found final (duplicates after them)

    async def run(self, source: MailSource, *, dry_run: bool = False) -> ImportReport:
        """Import ``source`` (oldest mail first), learn from it per thread and run the session jobs."""
        report = ImportReport(source.label, dry_run)
        if not dry_run and (self.parts.store is None or self.ledger is None):
            raise AssertionError("an import needs the memory open (Parts.open_memory)")
        done = 0
        try:
            plan = await self.plan(source)
            report.seen = len(plan)
            for done, item in enumerate(plan, start=1):
                if dry_run:
                    await self._consider(item, report)
                else:
                    await self._take(item, report)
                self.progress("mails", done, len(plan))
        except IMAP_FAILURES as exc:  # the source's server went away: what is done stays done
            why = exc.message if isinstance(exc, QuinnError) else f"{exc.__class__.__name__}: {exc}"
            raise ConnectError(f"{source.label}: the IMAP connection failed after {done} mails ({why})",
                               "run the same import again: it carries on where it stopped") from None  # fmt: skip
        if dry_run:
            return report
        await self._learn(source, report)
        if self.run_jobs:
            await self._session_jobs(report)
        return report

    async def plan(self, source: MailSource) -> list[Planned]:
        """The source's mails, oldest first by their Date (else INTERNALDATE; undated ones last, in source order).
        Only headers are parsed here, as every mail is (``MailHandler.parse``: a child with a deadline); a mail
        whose header cannot be parsed is quarantined when its turn comes."""
        mails = await asyncio.to_thread(lambda: list(source.mails()))
        planned = []
        for position, mail in enumerate(mails):
            before = await self._db(self.ledger.get, mail.key) if self.ledger is not None and not mail.error else None
            if mail.error or (before is not None and before.final):  # nothing to parse: reported, or done
                planned.append(Planned(dataclasses.replace(mail, header=b""), None, position))
            else:
                header = await self._parsed(mail.header or b"\n", mail.internal_date)
                date, sender = (header.date, header.sender) if header is not None else (None, None)
                planned.append(Planned(dataclasses.replace(mail, header=b""), date, position, sender))
            self.progress("listing", len(planned), len(mails))
        return sorted(planned, key=lambda p: (p.date or _LAST, p.position))

    async def _parsed(self, raw: bytes, internal_date: datetime | None, *, sized: bool = False) -> InboundEmail | None:
        """``raw`` parsed the daemon's way (``MailHandler.parse``), or None when it cannot be (a reason, or a
        parse stopped at the deadline)."""
        try:
            parsed = await self.handler.parse(raw, internal_date, sized=sized)
        except ChildFailed:
            return None
        return parsed if not isinstance(parsed, str) else None

    # -- one mail --------------------------------------------------------------------------------------

    async def _take(self, item: Planned, report: ImportReport) -> None:
        """One mail along the engine's path (no reply), then what became of it counted."""
        mail = item.mail
        assert self.ledger is not None
        if mail.error:
            self._unreadable(mail, report)
            return
        before = await self._db(self.ledger.get, mail.key)
        if before is not None and before.final:
            report.outcomes[self._done_before(before.state, before.reason)] += 1
            if before.state == "imported" and before.user_id:
                report.people.add(before.user_id)
            elif before.state == "quarantined":  # the copy a killed run may not have written, and where it is
                copy = await asyncio.to_thread(self._keep_copy, mail)
                report.quarantined.append((mail.where, before.reason, copy))
            return

        async def fetch() -> Fetched:
            return Fetched(mail.key.uid, await asyncio.to_thread(mail.read), mail.internal_date)

        await self.handler.handle_key(mail.key, mail.size, fetch)
        record = await self._db(self.ledger.get, mail.key)
        assert record is not None
        outcome, reason = self._outcome(record.state, record.reason)
        report.outcomes[outcome] += 1
        if outcome == "imported" and record.user_id:
            report.people.add(record.user_id)
        elif outcome == "quarantined":
            copy = await asyncio.to_thread(self._keep_copy, mail)
            report.quarantined.append((mail.where, record.reason, copy))
            log.warning("%s quarantined: %s; a copy is in %s", mail.where, record.reason, copy)
        elif outcome != "imported":
            report.reasons[f"{outcome}: {reason}"] += 1
        if outcome == "not trusted":
            report.untrusted[item.sender or "?"] += 1

    @staticmethod
    def _unreadable(mail: SourceMail, report: ImportReport) -> None:
        """A place in the source that could not be read: named with why, never a failed import; the source still
        holds it, and a rerun after the fix takes it in."""
        report.outcomes["unreadable"] += 1
        report.unreadable.append((mail.where, mail.error or "?"))
        log.warning("%s could not be read: %s; %s", mail.where, mail.error, UNREADABLE_HINT)

    @classmethod
    def _done_before(cls, state: str, reason: str) -> str:
        """The summary's name for a mail an earlier run finished (``already imported``, ``duplicate``, ...)."""
        return "already imported" if state == "imported" else cls._outcome(state, reason)[0]

    @staticmethod
    def _outcome(state: str, reason: str) -> tuple[str, str]:
        """The summary's name for a ledger state and reason."""
        if state == "ignored" and reason.startswith("duplicate of"):
            return "duplicate", reason
        if state in ("imported", "ignored", "rejected", "quarantined", "deferred"):
            return state, reason
        if reason.startswith(NOT_TRUSTED_PREFIX):
            return "not trusted", reason[len(NOT_TRUSTED_PREFIX) :].split(";", 1)[0]
        return "waiting", "another copy of this mail is still being handled"

    def _keep_copy(self, mail: SourceMail) -> str:
        """A copy of a quarantined mail's bytes in the quarantine directory, returns its path. Named by its whole
        key (two sources' mails never share a file; a rerun finds its own), written whole or not at all (a
        temporary file renamed), a file's mail streamed rather than held."""
        self.quarantine_dir.mkdir(parents=True, exist_ok=True)
        source = hashlib.sha256(mail.key.folder.encode()).hexdigest()[:10]
        path = self.quarantine_dir / f"{source}-{mail.key.uidvalidity}-{mail.key.uid:014x}.eml"
        if path.exists():
            return str(path)
        fd, tmp = tempfile.mkstemp(prefix=".quarantine-", dir=self.quarantine_dir)
        try:
            with os.fdopen(fd, "wb") as out:
                if mail.stream is not None:
                    with mail.stream() as data:
                        shutil.copyfileobj(data, out)
                else:
                    out.write(mail.read())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return str(path)

    async def _consider(self, item: Planned, report: ImportReport) -> None:
        """A dry run's look at one mail: parse and policy, nothing written."""
        mail = item.mail
        if mail.error:
            self._unreadable(mail, report)
            return
        before = await self._db(self.ledger.get, mail.key) if self.ledger is not None else None
        if before is not None and before.final:
            report.outcomes[self._done_before(before.state, before.reason)] += 1
            return
        limit_kb = self.parts.config.imap.max_message_kb
        if mail.size > limit_kb * 1024:  # as the real run finds it, without reading it
            report.outcomes["quarantined"] += 1
            report.quarantined.append(
                (mail.where, f"too large: {mail.size} bytes > {limit_kb} KiB", "(dry run: no copy)")
            )
            return
        raw = await asyncio.to_thread(mail.read)
        try:
            parsed = await self.handler.parse(raw, mail.internal_date)
        except ChildFailed as stopped:
            parsed = f"parsing was stopped ({stopped.message})"
        if isinstance(parsed, str):
            report.outcomes["quarantined"] += 1
            report.quarantined.append((mail.where, f"unparseable: {parsed}", "(dry run: no copy)"))
            return
        email = parsed
        # Duplicates by Message-ID as the real run finds them: a copy already final in the ledger, or one this
        # dry run has judged (imported, ignored or rejected: final) before this one.
        earlier = await self._db(self.ledger.elsewhere, email.message_id, mail.key) if self.ledger else None
        if email.message_id in self._judged or (earlier is not None and earlier.final):
            report.outcomes["duplicate"] += 1
            report.reasons["duplicate: another copy of this mail is in the source, or was taken in before"] += 1
            return
        decision = decide_sent(email, self.rules) if self.sent else decide(email, self.rules, imported=True)
        if decision.action != "handle" or (decision.use_memory and decision.user_id is not None):  # final
            self._judged.add(email.message_id)
        if decision.action != "handle":
            outcome = "ignored" if decision.action == "ignore" else "rejected"
            report.outcomes[outcome] += 1
            report.reasons[f"{outcome}: {decision.reason}"] += 1
        elif not decision.use_memory or decision.user_id is None:
            report.outcomes["not trusted"] += 1
            report.reasons[f"not trusted: {decision.reason}"] += 1
            report.untrusted[email.sender or "?"] += 1
        else:
            report.outcomes["imported"] += 1
            report.people.add(decision.user_id)

    # -- learning --------------------------------------------------------------------------------------

    async def _learn(self, source: MailSource, report: ImportReport) -> None:
        """Learn from the source's imported mails still queued (this run's, or a killed run's), per person in
        date order, in batches of consecutive mails of one thread."""
        folder = getattr(source, "folder", "")
        store = self.parts.store
        assert store is not None and self.ledger is not None
        queued = set(await self._db(learning.waiting, store.db))
        sessions = Sessions(store.db)
        placed: list[tuple[str, str, str, str, int]] = []  # (user, date, session, message id, text length)
        for message_id in await self._db(self.ledger.message_ids, folder, "imported"):
            if message_id not in queued:
                continue
            user = await self._db(learning.user_of, store.db, message_id)
            where = await self._db(sessions.placed, message_id)
            if user is not None and where is not None:
                placed.append((user, where[1], where[0], message_id, where[2]))
        # Learning from their own words costs no model call: each mail alone, so each statement keeps its mail's
        # date (a batch is dated by its last mail).
        most = 1 if self.parts.config.memory.learn == "own_words" else BATCH_MAILS
        batches = _batches(sorted(placed), most)
        for done, (user, ids) in enumerate(batches, start=1):
            await self._learn_batch(user, ids, report)
            self.progress("learning", done, len(batches))

    async def _learn_batch(self, user: str, message_ids: list[str], report: ImportReport) -> None:
        """One extraction over the batch's mails (claimed on the learning queue, as the daemon claims one)."""
        p = self.parts
        store = p.store
        assert store is not None
        lease_s = p.config.service.mail_lease_s
        claimed = []
        for message_id in message_ids:
            queued = await self._db(learning.begin, store.db, message_id, self.handler.holder, p.clock.now(), lease_s)
            if queued is None:
                other = await self._db(learning.holder_of, store.db, message_id)
                if other is not None and holder_is_dead(other):  # a killed import's try: taken over
                    queued = await self._db(learning.begin, store.db, message_id, self.handler.holder,
                                            p.clock.now(), lease_s, dead=other)  # fmt: skip
            if queued is not None:
                claimed.append(queued)
        if not claimed:
            return
        last = claimed[-1].message_id
        interrupted = any(q.interrupted for q in claimed)
        if not (interrupted and await self._db(learning.already_learnt, store.db, user, last)):
            parsed = [await self._parsed(q.raw, q.internal_date) for q in claimed]  # parsed once before
            for q, email in zip(claimed, parsed, strict=True):
                if email is None:  # no longer parses (or the parse was stopped): left queued for a rerun
                    await self._db(learning.later, store.db, q.message_id, p.clock.now(), "parsing it again failed")
                    report.learning_deferred += 1
            claimed = [q for q, email in zip(claimed, parsed, strict=True) if email is not None]
            emails = [email for email in parsed if email is not None]
            if not emails:
                return
            fault_point("before_learn")
            try:
                outcome = await self.conversation.learn(user, batch_email(emails), template=IMPORT_TEMPLATE,
                                                        transient=True)  # fmt: skip
            except (RetryLater, ConnectError) as exc:
                for q in claimed:
                    await self._db(learning.later, store.db, q.message_id, p.clock.now(), str(exc))
                report.learning_deferred += len(claimed)
                log.warning("import: learning from %d mails of %s deferred: %s", len(claimed), user, exc)
                return
            if outcome is not None:
                report.memories_new += len(outcome.created)
                report.memories_updated += len(outcome.updated)
            fault_point("after_learn")
        for q in claimed:
            await self._db(learning.done, store.db, q.message_id)
        report.batches += 1
        report.learnt += len(claimed)

    async def _session_jobs(self, report: ImportReport) -> None:
        """The session jobs once, now: the imported threads are old, so quiet, and get their review."""
        p = self.parts
        assert p.store is not None
        runner = job_runner(p.config, p.store, p.llm, p.prompts, p.clock)
        for name in SESSION_JOBS:
            self.progress(name, 0, 1)
            outcome = await runner.run_job(name, force=True)
            counts = ", ".join(f"{k} {v}" for k, v in outcome.counts.items() if k != "details") or "nothing to do"
            report.jobs[name] = f"{outcome.status}: {outcome.reason or outcome.error or counts}"
            self.progress(name, 1, 1)


def _batches(placed: list[tuple[str, str, str, str, int]], most: int = BATCH_MAILS) -> list[tuple[str, list[str]]]:
    """Runs of consecutive mails (per person, by date) of one thread, each within ``BATCH_CHARS`` and ``most``
    mails: a later mail of another thread ends a run, so what was written later is learnt later."""
    batches: list[tuple[str, list[str]]] = []
    key: tuple[str, str] | None = None
    size = 0
    for user, _date, session, message_id, length in placed:
        if key == (user, session) and size + length <= BATCH_CHARS and len(batches[-1][1]) < most:
            batches[-1][1].append(message_id)
            size += length
            continue
        batches.append((user, [message_id]))
        key, size = (user, session), length
    return batches


def batch_email(emails: list[InboundEmail]) -> InboundEmail:
    """One mail for one extraction over a thread's run of mails: the last one's headers and date (the memories'
    ``valid_from``), and each mail's own text after its date, oldest first. A single mail is itself."""
    if len(emails) == 1:
        return emails[0]
    texts = [f"[{e.date.date().isoformat() if e.date else 'undated'}]\n{e.text.strip()}" for e in emails]
    text = "\n\n".join(t for t in texts if t.strip())
    return dataclasses.replace(emails[-1], text=text, full_text=text, attachments=())


async def _no_database(*_args: object, **_kwargs: object) -> Any:
    """A dry run without a database reads nothing from one."""
    raise AssertionError("no database is open")


async def _no_watched_folder(*_args: object, **_kwargs: object) -> None:
    """An import never touches the watched folder's IMAP connection."""
    raise AssertionError("quinn import does not use the watched folder")
