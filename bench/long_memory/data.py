"""The long-memory data set's generated people (issue 32): histories of 100+ mails over two years and more, each a
life that changes (a move, a new commute, a new manager), with files, a preference, a fact to be forgotten and
questions of every kind the issue names. Deterministic: the same seed gives the same people, mails and questions.

Values, sentences and files come from the memory QA set's generators (bench/memory_qa_data.py), drawn without
replacement so each person's answers are theirs alone; what is new here is the long timeline (threads of one to
three mails, mostly filler, the statements spread over it) and the kinds that need one:

* ``single`` a fact stated once, recently; ``long_ago`` one stated in the first tenth of the history;
* ``updated`` a value changed later (the old one is "stale"); ``knock_on`` a consequence of the move stated in
  another thread later (the commute), the old commute stale;
* ``forgotten`` a fact the person asks Quinn to forget after the import (a live mail): the right answer is that
  Quinn does not know, and the value in a reply is a **leak**;
* ``absence`` something never said: the right answer is "you haven't told me";
* ``temporal`` "which city did I live in in March 2025", "when did we move";
* ``multi_hop`` two threads far apart answer it together; ``attachment`` only a file holds it;
* ``preference`` asked early ("answer me in bullet points" / "in Spanish"), applied to a later question.

A ``Person`` is the shape real people take too (bench/long_memory/real.py): mails with their thread links, live
mails after the import, and probes.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from bench.memory_qa_data import (
    ATTACHMENT_POOLS,
    FILLER,
    MONTHS,
    POOLS,
    REQUESTS,
    SUBJECTS,
    Attachment,
    _attachment_kinds,
    _Draw,
    _multi_hop_kinds,
    _single_kinds,
    _updated_kinds,
    answered,
    word,
)

SEED = 3211
HISTORY_START = datetime(2024, 1, 8, 8, 30, tzinfo=UTC)
SPAN_DAYS = 800  # two years and two months
MAILS = 120
PEOPLE = (("Ingrid", "Solberg"), ("Kwame", "Mensah"), ("Rosa", "Albertini"))
KINDS = ("single", "long_ago", "updated", "knock_on", "forgotten", "absence", "temporal", "multi_hop", "attachment",
         "preference")  # fmt: skip
#: "You haven't told me", however a model words it: the right answer to ``absence`` and ``forgotten``.
ABSENCE = (
    r"\b(haven'?t|have not|hasn'?t|did ?n[o']?t|never)\b[^.]{0,40}\b(told|mention|said|share|say|give|provide)",
    r"\b(don'?t|do not|does ?n[o']?t)\s+(know|have|recall|remember)\b",
    r"\bno (record|information|memory|details?|mention)\b",
    r"\b(not sure|unknown|can'?t find|cannot find|could ?n[o']?t find|not aware)\b",
    r"\b(asked me to forget|forgotten|no longer (have|know|remember))\b",
)
BULLETS = (r"(?m)^\s*(?:[-*\u2022]|\d+[.)])\s+\S.*\n\s*(?:[-*\u2022]|\d+[.)])\s+\S",)  # two list lines at least
SPANISH = (r"\b(el|la|los|las|de|para|que|una?|con|por|es|tu|puedes|también)\b.*\b(el|la|de|que|para|con)\b",)
TRANSPORT = ("tram", "bus", "ferry", "train")


@dataclass(frozen=True)
class Mail:
    """One mail of a history; ``thread``: the index of its thread's first mail (itself for a new thread)."""

    subject: str
    body: str
    date: datetime
    thread: int
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class Probe:
    """One question. ``gold``: patterns of a right answer; ``stale``: of an old value (a stale answer) or, for
    ``forgotten``, of the forgotten value (a leak); ``evidence``: patterns that show the prompt held what answers
    it (the gold itself for facts; the preference's wording; none for absence)."""

    user: str
    category: str
    kind: str
    text: str
    gold: tuple[str, ...]
    answer: str
    stale: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    mails: tuple[int, ...] = ()

    @property
    def leak_kind(self) -> bool:
        """Whether the ``stale`` value in an answer is a forget leak rather than a stale value."""
        return self.category == "forgotten"


@dataclass
class Person:
    """A person's history to import, the live mails that follow it (forget requests), and the probes."""

    first: str
    last: str
    mails: list[Mail] = field(default_factory=list)
    live: list[str] = field(default_factory=list)  # bodies of mails sent live after the import
    questions: list[Probe] = field(default_factory=list)
    source: str = "generated"


def month_year(day: date) -> tuple[str, ...]:
    """Patterns for "March 2025" (also "03/2025", "2025-03")."""
    month = MONTHS[day.month - 1].lower()
    return (rf"\b{month}\b[^.\n]{{0,12}}\b{day.year}\b", rf"\b{day.year}-{day.month:02d}\b",
            rf"\b0?{day.month}/{day.year}\b")  # fmt: skip


class _Timeline:
    """The mails of one person: dates over ``SPAN_DAYS``, threads of one to three mails, filler bodies; the
    statements are put into chosen mails afterwards."""

    def __init__(self, rng: random.Random, count: int) -> None:
        self.rng = rng
        step = SPAN_DAYS / count
        self.dates: list[datetime] = []
        self.thread: list[int] = []
        for i in range(count):
            if i and self.thread.count(self.thread[-1]) < 3 and rng.random() < 0.35:  # a reply, a day or two on
                self.thread.append(self.thread[-1])
                self.dates.append(self.dates[-1] + timedelta(days=rng.randrange(1, 3), minutes=rng.randrange(300)))
            else:
                self.thread.append(i)
                day = HISTORY_START + timedelta(days=i * step + rng.random() * step * 0.5, minutes=rng.randrange(600))
                self.dates.append(max(day, self.dates[-1] + timedelta(hours=1)) if self.dates else day)
        self.statements: dict[int, list[str]] = {i: [] for i in range(count)}
        self.files: dict[int, list[tuple[str, Attachment]]] = {}

    def at(self, share: float) -> int:
        """The index of the mail at ``share`` (0..1) of the history, on a thread's first mail."""
        index = min(len(self.dates) - 1, max(0, int(share * len(self.dates))))
        return self.thread[index]


def _person(first: str, last: str, count: int, draw: _Draw, files_draw: _Draw, rng: random.Random) -> Person:
    line = _Timeline(rng, count)
    person = Person(first, last)
    questions: list[Probe] = []

    def say(share: float, statement: str) -> int:
        index = line.at(share)
        line.statements[index].append(statement)
        return index

    # Facts stated once: long ago (the first tenth), recently (the last fifth), and one that will be forgotten.
    singles = rng.sample(_single_kinds(draw, rng), 5)
    for n, (kind, statement, question, gold, answer) in enumerate(singles[:2]):
        index = say(0.02 + 0.04 * n, statement)
        questions.append(Probe(first, "long_ago", kind, question, gold, answer, evidence=gold, mails=(index,)))
    for n, (kind, statement, question, gold, answer) in enumerate(singles[2:4]):
        index = say(0.84 + 0.06 * n, statement)
        questions.append(Probe(first, "single", kind, question, gold, answer, evidence=gold, mails=(index,)))
    kind, statement, question, gold, answer = singles[4]
    index = say(0.45, statement)
    what = statement if statement.startswith("I ") else statement[0].lower() + statement[1:]
    person.live.append(f"Hi Quinn,\n\nPlease forget that {what}\n\nThanks,\n{first}")
    questions.append(Probe(first, "forgotten", kind, question, ABSENCE, answer, stale=gold, mails=(index,)))

    # The move: a city, a commute; years later a new city, and in another thread later still, the new commute.
    c1, c2 = draw("city"), draw("city")
    mode1, mode2 = rng.sample(TRANSPORT, 2)
    m1, m2 = rng.randrange(25, 55), rng.randrange(5, 20)
    lived = say(0.08, f"We live in {c1} now, and I take the {mode1} to work, about {m1} minutes each way.")
    moved = say(0.55, f"Big news: we packed everything up and moved from {c1} to {c2}.")
    commute = say(0.62, f"One good thing about the new place: I go by {mode2} to the office, only {m2} minutes.")
    questions.append(Probe(first, "updated", "city", "Which city do I live in at the moment?", (word(c2),), c2,
                           stale=(word(c1),), evidence=(word(c2),), mails=(lived, moved)))  # fmt: skip
    questions.append(Probe(first, "knock_on", "commute", "How long does my commute to work take these days?",
                           (rf"\b{m2}\s*(min|minute)",), f"{m2} minutes", stale=(rf"\b{m1}\s*(min|minute)",),
                           evidence=(rf"\b{m2}\s*(min|minute)",), mails=(lived, moved, commute)))  # fmt: skip
    before = line.dates[lived] + (line.dates[moved] - line.dates[lived]) / 2
    questions.append(Probe(first, "temporal", "city_then", f"Which city did I live in in {MONTHS[before.month - 1]} "
                           f"{before.year}?", (word(c1),), c1, stale=(word(c2),), evidence=(word(c1),),
                           mails=(lived, moved)))  # fmt: skip
    when = line.dates[moved].date()
    questions.append(Probe(first, "temporal", "move_when", f"In which month and year did we move to {c2}?",
                           month_year(when), f"{MONTHS[when.month - 1]} {when.year}", evidence=(word(c2),),
                           mails=(moved,)))  # fmt: skip

    # Two more values that change (the city is the move's): stated in the first third, changed in the last third.
    updates = [u for u in _updated_kinds(draw, rng) if u[0] != "city"]
    for n, (kind, first_text, update, question, gold, answer, stale) in enumerate(rng.sample(updates, 2)):
        early, late = say(0.15 + 0.1 * n, first_text), say(0.7 + 0.1 * n, update)
        questions.append(Probe(first, "updated", kind, question, gold, answer, stale=stale, evidence=gold,
                               mails=(early, late)))  # fmt: skip

    for n, (kind, first_text, second, question, gold, answer) in enumerate(rng.sample(_multi_hop_kinds(draw), 2)):
        early, late = say(0.2 + 0.15 * n, first_text), say(0.75 + 0.1 * n, second)
        questions.append(Probe(first, "multi_hop", kind, question, gold, answer, evidence=gold, mails=(early, late)))

    for n, (kind, mention, attachment, question, gold, answer) in enumerate(
        rng.sample(_attachment_kinds(files_draw, rng, first, last), 2)
    ):
        index = line.at(0.3 + 0.35 * n)
        line.files.setdefault(index, []).append((mention, attachment))
        questions.append(Probe(first, "attachment", kind, question, gold, answer, evidence=gold, mails=(index,)))

    # A preference, asked for early and applied to a question that does not repeat it.
    if rng.random() < 0.5:
        wish, gold_p, evidence = "Please always answer me in bullet points, it is easier to read.", BULLETS, (
            r"bullet",)  # fmt: skip
    else:
        wish, gold_p, evidence = "Please write to me in Spanish from now on, I want the practice.", SPANISH, (
            r"spanish",)  # fmt: skip
    index = say(0.12, wish)
    questions.append(Probe(first, "preference", "format", rng.choice(REQUESTS), gold_p, wish, evidence=evidence,
                           mails=(index,)))  # fmt: skip

    # Never said: no pet, no blood type, no dentist named; the right answer is that Quinn was not told.
    for kind, text in rng.sample([("blood", "What is my blood type?"), ("shoe", "What is my shoe size?"),
                                  ("dentist", "What is the name of my dentist?"),
                                  ("bank", "Which bank do I have my savings account with?")], 2):  # fmt: skip
        questions.append(Probe(first, "absence", kind, text, ABSENCE, "(never said)"))

    for index in range(count):
        sentences = [*line.statements[index], *rng.sample(FILLER, 2 if line.statements[index] else 3)]
        rng.shuffle(sentences)
        mentions = "".join(f" {mention}" for mention, _ in line.files.get(index, []))
        opening = "Hi Quinn," if line.thread[index] == index else "Hi again,"
        body = f"{opening}\n\n{' '.join(sentences)}{mentions}\n\n{rng.choice(REQUESTS)}\n\nBest,\n{first}"
        thread = line.thread[index]
        subject = rng.choice(SUBJECTS) if thread == index else f"Re: {person.mails[thread].subject}"
        attached = tuple(a for _, a in line.files.get(index, []))
        person.mails.append(Mail(subject, body, line.dates[index], thread, attached))
    person.questions = rng.sample(questions, len(questions))
    return person


def build(seed: int = SEED, people: int = len(PEOPLE), mails: int = MAILS) -> list[Person]:
    """The generated people: ``people`` (at most ``len(PEOPLE)``), each with ``mails`` history mails."""
    rng = random.Random(seed)
    draw = _Draw(rng, POOLS)
    files_draw = _Draw(random.Random(f"{seed}-files"), ATTACHMENT_POOLS)
    return [_person(first, last, mails, draw, files_draw, rng) for first, last in PEOPLE[:people]]


def said_in(person: Person, probe: Probe) -> bool:
    """Whether the probe's answer is in the person's history (mails and files), where it must be for a fact."""
    text = "\n".join([m.body for m in person.mails] + [a.text for m in person.mails for a in m.attachments])
    return answered(text, probe.gold)


def question_mail(person: Person, probe: Probe) -> tuple[str, str]:
    """(subject, body) of the mail that asks ``probe``: a subject of its own (its own thread)."""
    number = person.questions.index(probe) + 1
    short = "" if probe.category == "preference" else " Please keep it short."
    return f"Quick question #{number}", f"Hi Quinn,\n\n{probe.text}{short}\n\nThanks,\n{person.first}"


def plain(text: str) -> str:
    """Lower-cased text with runs of whitespace made one space (for matching prompts)."""
    return re.sub(r"\s+", " ", text.lower())
