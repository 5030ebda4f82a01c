"""Everything that shapes Quinn's replies to a person, besides their memories and recall passages (issue 35): the
short-term state, conversation reviews, thread summaries, the entity graph, the files kept and the opt-out.

The export carries it whole (``shaping``), and "what do you know about me?" and the console's person page show
it, so what a person (or an admin) can see is what reaches the model. Runs on the DB thread; each part is read
through the table's owner.
"""

from __future__ import annotations

from typing import Any

from quinn.agent import consent, state
from quinn.documents import library
from quinn.mailbox import Sessions
from quinn.memory import MemoryStore, graph_of


def shaping(store: MemoryStore, user_id: str) -> dict[str, Any]:
    """What shapes the replies to ``user_id`` besides memories and passages, by kind."""
    kept = {k: v for k, v in state.user_state(store.db, user_id).items() if v}
    return {
        "short_term_state": kept,
        "conversation_reviews": state.reviews_of(store.db, user_id),
        "thread_summaries": Sessions(store.db).summaries_of(user_id),
        "graph": graph_of(store, user_id),
        "files": library.files_of(store.db, user_id),
        "opted_out": consent.opted_out(store.db, user_id),
    }


def described(found: dict[str, Any]) -> str:
    """The parts of ``shaping`` as plain text for the person ("what do you know about me?"), "" when empty."""
    lines: list[str] = []
    if found["short_term_state"]:
        lines.append("Notes from our recent conversations:")
        lines += [f"- {name.replace('_', ' ')}: {text}" for name, text in found["short_term_state"].items()]
    if found["thread_summaries"]:
        lines.append("Summaries of our email threads:")
        # A subject a forget emptied (it named the fact) leaves the summary alone on its line.
        lines += [f'- "{s["subject"]}": {s["summary"]}' if s["subject"] else f"- {s['summary']}"
                  for s in found["thread_summaries"]]  # fmt: skip
    if found["conversation_reviews"]:
        lines.append("My reviews of our finished conversations:")
        for review in found["conversation_reviews"]:  # each with what it said of the person, as the export has it
            said = [str(review.get(k) or "").strip() for k in ("summary", "feedback", "suggestion")]
            lines.append("- " + " ".join(part for part in said if part))
    graph = found["graph"]
    linked = {name for r in graph["relations"] for name in (r["source"], r["target"])}
    alone = [e for e in graph["entities"] if e["name"] not in linked]
    if graph["relations"] or alone:
        lines.append("People, places and things I link:")
        lines += [f"- {r['source']} {r['relation']} {r['target']}" for r in graph["relations"]]
        lines += [f"- {e['name']} ({e['kind']})" for e in alone]
    if found["files"]:
        lines.append("Files you sent that I keep:")
        lines += [f"- {f['name']} ({f['kind']}, {f['size']} bytes)" for f in found["files"]]
    if found["opted_out"]:
        lines.append(
            'You asked me to stop remembering you: I store nothing new ("you may remember me again" undoes it).'
        )
    return "\n".join(lines)


#: How much of one short-term state note the digest shows (the rest is in "what do you know about me?").
BRIEF_NOTE_CHARS = 300
_COUNTED = (("thread_summaries", "summary of our email threads", "summaries of our email threads"),
            ("conversation_reviews", "review of our finished conversations", "reviews of our finished conversations"),
            ("files", "file you sent that I keep", "files you sent that I keep"))  # fmt: skip


def in_brief(found: dict[str, Any]) -> str:
    """``shaping`` in short, as plain text for the periodic digest: the short-term state notes (each cut to
    ``BRIEF_NOTE_CHARS``, on one line) and how many of the rest; "" when there is nothing. Bounded: at most one
    line per state field and one line of counts."""
    lines: list[str] = []
    if found["short_term_state"]:
        lines.append("Notes from our recent conversations:")
        for name, text in found["short_term_state"].items():
            one_line = " ".join(str(text).split())
            cut = one_line if len(one_line) <= BRIEF_NOTE_CHARS else one_line[: BRIEF_NOTE_CHARS - 1] + "…"
            lines.append(f"- {name.replace('_', ' ')}: {cut}")
    counts = [(len(found[key]), one, many) for key, one, many in _COUNTED]
    relations = len(found["graph"]["relations"])
    counts.append((relations, "link between people, places and things", "links between people, places and things"))
    counted = ", ".join(f"{n} {many if n != 1 else one}" for n, one, many in counts if n)
    if counted:
        lines.append(f"Also: {counted}.")
    return "\n".join(lines)
