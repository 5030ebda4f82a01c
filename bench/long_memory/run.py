"""Running bench/long_memory: each person's history imported with `quinn import` (the real Importer on the lab's
Quinn), their live mails sent (a request to forget), the memory jobs run, then every question asked under four
conditions in the same run, with the same model, reply template and sampling:

* ``quinn``: a new mail through Quinn as it runs (memory, recall passages, tools), answered and never learnt from;
* ``no_memory``: the reply prompt with every memory section empty;
* ``recent_history``: the person's stored history (mails, the text of their files, Quinn's replies), newest kept,
  oldest dropped until it fits the model's context;
* ``bm25``: plain BM25 over the same history cut into passages, the top ``--top-k`` pasted (oldest first).

The harness is bench/memory_qa.py's ``Bench`` (the lab, the recorder in front of the model, probes that are never
learnt from, the baseline prompt); only the import, the live mails, BM25 and the scoring are new here.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from email.utils import make_msgid
from pathlib import Path
from typing import Any

from bench.long_memory.data import Person, build, question_mail
from bench.long_memory.report import Scored, markdown, plot, score, summarise
from bench.memory_qa import Bench, Target, write_result
from quinn.agent.context import ThreadMessage
from quinn.engine.importing import Importer
from quinn.mailbox import open_source
from quinn.memory.filters import CURRENT
from quinn.memory.passages import split_passages
from tests.lab.dovecot import Dovecot
from tests.lab.inprocess import build_mail
from tests.lab.llm_server import REPLY, Json, RecordedRequest, ScriptedLLM, Text
from tests.lab.real_llm import ModelRecorder
from tests.lab.real_model import MODELS
from tests.lab.smtp import MailLab, SmtpLab, unique_address

OLD_ADDRESS = "help@old-desk.example.org"  # where the history was written to, before Quinn
_WORD = re.compile(r"[a-z0-9]+")


def write_mbox(person: Person, user: str, path: Path) -> int:
    """The person's history as an mbox of mails to the old address, threaded by In-Reply-To/References."""
    import mailbox

    box = mailbox.mbox(path)
    ids: list[str] = []
    chains: dict[int, list[str]] = {}
    try:
        for i, mail in enumerate(person.mails):
            mid = make_msgid(f"h{i}", "history.example.org")
            chain = chains.setdefault(mail.thread, [])
            files = tuple((a.filename, a.content_type, a.data) for a in mail.attachments)
            _, raw = build_mail(user, OLD_ADDRESS, mail.subject, mail.body, name=f"{person.first} {person.last}",
                                date=mail.date, message_id=mid, in_reply_to=chain[-1] if chain else None,
                                references=tuple(chain[:-1]), attachments=files)  # fmt: skip
            box.add(raw)
            chain.append(mid)
            ids.append(mid)
    finally:
        box.close()
    return len(ids)


def bm25_top(question: str, history: Sequence[ThreadMessage], k: int) -> list[ThreadMessage]:
    """Plain BM25 (k1 1.5, b 0.75) over the history cut into passages; the top ``k``, oldest first."""
    pieces = [(n, ThreadMessage(m.sender, m.date, text)) for n, m in enumerate(history)
              for text in split_passages(m.body)]  # fmt: skip
    docs = [_WORD.findall(p.body.lower()) for _, p in pieces]
    if not docs:
        return []
    avg = sum(len(d) for d in docs) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    terms = _WORD.findall(question.lower())

    def bm25(doc: list[str]) -> float:
        tf = Counter(doc)
        total = 0.0
        for t in terms:
            if tf[t]:
                idf = math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5))
                total += idf * tf[t] * 2.5 / (tf[t] + 1.5 * (0.25 + 0.75 * len(doc) / avg))
        return total

    ranked = sorted(range(len(docs)), key=lambda i: -bm25(docs[i]))[:k]
    return [pieces[i][1] for i in sorted(ranked)]


class LongBench(Bench):
    """memory_qa's bench, asking with this set's question mails."""

    ask = staticmethod(question_mail)

    async def import_history(self, person: Person, user: str, workdir: Path, jobs: bool) -> dict[str, Any]:
        """The history through `quinn import` (vouched for: the operator's own archive)."""
        path = workdir / f"{person.first.lower()}.mbox"
        write_mbox(person, user, path)
        start = len(self.recorder.requests)
        started = time.perf_counter()
        source = open_source(str(path), self.app.config.imap)
        try:
            report = await Importer(self.app.parts, vouch=[user], quarantine_dir=workdir / "quarantine",
                                    run_jobs=jobs).run(source)  # fmt: skip
        finally:
            source.close()
        calls = Counter(self.recorder.purposes[start:])
        return {"person": person.first, "mails": report.seen, "outcomes": dict(report.outcomes),
                "seconds": round(time.perf_counter() - started, 1), "extraction_calls": calls["Extraction"],
                "review_calls": calls["SessionReview"], "memories_new": report.memories_new,
                "memories_updated": report.memories_updated, "learning_deferred": report.learning_deferred,
                "jobs": report.jobs, "calls": call_costs(self.recorder, start)}  # fmt: skip

    async def live(self, person: Person, user: str) -> None:
        """The mails after the import (a request to forget), through the daemon's path."""
        await self.reconnect()
        for body in person.live:
            await self.quinn.send(user, "Please forget something", body, name=f"{person.first} {person.last}")

    async def reconnect(self) -> None:
        """A new IMAP session for Quinn's folder, as the daemon's loop opens one when the server dropped the old:
        an import and the baselines use no IMAP, and with the real model they take longer than Dovecot keeps an
        idle client (30 minutes, RFC 9051's autologout timer); the first pilot died on the NOOP after its import
        (imaplib.abort: socket error: EOF)."""
        app = self.app
        await app._imap(app.mailbox.close)
        await app._imap(app.mailbox.connect)
        await app.folder.resync()


def call_costs(recorder: ModelRecorder, start: int, stop: int | None = None) -> dict[str, dict[str, Any]]:
    """Per purpose of the model calls recorded from ``start`` (to ``stop``): how many, seconds each and prompt
    and completion tokens each (mean and max): what a run's import and jobs cost, to plan a longer run."""
    stop = len(recorder.requests) if stop is None else stop
    usage = {i: (b.get("usage") or {}) for i, b in recorder.responses if start <= i < stop and isinstance(b, dict)}
    by: dict[str, list[int]] = {}
    for i in range(start, stop):
        by.setdefault(recorder.purposes[i], []).append(i)
    costs = {}
    for purpose, indexes in by.items():
        seconds = [recorder.seconds.get(i, 0.0) for i in indexes]
        tin = [int(usage.get(i, {}).get("prompt_tokens") or 0) for i in indexes]
        tout = [int(usage.get(i, {}).get("completion_tokens") or 0) for i in indexes]
        costs[purpose] = {"calls": len(indexes), "seconds": round(sum(seconds), 1),
                          "seconds_mean": round(sum(seconds) / len(indexes), 2), "seconds_max": round(max(seconds), 1),
                          "tokens_in_mean": round(sum(tin) / len(indexes)), "tokens_in_max": max(tin),
                          "tokens_out_mean": round(sum(tout) / len(indexes)), "tokens_out_max": max(tout)}  # fmt: skip
    return costs


def write_transcript(recorder: ModelRecorder, path: Path) -> None:
    """Every recorded model call as a JSON line: purpose, seconds, usage, the messages sent and the answer (to
    read what Quinn asked and was told, after a run kept with ``--workdir``)."""
    answers = dict(recorder.responses)
    with path.open("w", encoding="utf-8") as out:
        for i, ((where, body), purpose) in enumerate(zip(recorder.requests, recorder.purposes, strict=True)):
            if not where.endswith("/chat/completions"):
                continue
            answer = answers.get(i)
            choices = answer.get("choices") if isinstance(answer, dict) else None
            line = {"index": i, "purpose": purpose, "seconds": round(recorder.seconds.get(i, 0.0), 2),
                    "usage": answer.get("usage") if isinstance(answer, dict) else None,
                    "messages": body.get("messages"),
                    "answer": choices[0].get("message", {}).get("content") if choices else answer}  # fmt: skip
            out.write(json.dumps(line) + "\n")


def scripted(request: RecordedRequest) -> Any:
    """The fast mode's model: every first-person sentence of a mail becomes a memory word for word (dated texts
    of a thread's batch included); a session review gives a summary; a reply is a fixed text (it never holds an
    answer, so the fast mode measures what reaches the prompt, not a model)."""
    if request.purpose == "Extraction":
        from tests.lab.brain import new_mail

        sentences = re.split(r"(?<=[.!?])\s+|\n+", new_mail(request))
        mine = [s.strip() for s in sentences if re.match(r"(I|My|Our|We)\b", s.strip())]
        return Json({"new": [{"content": s, "type": "fact"} for s in mine[:8]]})
    if request.purpose == "SessionReview":
        return Json({"summary": "They wrote about their week."})
    if request.purpose == REPLY:
        return Text("Thanks for asking; here is my short answer.")
    return Json({})


@dataclass
class Run:
    """What a run has so far; written after every person, so a run cut short reports those it finished."""

    args: argparse.Namespace
    info: dict[str, Any]
    model: dict[str, Any]
    started: float = field(default_factory=time.perf_counter)
    rows: list[Scored] = field(default_factory=list)
    imports: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)
    memories: list[int] = field(default_factory=list)
    kept: list[tuple[int, int]] = field(default_factory=list)
    people: Counter[str] = field(default_factory=Counter)

    def result(self) -> dict[str, Any]:
        a = self.args
        return {
            "benchmark": "long_memory",
            "machine": self.info,
            "model": self.model,
            "data": {
                "generator": "bench/long_memory/data.py",
                "seed": a.seed,
                "mails": a.mails,
                "top_k": a.top_k,
                "people": sum(self.people.values()),
                "generated": self.people["generated"],
                "real": self.people["real"],
                "real_file": str(a.real) if a.real else None,
                "skipped": a.skip,
                "questions": len({(r.user, r.question) for r in self.rows}),
            },
            "summary": summarise(self.rows),
            "history": {
                "mails": sum(i["mails"] for i in self.imports),
                "import_seconds": round(sum(i["seconds"] for i in self.imports), 1),
                "extraction_calls": sum(i["extraction_calls"] for i in self.imports),
                "memories_per_person": self.memories,
                "recent_kept": f"{min(k for k, _ in self.kept)}-{max(k for k, _ in self.kept)} of "
                f"{max(t for _, t in self.kept)}"
                if self.kept
                else "n/a",
                "imports": self.imports,
                "jobs": self.jobs,
            },
            "duration_s": round(time.perf_counter() - self.started, 1),
            "per_question": [asdict(r) for r in self.rows],
        }

    def write(self) -> dict[str, Any]:
        return write_result(self.args, self.result(), markdown, plot)


def people_of(args: argparse.Namespace) -> list[Person]:
    """The generated people, then the real ones (``--real``), less the first ``--skip``."""
    from bench.long_memory.real import RealPeopleError, load

    people = build(args.seed, args.people, args.mails)
    if args.real:
        try:
            people += load(args.real, args.real_people or None)
        except RealPeopleError as exc:
            raise SystemExit(str(exc)) from None
    if len(people) <= args.skip:
        raise SystemExit(f"--skip {args.skip} leaves no one to ask: the run has {len(people)} people")
    return people[args.skip :]


async def run(state: Run, target: Target, workdir: Path) -> None:
    args = state.args
    with Dovecot() as dovecot, SmtpLab(dovecot) as smtp, ModelRecorder(target) as recorder:  # type: ignore[arg-type]
        lab = MailLab(dovecot, smtp, unique_address)
        bench = LongBench(workdir, recorder, lab, args.n_ctx, args.tool_rounds, args.learn, MODELS[args.model].name)
        await bench.start()
        try:
            for person in people_of(args):
                user = unique_address(person.first.lower())
                state.imports.append(await bench.import_history(person, user, workdir, not args.no_import_jobs))
                start = len(recorder.requests)
                await bench.live(person, user)
                await bench.settle()
                state.jobs.append({**await bench.jobs(), "calls": call_costs(recorder, start)})
                current = f"SELECT count(*) FROM memories WHERE user_id = ? AND {CURRENT}"
                state.memories.append(int(bench.quinn.query(current, (user,))[0][0]))
                before = int(bench.quinn.query("SELECT coalesce(max(id), 0) + 1 FROM messages")[0][0])
                probes = person.questions[: args.questions] if args.questions else person.questions
                for probe in probes:
                    state.rows.append(
                        score(user, person.source, probe, "quinn", await bench.probe(person, user, probe))
                    )  # type: ignore[arg-type]
                history = bench.history(person, user, before)  # type: ignore[arg-type]
                for probe in probes:  # grouped by condition: the model server reuses the shared prefix
                    asked = await bench.baseline(person, user, probe, [], "no_memory")  # type: ignore[arg-type]
                    state.rows.append(score(user, person.source, probe, "no_memory", asked))
                for probe in probes:
                    asked = await bench.baseline(person, user, probe, history, "recent")  # type: ignore[arg-type]
                    state.kept.append((asked.kept, len(history)))
                    state.rows.append(score(user, person.source, probe, "recent_history", asked))
                for probe in probes:
                    top = bm25_top(probe.text, history, args.top_k)
                    asked = await bench.baseline(person, user, probe, top, "bm25")  # type: ignore[arg-type]
                    state.rows.append(score(user, person.source, probe, "bm25", asked))
                state.people[person.source] += 1
                state.write()
                print(f"{person.first}: {len(probes)} questions done", file=sys.stderr, flush=True)
        finally:
            await bench.quinn.close()
            if args.workdir:
                write_transcript(recorder, workdir / "calls.jsonl")


def scripted_target() -> tuple[ScriptedLLM, Target]:
    """The fast mode's model server, started."""
    server = ScriptedLLM()
    server.responder = scripted
    server.start()
    host, port = server.openai_base_url.split("//", 1)[1].split("/", 1)[0].split(":")
    return server, Target(host, int(port))
