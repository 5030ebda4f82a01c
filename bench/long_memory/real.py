"""The hook for real people: public human-written multi-session conversations turned into mail (issue 32: half of
the benchmark's people). This module reads a file built from the development sources the recall issue uses (never
the held-out benchmark): bench/long_memory/real_friends.py writes it from FriendsQA. It downloads nothing, and
nothing here names or fetches a data set.

The file is JSON::

    {"source": "where the conversations come from", "licence": "...",
     "people": [{
        "first": "Dana", "last": "Reyes",
        "mails": [{"date": "2023-04-01T09:00:00+00:00", "subject": "...", "body": "...", "thread": 0,
                   "attachments": [{"filename": "x.txt", "content_type": "text/plain", "text": "..."}]}],
        "live": ["mail bodies sent live after the import, e.g. a request to forget something"],
        "questions": [{"category": "updated", "kind": "city", "text": "Where do I live now?",
                       "gold": ["\\\\bporto\\\\b"], "answer": "Porto", "stale": ["\\\\blisbon\\\\b"],
                       "evidence": ["\\\\bporto\\\\b"]}]
     }]}

A multi-session conversation (sessions of dated turns between the person and someone else) becomes such a person
with ``person_from_sessions``: each session a thread, each run of the person's turns a mail from them, the other
side's turn before it quoted below ("On DATE, NAME wrote:" and "> " lines) the way a mail client quotes (Quinn's
parser keeps only the person's own words). A converter that writes the file calls it.

``thread`` is the index of the mail that starts the mail's thread (its own index for a new thread); ``category``
is one of ``data.KINDS``; patterns are regular expressions over lower-cased text (``gold``: a right answer;
``stale``: an old value, or for ``forgotten`` the forgotten one; ``evidence``: what shows the prompt held the
answer, default ``gold``). Load with ``--real PATH``; a file that does not follow this is refused with the field
that is wrong.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.long_memory.data import KINDS, Mail, Person, Probe
from bench.memory_qa_data import Attachment


class RealPeopleError(ValueError):
    """The real-people file is missing or does not follow the format above."""


def load(path: Path, limit: int | None = None) -> list[Person]:
    """The people of ``path`` (the first ``limit`` of them), as ``Person`` with ``source`` "real"."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RealPeopleError(f"{path}: cannot read real people from it ({exc})") from None
    people = raw.get("people") if isinstance(raw, dict) else None
    if not isinstance(people, list) or not people:
        raise RealPeopleError(f'{path}: no "people" list (see bench/long_memory/real.py for the format)')
    return [_person(path, n, item) for n, item in enumerate(people[:limit] if limit else people)]


def person_from_sessions(first: str, last: str, speaker: str, sessions: list[dict[str, Any]],
                         questions: list[Probe], live: list[str] | None = None,
                         words_per_mail: int = 0) -> Person:  # fmt: skip
    """A person from multi-session chat: ``sessions`` as ``[{"date": ISO, "turns": [{"speaker": ..., "text": ...}]}]``
    in time order; ``speaker`` names the person's turns. Each session is a thread (subject from its date), each
    run of the person's turns one mail, a minute apart, the other side's turn before it quoted below it. With
    ``words_per_mail``, a mail goes on with the person's next runs of the session (a paragraph each) until it
    holds that many words: chat turns are a dozen words, and a hundred one-line mails would fit a model's context
    whole (the other side's turns between the runs are left out; Quinn keeps only the person's words anyway)."""
    mails: list[Mail] = []
    for session in sessions:
        start = datetime.fromisoformat(session["date"])
        thread = len(mails)
        other, other_name, quote, mine, runs = "", "", ("", ""), [], []
        for turn in [*session["turns"], {"speaker": None, "text": ""}]:  # a sentinel ends the last run
            if turn["speaker"] == speaker:
                if not mine and not runs:
                    quote = (other, other_name)
                mine.append(str(turn["text"]).strip())
                continue
            if mine:
                runs.append(" ".join(mine))
                mine = []
            if runs and (turn["speaker"] is None or sum(len(r.split()) for r in runs) >= words_per_mail):
                quoted = "".join(f"> {line}\n" for line in quote[0].splitlines())
                quoted = f"\n\nOn {start:%d %B %Y}, {quote[1]} wrote:\n{quoted}" if quote[0] else ""
                subject = f"Our chat of {start:%d %B %Y}" if len(mails) == thread else (
                    f"Re: Our chat of {start:%d %B %Y}")  # fmt: skip
                body = "\n\n".join(runs) + f"\n\n{first}{quoted}"
                mails.append(Mail(subject, body, start + timedelta(minutes=len(mails) - thread), thread))
                runs = []
            other, other_name = str(turn["text"]).strip(), str(turn["speaker"] or "")
    return Person(first, last, mails, list(live or []), questions, source="real")


def _person(path: Path, n: int, item: Any) -> Person:
    where = f"{path}: people[{n}]"
    try:
        first, last = str(item["first"]), str(item.get("last", ""))
        mails = [_mail(m) for m in item["mails"]]
        questions = [_probe(first, q) for q in item["questions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise RealPeopleError(f"{where}: {exc.__class__.__name__}: {exc}") from None
    if any(not 0 <= m.thread <= i for i, m in enumerate(mails)):
        raise RealPeopleError(f'{where}: a mail\'s "thread" must be the index of an earlier mail or its own')
    return Person(first, last, mails, [str(x) for x in item.get("live", [])], questions, source="real")


def _mail(item: dict[str, Any]) -> Mail:
    files = tuple(Attachment(a["filename"], a.get("content_type", "text/plain"), a["text"].encode(), a["text"])
                  for a in item.get("attachments", []))  # fmt: skip
    return Mail(str(item["subject"]), str(item["body"]), datetime.fromisoformat(item["date"]), int(item["thread"]),
                files)  # fmt: skip


def _probe(user: str, item: dict[str, Any]) -> Probe:
    category = str(item["category"])
    if category not in KINDS:
        raise ValueError(f"category {category!r} is not one of {', '.join(KINDS)}")
    gold = tuple(item["gold"])
    return Probe(user, category, str(item.get("kind", category)), str(item["text"]), gold, str(item.get("answer", "")),
                 tuple(item.get("stale", ())), tuple(item.get("evidence", gold)))  # fmt: skip
