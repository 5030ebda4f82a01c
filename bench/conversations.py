"""A generated multi-session conversational data set for the retrieval quality benchmark (fixed seed, no downloads).

Each user writes 300+ emails over eight months, grouped in threads: facts about their life, plans with dates,
preferences that change, and a majority of small talk and near-miss distractors (other people's pets,
allergies, appointments). Questions are labelled with the message ids that hold the answer, in four kinds:

- ``single``: one fact, stated once (``Where does my sister live now?``);
- ``temporal``: when something happened or is planned; the answer is the message and its date;
- ``changed``: a preference or plan that changed: the current value (the last message), or the whole change;
- ``multi_hop``: the answer joins two messages from different threads (``What did my boss ask me to prepare?``
  needs "Priya is my new team lead" and "Priya asked me for the Q3 deck").

Questions are written in other words than the messages (paraphrase): they may name a person or a place, as
people do, but not the message's phrasing, or the benchmark would flatter keyword search. The generator reports
how many of a question's content words occur in its answers, so the reader can check.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from bench.phrases import FACTS, SMALL_TALK, VALUES, Story

START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
DAYS = 240


@dataclass(frozen=True)
class Message:
    """One email from a user, as stored: its text carries its date (see ``indexed_text``)."""

    id: str
    user: str
    session: str
    at: datetime
    text: str

    @property
    def indexed_text(self) -> str:
        """The memory content: the date in words first (temporal questions need it, FACTS.md), then the text."""
        return f"{self.at:%A} {self.at.day} {self.at:%B %Y}: {self.text}"


@dataclass(frozen=True)
class Question:
    """A question a user asks, and the ids of the messages that together answer it."""

    id: str
    user: str
    kind: str
    text: str
    answers: tuple[str, ...]


@dataclass
class Dataset:
    """Messages and questions of every user."""

    messages: list[Message] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    def by_id(self) -> dict[str, Message]:
        """Messages by id."""
        return {m.id: m for m in self.messages}


def _date_words(at: datetime) -> str:
    return f"{at:%A} {at.day} {at:%B}"


class _UserWriter:
    """Writes one user's story: threads of messages on a timeline, and the questions about them."""

    def __init__(self, user: str, rng: random.Random) -> None:
        self.user = user
        self.rng = rng
        self.values = {slot: rng.choice(options) for slot, options in VALUES.items()}
        self._pick_distinct()
        self.sessions: list[tuple[datetime, list[tuple[str, str]]]] = []  # (start, [(key, text)])
        self.questions: list[tuple[str, str, tuple[str, ...]]] = []  # (kind, text, answer keys)
        self._keys = 0

    def _pick_distinct(self) -> None:
        """Slots that name two different things of one kind must differ (old vs new value, own vs a friend's)."""
        for first, second in (("milk1", "milk2"), ("show1", "show2"), ("manager", "manager2"), ("phone1", "phone2"),
                              ("home1", "home2"), ("breed", "other_breed"), ("allergen", "other_allergen"),
                              ("sib_city", "other_city"), ("friend", "friend2"), ("restaurant", "restaurant2"),
                              ("colleague", "manager"), ("colleague", "manager2"), ("pet", "other_pet"),
                              ("trip_city", "sib_city"), ("conf_city", "trip_city")):  # fmt: skip
            while self.values[first] == self.values[second]:
                self.values[second] = self.rng.choice(VALUES[second])

    def day(self, low: float, high: float) -> datetime:
        """A random moment between ``low`` and ``high`` (fractions of the eight months), in office hours."""
        days = self.rng.uniform(low * DAYS, high * DAYS)
        return START + timedelta(days=int(days), hours=self.rng.randint(0, 11), minutes=self.rng.randint(0, 59))

    def fill(self, template: str, extra: dict[str, str] | None = None) -> str:
        """A template with the user's values (and per-use extras such as dates)."""
        return template.format(**{**self.values, **(extra or {})})

    def key(self) -> str:
        self._keys += 1
        return f"k{self._keys}"

    def thread(self, at: datetime, lines: list[tuple[str, str]]) -> None:
        """A thread starting at ``at`` with the given (key, text) lines; small talk around them."""
        lines = list(lines)
        for _ in range(self.rng.randint(1, 3)):
            lines.insert(self.rng.randint(0, len(lines)), (self.key(), self.small_talk()))
        self.sessions.append((at, lines))

    def small_talk(self) -> str:
        """One filler message: chat, thanks, requests, and other people's near-miss facts."""
        extra = {"date": _date_words(self.day(0, 1)), "n": str(self.rng.randint(2, 9))}
        return self.fill(self.rng.choice(SMALL_TALK), extra)

    def story(self, story: Story) -> None:
        """Place a story's messages on the timeline (later steps in later threads) and record its questions."""
        spans = story.spans or tuple(
            (i / len(story.steps), (i + 1) / len(story.steps)) for i in range(len(story.steps))
        )
        keys = []
        extra: dict[str, str] = {}
        for index, (templates, (low, high)) in enumerate(zip(story.steps, spans, strict=True)):
            at = self.day(low, high)
            # a planned date: after the message, possibly past the end of the timeline (plans look ahead)
            extra[f"date{index}"] = _date_words(self.day(high + 0.02, high + 0.2))
            key = self.key()
            keys.append(key)
            self.thread(at, [(key, self.fill(self.rng.choice(templates), extra))])
        for kind, questions, answer_steps in story.questions:
            text = self.fill(self.rng.choice(questions), extra)
            self.questions.append((kind, text, tuple(keys[i] for i in answer_steps)))

    def finish(self, target_messages: int) -> tuple[list[Message], list[Question]]:
        """Pad with small-talk threads up to ``target_messages``, then number messages in time order."""
        while sum(len(lines) for _, lines in self.sessions) < target_messages:
            lines = [(self.key(), self.small_talk()) for _ in range(self.rng.randint(2, 6))]
            self.sessions.append((self.day(0, 1), lines))
        self.sessions.sort(key=lambda s: s[0])
        messages: list[Message] = []
        ids: dict[str, str] = {}
        for number, (start, lines) in enumerate(self.sessions):
            at = start
            for key, text in lines:
                mid = f"{self.user.split('@')[0]}-m{len(messages):04d}"
                ids[key] = mid
                messages.append(Message(mid, self.user, f"{self.user.split('@')[0]}-s{number:03d}", at, text))
                at += timedelta(minutes=self.rng.randint(5, 600))
        questions = [
            Question(f"{self.user.split('@')[0]}-q{i:02d}", self.user, kind, text, tuple(ids[k] for k in keys))
            for i, (kind, text, keys) in enumerate(self.questions)
        ]
        return messages, questions


def generate(users: int = 6, messages_per_user: int = 330, seed: int = 2026) -> Dataset:
    """The data set: ``users`` users with ``messages_per_user`` messages each, and every story's questions."""
    rng = random.Random(seed)
    data = Dataset()
    for number in range(users):
        writer = _UserWriter(f"person{number + 1}@example.org", random.Random(rng.random()))
        for story in FACTS:
            writer.story(story)
        messages, questions = writer.finish(messages_per_user)
        data.messages += messages
        data.questions += questions
    return data
