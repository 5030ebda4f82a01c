"""Why Quinn said that: for each model reply, what reached its prompt, kept when the reply is written.

The reply path computes it (``trace_of``: pure, from the reply's inputs and the rendered prompt) and the engine
records it with the mail (``record``). Memories and passages are kept by id with their scores, the mail's files
by kind and size, the tool calls by name with the memory ids they touched; never the person's text, so the row
is a pointer; a purge of the person deletes it (``purge_user``), and so does retention once it is older than
``[retention] reply_traces_days`` (``expire_before``). The console reads it (``by_id``,
``for_user``, ``for_messages``) and fetches the text itself, by id, through the store. This module owns
``reply_traces`` (migration 0019). DB functions run on the DB thread (``Database.run``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from quinn.agent.context import ReplyInputs
from quinn.clock import iso, utcnow
from quinn.db import Database, Transaction

LISTED = 50  # replies listed on a person's page
#: What learning made of an answered mail (``learnt``): extracted, turned away by the sensory gate, not learnt
#: from because the person opted out, or nothing but memory commands.
PASSED, REJECTED, OPTED_OUT, COMMANDS_ONLY = "passed", "rejected", "opted out", "commands only"
FORGOTTEN = "forgotten"  # all the mail said was asked to be forgotten before it was learnt from


@dataclass(frozen=True)
class ShownMemory:
    """A memory that reached the prompt: from the profile (no search score) or retrieved by search."""

    id: int
    source: str  # "profile" | "search"
    score: float | None = None
    similarity: float | None = None


@dataclass(frozen=True)
class ShownPassage:
    """A passage of past mail or of a file that reached the prompt, with its fused score and cosine."""

    id: int
    score: float
    similarity: float | None = None


@dataclass(frozen=True)
class ShownFile:
    """One of the mail's attached files: what it is, and whether its text reached the prompt."""

    kind: str
    size: int
    read: bool


@dataclass(frozen=True)
class ToolUse:
    """One memory tool the model called: its name, the memory ids it touched, how many results it saw."""

    name: str
    memory_ids: tuple[int, ...] = ()
    found: int | None = None
    refused: bool = False


@dataclass(frozen=True)
class Trace:
    """What reached one reply's prompt."""

    memories: tuple[ShownMemory, ...] = ()
    passages: tuple[ShownPassage, ...] = ()
    files: tuple[ShownFile, ...] = ()
    tools: tuple[ToolUse, ...] = ()
    domains: tuple[str, ...] = ()
    memory_enabled: bool = True

    @property
    def retrieved(self) -> int:
        """What search brought into the prompt: memories found by search, and passages."""
        return sum(m.source == "search" for m in self.memories) + len(self.passages)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Trace:
        data: dict[str, Any] = json.loads(text or "{}")
        return cls(
            memories=tuple(ShownMemory(**m) for m in data.get("memories", ())),
            passages=tuple(ShownPassage(**p) for p in data.get("passages", ())),
            files=tuple(ShownFile(**f) for f in data.get("files", ())),
            tools=tuple(ToolUse(**{**t, "memory_ids": tuple(t.get("memory_ids", ()))}) for t in data.get("tools", ())),
            domains=tuple(data.get("domains", ())),
            memory_enabled=bool(data.get("memory_enabled", True)),
        )


@dataclass(frozen=True)
class Traced:
    """One recorded reply: its row and its trace."""

    id: int
    at: str
    user_id: str
    message_id: str
    template: str
    prompt_version: str
    trace: Trace = field(default_factory=Trace)


def trace_of(inputs: ReplyInputs, variables: dict[str, Any], prompt: str, tools: Sequence[ToolUse] = ()) -> Trace:
    """What of ``inputs`` reached ``prompt`` (the rendered system and user text; ``variables`` its variables):
    a memory by its ``[memory:ID]`` cite, a passage by its line, a file by its text. Pure."""
    profile = variables.get("profile") or ""
    memories: list[ShownMemory] = []
    seen: set[int] = set()
    for memory in inputs.profile:
        if memory.id not in seen and f"[memory:{memory.id}]" in profile:
            memories.append(ShownMemory(memory.id, "profile"))
            seen.add(memory.id)
    for hit in inputs.hits:
        if hit.memory.id not in seen and f"[memory:{hit.memory.id}]" in prompt:
            memories.append(ShownMemory(hit.memory.id, "search", round(hit.score, 4),
                                        _rounded(hit.vector_similarity)))  # fmt: skip
            seen.add(hit.memory.id)
    conversations = variables.get("conversations") or ""
    passages = tuple(ShownPassage(h.passage.id, round(h.score, 4), _rounded(h.similarity))
                     for h in inputs.passages if f"- {h.passage.line()}" in conversations)  # fmt: skip
    shown_files = {a["name"]: bool(a["text"]) for a in variables.get("attachments") or ()}
    files = tuple(ShownFile(d.kind, d.size, shown_files.get(d.name, False)) for d in inputs.documents)
    return Trace(tuple(memories), passages, files, tuple(tools), tuple(inputs.domains), inputs.memory_enabled)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def record(db: Database, user_id: str, message_id: str, template: str, prompt_version: str, trace: Trace,
           now: datetime | None = None) -> None:  # fmt: skip
    """Keep the trace of the reply to ``message_id``; a mail answered again replaces it (the last one was sent)."""
    db.execute(
        "INSERT INTO reply_traces (at, user_id, message_id, template, prompt_version, trace, retrieved)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO UPDATE SET at = excluded.at,"
        " user_id = excluded.user_id, template = excluded.template, prompt_version = excluded.prompt_version,"
        " trace = excluded.trace, retrieved = excluded.retrieved",
        (iso(now or utcnow()), user_id, message_id, template, prompt_version, trace.to_json(), trace.retrieved),
    )


def learnt(db: Database, message_id: str, gate: str, count: int | None = None) -> None:
    """What learning made of the mail ``message_id`` (a gate outcome, and the memories its extraction created or
    changed); a mail without a recorded reply is left alone."""
    db.execute("UPDATE reply_traces SET gate = ?, learnt = ? WHERE message_id = ?", (gate, count, message_id))


@dataclass(frozen=True)
class DayFigures:
    """One day's replies and what learning made of them."""

    day: str
    replies: int
    retrieved: int  # replies whose prompt had a memory found by search, or a passage
    learnt_from: int  # mails learning decided on (gate passed or rejected)
    rejected: int  # ... that the sensory gate turned away
    extracted: int  # ... that went to extraction
    memories: int  # memories the extractions created or changed


def daily_figures(db: Database, since: datetime) -> list[DayFigures]:
    """Per day since ``since`` (UTC dates), oldest first: the reply and learning counts the health figures use."""
    rows = db.query(
        "SELECT substr(at, 1, 10) AS day, count(*),"
        " sum(CASE WHEN retrieved > 0 THEN 1 ELSE 0 END),"
        f" sum(CASE WHEN gate IN ('{PASSED}', '{REJECTED}') THEN 1 ELSE 0 END),"
        f" sum(CASE WHEN gate = '{REJECTED}' THEN 1 ELSE 0 END),"
        f" sum(CASE WHEN gate = '{PASSED}' THEN 1 ELSE 0 END),"
        f" sum(CASE WHEN gate = '{PASSED}' THEN coalesce(learnt, 0) ELSE 0 END)"
        " FROM reply_traces WHERE at >= ? GROUP BY day ORDER BY day",
        (iso(since),),
    )
    return [DayFigures(r[0], *(int(v or 0) for v in r[1:])) for r in rows]


COLUMNS = "id, at, user_id, message_id, template, prompt_version, trace"


def _traced(row: Sequence[Any]) -> Traced:
    return Traced(int(row[0]), row[1], row[2], row[3], row[4], row[5], Trace.from_json(row[6]))


def by_id(db: Database, trace_id: int) -> Traced | None:
    """One recorded reply, or None."""
    rows = db.query(f"SELECT {COLUMNS} FROM reply_traces WHERE id = ?", (trace_id,))
    return _traced(rows[0]) if rows else None


def for_user(db: Database, user_id: str, limit: int = LISTED) -> list[Traced]:
    """The person's recorded replies, newest first."""
    rows = db.query(f"SELECT {COLUMNS} FROM reply_traces WHERE user_id = ? ORDER BY id DESC LIMIT ?",
                    (user_id, limit))  # fmt: skip
    return [_traced(row) for row in rows]


def for_messages(db: Database, message_ids: Iterable[str]) -> dict[str, int]:
    """Trace ids by the Message-ID of the mail they answer, for those of ``message_ids`` that have one."""
    wanted = sorted({m for m in message_ids if m})
    found: dict[str, int] = {}
    for start in range(0, len(wanted), 500):  # SQLite's default limit of bound parameters is far above 500
        chunk = wanted[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        rows = db.query(f"SELECT message_id, id FROM reply_traces WHERE message_id IN ({marks})", chunk)
        found.update({row[0]: int(row[1]) for row in rows})
    return found


def expire_before(tx: Transaction, before: str) -> dict[str, int]:
    """Retention (``[retention] reply_traces_days``): traces of replies written before ``before``."""
    return {"reply_traces": tx.delete("reply_traces", "at < ?", (before,))}


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """The person's reply traces, in a purge."""
    return {"reply_traces": tx.delete("reply_traces", "user_id = ?", (user,))}
