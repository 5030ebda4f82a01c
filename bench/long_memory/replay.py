"""``python -m bench.long_memory.replay``: where the recalled lines stand, with everything else held (an ablation).

A long-memory run keeps every model call (``--workdir``: ``calls.jsonl``). This takes Quinn's reply prompt of
each question from it, exactly as it was sent, moves what was recalled (the profile, the memories, the past
mail) from the system message to the head of the user message, asks the model again, and scores the answer as
the run scores its own (``report.score``). Recall, budget, template words, model and sampling are the run's:
only the place of the recalled lines differs. The run's own answer is the "as sent" column; ``--re-ask`` asks
the as-sent prompt again too, to see that the server answers it as the run's did (temperature 0).

``--variant`` names another ablation of the same kind (given more than once, each is asked beside the prompt as
sent in one server start), each one change to the prompt as sent:
``without_memories`` drops the list of recalled memories (the profile and the past mail stay),
``without_abstain_line`` drops the standing instruction to say "I do not know" (the one shown only when
nothing was recalled stays), ``without_repeated_memories`` drops the memories whose words a passage shown beside
them holds, ``passages_as_blocks`` shows each passage as a block (citation line, text, blank line) as the
thread's messages are, ``writer_named`` names the writer (the new email's sender) where a recalled line says
"they wrote" (the real people's questions name them: "What relative of Monica is getting married?"),
``dates_in_words`` writes every ISO day of the prompt as "19 March 2025", ``without_earlier`` drops the version
a memory replaced ("| earlier: X (until DATE)"), ``earlier_when_asked`` drops it unless the email looks back in
time (``quinn.memory.query.looks_back``), ``dates_in_words_now`` is ``earlier_when_asked`` with its days in words
but for the citation tags ("[mail:2025-03-19]" stays); ``search_k_5`` and ``search_k_3`` keep of the recalled
memories and passages only those Quinn's own ranking puts first, as ``[memory] search_k`` 5 or 3 would show them
(searched again in the run's database, ``--db WORKDIR/quinn.db``); ``best_first`` and ``best_last`` show the same
lines in that ranking's order instead of oldest first; ``best_again_last`` keeps the lists as sent and repeats
their best two memories and passages by the ranking right above the new email. All take
the recall where the run's template put it. ``guesses_sent_back`` changes no prompt: it follows up the answer
as Quinn does when it names what nothing in its prompt holds (``[llm] check_guesses``), asking the model on
top of that answer with Quinn's note; an answer Quinn would mail as it is stays as it was. ``unsure_sent_back``
follows up an answer that says it does not know while recalled lines of its prompt share words with the email,
naming those lines back (a check Quinn does not make: the test of one). ``focused_again`` (with ``--db``) asks
such an answer's email afresh instead, with only the five best past mails by Quinn's ranking shown as blocks
above it, as the BM25 baseline's passages are (another check Quinn does not make).

The people are rebuilt from the run's own flags (``--people``, ``--skip``, ``--real``, ...), which give each
question's right and stale answers.

    python -m bench.long_memory.replay --transcript /tmp/lm/p1/calls.jsonl --people 1 --name replay-p1
    python -m bench.long_memory.replay --transcript /tmp/lm/p4/calls.jsonl --people 3 \\
        --real bench/data/long_memory_real.json --real-people 1 --skip 3 --name replay-p4
    python -m bench.long_memory.replay --merge a.json b.json --name long_memory-recall-placement
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

from bench.long_memory.__main__ import apply_part
from bench.long_memory.__main__ import parser as run_parser
from bench.long_memory.data import Probe
from bench.long_memory.report import Scored, score
from bench.long_memory.run import people_of
from bench.machine import machine_info
from bench.memory_qa import MAX_OUTPUT_TOKENS, Asked, model_target, read_part, write_result
from quinn.agent.grounding import Grounding, guessed
from quinn.agent.json_text import unfenced
from quinn.agent.llm import GUESSES_NOTE
from quinn.memory import content_words, looks_back, stem

#: The recall sections of the reply template (prompts/reply.j2), each led by its heading.
RECALL_HEADS = (
    "\n\nWhat you know about ",
    "\n\nMemories that may be relevant to this email",
    "\n\nFrom your past emails with this person",
    "\n\nEverything this person wrote to you before",
)
#: The system message's sections after the recall ones, in the template before the recall moved.
AFTER_RECALL = (
    "\n\nNothing you remember and none of your past emails",
    "\n\nRecent context with this person:",
    "\n\nThis email is about:",
    "\n\nMemory requests in this email",
    "\n\nOther people are on this email",
)
#: Where a section of the user message ends when no recall section follows it.
USER_TAIL = ("\n\nSummary of the earlier conversation in this thread:", "\n\nEarlier messages in this thread",
             "\n\nNew email from ", "Summary of the earlier conversation in this thread:",
             "Earlier messages in this thread", "New email from ")  # fmt: skip
MEMORIES_HEAD = RECALL_HEADS[1]
PASSAGES_HEADS = RECALL_HEADS[2:]
ABSTAIN_LINE = ("\nWhen the email asks about something the person told you and nothing below says it, say that "
                "you do not know\nrather than guess.")  # fmt: skip


class ReplayError(SystemExit):
    """The transcript does not hold what a replay needs; the message says what and how to fix it."""


def moved(system: str, user: str) -> tuple[str, str]:
    """``system`` without its recall sections, and ``user`` opened by them."""
    starts = [at for at in (system.find(head) for head in RECALL_HEADS) if at >= 0]
    if not starts:
        raise ReplayError("a reply prompt has no recall in its system message: the run's template already puts it "
                          "elsewhere, so there is nothing to move")  # fmt: skip
    start = min(starts)
    ends = [at for at in (system.find(tail, start) for tail in AFTER_RECALL) if at >= 0]
    end = min(ends, default=len(system))
    return system[:start] + system[end:], f"{system[start:end].strip()}\n\n{user}"


def section(text: str, head: str) -> tuple[int, int] | None:
    """Where the section led by ``head`` stands in ``text``, up to the next section or the email itself."""
    start = text.find(head)
    if start < 0 and text.startswith(head.lstrip("\n")):  # the message opens with it
        start = 0
    if start < 0:
        return None
    ends = [at for at in (text.find(tail, start + len(head)) for tail in RECALL_HEADS + AFTER_RECALL + USER_TAIL)
            if at >= 0]  # fmt: skip
    return start, min(ends, default=len(text))


def within(text: str, heads: Sequence[str], change: Callable[[str], str]) -> str:
    """``text`` with ``change`` applied to the sections led by ``heads`` only."""
    for head in heads:
        span = section(text, head)
        if span is not None:
            text = text[: span[0]] + change(text[span[0] : span[1]]) + text[span[1] :]
    return text


def without_section(text: str, head: str) -> str:
    """``text`` without the section led by ``head``, up to the next section or the email itself."""
    span = section(text, head)
    if span is None:
        return text
    start, end = span
    return text[:start] + (text[end:] if start else text[end:].lstrip("\n"))


def without_memories(system: str, user: str) -> tuple[str, str]:
    """The prompt without its recalled memories, wherever the template put them (a prompt with none as it was)."""
    return without_section(system, MEMORIES_HEAD), without_section(user, MEMORIES_HEAD)


def without_abstain_line(system: str, user: str) -> tuple[str, str]:
    """The prompt without the standing "say you do not know" line (the empty-recall one stays)."""
    if ABSTAIN_LINE not in system:
        raise ReplayError("a reply prompt has no standing line asking to say \"I do not know\": the run's template "
                          "words it otherwise, so there is nothing to drop")  # fmt: skip
    return system.replace(ABSTAIN_LINE, "", 1), user


#: A line of past mail or a file as the reply template shows it: ``- [mail:DATE] (they wrote, "Subject") text``.
PASSAGE_LINE = re.compile(r'^- (\[(?:mail|doc):[^\]\n]*\] \((?:[^"()\n]|"[^"\n]*")*\)) (.*)$', re.M)
#: A recalled memory's line: ``- [memory:ID] (how, since DATE) text``, perhaps `` | earlier: X (until DATE)``.
MEMORY_LINE = re.compile(r"^- \[memory:\d+\] \([^)\n]*\) (.*?)(?: \| earlier: .*)?$\n?", re.M)


def _plain(text: str) -> str:
    return " ".join(text.lower().split())


def passages_as_blocks(system: str, user: str) -> tuple[str, str]:
    """Each passage of past mail as its own block, its citation on a line and its text below, a blank line
    after, as the thread's messages are shown, instead of one bulleted line each."""

    def block(text: str) -> str:
        return PASSAGE_LINE.sub(lambda m: f"{m.group(1)}:\n{m.group(2)}\n", text)

    return within(system, PASSAGES_HEADS, block), within(user, PASSAGES_HEADS, block)


def without_repeated_memories(system: str, user: str) -> tuple[str, str]:
    """The prompt without the memories whose words a passage shown beside them already holds (own-words memories
    are sentences of those very mails); the rest stay where they were."""
    passages = [text[a:b] for text in (system, user) for head in PASSAGES_HEADS
                if (span := section(text, head)) for a, b in [span]]  # fmt: skip
    shown = _plain(" ".join(m.group(2) for part in passages for m in PASSAGE_LINE.finditer(part)))

    def drop(text: str) -> str:
        kept = within(
            text,
            (MEMORIES_HEAD,),
            lambda part: MEMORY_LINE.sub(lambda m: "" if _plain(m.group(1)) in shown else m.group(0), part),
        )
        span = section(kept, MEMORIES_HEAD)
        if span is not None and kept != text and not MEMORY_LINE.search(kept[span[0] : span[1]]):
            return without_section(kept, MEMORIES_HEAD)
        return kept

    return drop(system), drop(user)


_SENDER = re.compile(r"^New email from (.+?) <[^>\n]*> on ", re.M)


def writer_named(system: str, user: str) -> tuple[str, str]:
    """The recalled lines with the writer's name where they say "they" ("(Monica wrote on DATE)", "(Monica
    wrote, "Subject")"), the name as the new email's From gives it; a prompt whose email names no one as it was."""
    found = _SENDER.search(user) or _SENDER.search(system)
    if found is None or not found.group(1).strip(' "'):
        return system, user
    name = found.group(1).strip(' "').split()[0]

    def named(text: str) -> str:
        text = re.sub(r"^(- \[memory:\d+\] \()they wrote on ", rf"\g<1>{name} wrote on ", text, flags=re.M)
        return re.sub(r"^(- \[(?:mail|doc):[^\]\n]*\] \()they wrote,", rf"\g<1>{name} wrote,", text, flags=re.M)

    return within(system, RECALL_HEADS, named), within(user, RECALL_HEADS, named)


_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")  # fmt: skip


def in_words(text: str) -> str:
    """Every ISO day of ``text`` ("2025-03-19") written as a person would ("19 March 2025")."""

    def spelt(found: re.Match[str]) -> str:
        month = int(found.group(2))
        if not 1 <= month <= 12:
            return found.group(0)
        return f"{int(found.group(3))} {_MONTHS[month - 1]} {found.group(1)}"

    return _ISO_DAY.sub(spelt, text)


def dates_in_words(system: str, user: str) -> tuple[str, str]:
    """The dates of the recalled lines (and of the new email) in words: a small model asked "in which month and
    year" has to turn "since 2025-03-19" into "March 2025" itself."""
    return in_words(system), in_words(user)


_EARLIER = re.compile(r"^(- \[memory:\d+\] .*?) \| earlier: .*$", re.M)


_CITE_TAG = re.compile(r"(\[[^\]\n]*\])")


def outside_cites(text: str) -> str:
    """``in_words`` on ``text`` but for its citation tags ("[mail:2025-03-19]" stays as the model must cite it)."""
    return "".join(part if _CITE_TAG.fullmatch(part) else in_words(part) for part in _CITE_TAG.split(text))


def dates_in_words_now(system: str, user: str) -> tuple[str, str]:
    """``earlier_when_asked`` (Quinn's prompt since 95665bf), with its dates in words but for the citation tags:
    what Quinn would send if it wrote "(they wrote on 19 March 2025)"."""
    system, user = earlier_when_asked(system, user)
    return outside_cites(system), outside_cites(user)


def without_earlier(system: str, user: str) -> tuple[str, str]:
    """The memories' lines without the version each replaced ("| earlier: X (until DATE)")."""

    def dropped(text: str) -> str:
        return _EARLIER.sub(r"\g<1>", text)

    return within(system, RECALL_HEADS, dropped), within(user, RECALL_HEADS, dropped)


_ASKED = re.compile(r"^New email from .*?:\n(.*)", re.M | re.S)
_WRITTEN = re.compile(r"^New email from .*? on (\d{4}-\d{2}-\d{2})", re.M)


def earlier_when_asked(system: str, user: str) -> tuple[str, str]:
    """The replaced versions only for an email that looks back in time (``query.looks_back``, as Quinn now
    decides), else ``without_earlier``."""
    found = _ASKED.search(user) or _ASKED.search(system)
    day = _WRITTEN.search(user) or _WRITTEN.search(system)
    if found and day and looks_back(found.group(1), date.fromisoformat(day.group(1))):
        return system, user
    return without_earlier(system, user)


def guesses_sent_back(system: str, user: str, answer: str, address: str) -> list[dict[str, str]] | None:
    """The conversation Quinn continues when the answer names what nothing in its prompt holds, of the person
    on the mail (``grounding.guessed``, ``[llm] check_guesses``): the prompt, the answer, ``llm.GUESSES_NOTE``;
    None when Quinn would mail the answer as it is."""
    found = _SENDER.search(user) or _SENDER.search(system)
    people = Grounding.of([], [address, found.group(1).strip(' "') if found else ""]).names
    names = guessed(unfenced(answer), f"{system}\n{user}", people)
    if not names:
        return None
    return [{"role": "system", "content": system}, {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": GUESSES_NOTE.format(names=", ".join(names))}]  # fmt: skip


#: A reply that says it does not know ("I'm sorry, but I don't have any information about ...", "I do not know").
_UNSURE = re.compile(r"\b(?:do\s+not|don't|don’t)\s+(?:have\s+(?:any\s+)?(?:specific\s+)?information|know|remember)\b"
                     r"|\bno\s+information\b", re.IGNORECASE)  # fmt: skip
_RECALLED_LINE = re.compile(r"^- \[(?:memory|mail):[^\]]*\] (?:\([^)]*\) )?(.*)$")
UNSURE_SHARED = 2  # content words of the email a recalled line must hold to be pointed at
UNSURE_SHOWN = 3  # lines pointed at, at most (those sharing the most)
UNSURE_NOTE = ("Your reply says you do not know. These lines above share words with the email:\n{lines}\nIf one "
               "of them answers the email, write the reply again and answer from it. If none of them does, write the "
               "same reply again.")  # fmt: skip


def shared_words(line: str, asked: set[str]) -> int:
    """How many of ``asked`` (the email's content words, stemmed) a recalled line's text holds; 0 for a line that
    is not a recalled memory or passage."""
    found = _RECALLED_LINE.match(line)
    if not found:
        return 0
    return len(asked & {stem(w) for w in content_words(found.group(1).replace("| earlier:", " "))})


def asked_words(user: str) -> set[str]:
    """The content words, stemmed, of the email a reply prompt answers."""
    return {stem(w) for w in content_words(query_of(user)[1])}


def unsure_sent_back(system: str, user: str, answer: str, address: str) -> list[dict[str, str]] | None:
    """The conversation a check would continue when the answer says it does not know while recalled lines of
    its prompt share at least ``UNSURE_SHARED`` content words with the email (those lines named back, the most
    shared first, ``UNSURE_NOTE``); None when the answer answers, or no line shares that much."""
    if not _UNSURE.search(answer):
        return None
    asked = asked_words(user)
    shared: list[tuple[int, int, str]] = []
    for i, line in enumerate(f"{system}\n{user}".splitlines()):
        n = shared_words(line, asked)
        if n >= UNSURE_SHARED:
            shared.append((-n, i, line))
    if not shared:
        return None
    lines = "\n".join(line for *_, line in sorted(shared)[:UNSURE_SHOWN])
    return [{"role": "system", "content": system}, {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": UNSURE_NOTE.format(lines=lines)}]  # fmt: skip


@dataclass(frozen=True)
class Ranking:
    """Quinn's own order of what it recalled for one question, best first (``rank``): memory ids, and passages
    as the prompt shows them."""

    memories: tuple[int, ...]
    passages: tuple[str, ...]


_NEW_EMAIL = re.compile(r'New email from [^\n]*?<([^>\n]+)> on [^\n]*?, subject "(.*?)":\n(?:\(Cc: [^\n]*\)\n)?'
                        r"(.*?)\n\nWrite the reply body only", re.DOTALL)  # fmt: skip
_MEMORY_LINE = re.compile(r"^- \[memory:(\d+)\]")


def query_of(user: str) -> tuple[str, str]:
    """The sender of the email the prompt answers, and the search query Quinn built for it
    (``respond.reply_inputs``: subject, text)."""
    found = _NEW_EMAIL.search(user)
    if found is None:
        raise ReplayError("a reply prompt holds no new email as reply.j2 writes it: this replay reads that template's")
    return found.group(1), f"{found.group(2)}\n{found.group(3).strip()}"


def rank(db: Path, sent: Sequence[Sent]) -> list[Ranking]:
    """For each prompt, Quinn's ranking of its memories and passages for the same email, searched again in the
    run's own database (``--db``; its end state: the questions are never learnt from), deeper than any prompt
    shows, so every line a prompt holds has its place."""
    from quinn.memory import MemoryStore, hybrid_search, search_passages

    if not db.is_file():
        raise ReplayError(f"--db {db}: no such file; give the quinn.db in the run's --workdir")
    store = MemoryStore.open(str(db))
    try:
        found = []
        for one in sent:
            address, query = query_of(one.user)
            hits = hybrid_search(store, address, query, k=100, include_global=True, touch=False)
            passages = search_passages(store, address, query, k=100)
            found.append(Ranking(tuple(h.memory.id for h in hits), tuple(f"- {p.passage.line()}" for p in passages)))
        return found
    finally:
        store.close()


def top_ranked(system: str, user: str, ranking: Ranking, k: int) -> tuple[str, str]:
    """The prompt with only what Quinn's ranking puts first among its lines, as ``[memory] search_k = k`` would
    show (``2 k`` memories and ``k`` passages, ``respond.reply_inputs``), in the order sent: the others go. A line
    the ranking does not hold (a memory linked by the graph) stays."""
    lines = f"{system}\n{user}".split("\n")
    # What the prompt shows is what was eligible when it was sent (the database has more since: the later
    # questions' mails): the best of those, by the ranking.
    shown_ids = {int(m.group(1)) for line in lines if (m := _MEMORY_LINE.match(line))}
    memories = {i for i in ranking.memories if i in shown_ids}
    memories = set([i for i in ranking.memories if i in memories][: 2 * k])
    passages = set([p for p in ranking.passages if p in lines][:k])

    def keep_memories(text: str) -> str:
        return "\n".join(line for line in text.split("\n") if not (m := _MEMORY_LINE.match(line))
                         or int(m.group(1)) in memories or int(m.group(1)) not in ranking.memories)  # fmt: skip

    def keep_passages(text: str) -> str:
        return "\n".join(line for line in text.split("\n") if not line.startswith("- [")
                         or line in passages or line not in ranking.passages)  # fmt: skip

    def change(text: str) -> str:
        return within(within(text, [MEMORIES_HEAD], keep_memories), PASSAGES_HEADS, keep_passages)

    return change(system), change(user)


def by_rank(system: str, user: str, ranking: Ranking, best_last: bool) -> tuple[str, str]:
    """The prompt with the same recalled lines, each list in the order of Quinn's ranking instead of oldest first:
    best first, or best last (nearest the email). A line the ranking does not hold keeps its place after them."""

    def place(line: str) -> int:
        m = _MEMORY_LINE.match(line)
        order = ranking.memories.index(int(m.group(1))) if m and int(m.group(1)) in ranking.memories else None
        if order is None and line in ranking.passages:
            order = ranking.passages.index(line)
        return len(ranking.memories) + len(ranking.passages) if order is None else order

    def reorder(text: str) -> str:
        # The heading says the order the lines are in.
        text = text.replace(", oldest first", ", most relevant last" if best_last else ", most relevant first", 1)
        lines = text.split("\n")
        items = [n for n, line in enumerate(lines) if line.startswith("- [")]
        ordered = sorted((lines[n] for n in items), key=place, reverse=best_last)
        for n, line in zip(items, ordered, strict=True):
            lines[n] = line
        return "\n".join(lines)

    def change(text: str) -> str:
        return within(within(text, [MEMORIES_HEAD], reorder), PASSAGES_HEADS, reorder)

    return change(system), change(user)


AGAIN_HEAD = "Most relevant of the above to this email (the same lines again, the best last):"


def best_again(system: str, user: str, ranking: Ranking, n: int = 2) -> tuple[str, str]:
    """The prompt as sent, and, right above the new email, the ``n`` best of its recalled memories and of its
    passages by Quinn's ranking repeated (best last, nearest the question): the lists keep their order."""
    lines = f"{system}\n{user}".split("\n")
    shown_ids = {int(m.group(1)) for line in lines if (m := _MEMORY_LINE.match(line))}
    memory_lines = {int(m.group(1)): line for line in lines if (m := _MEMORY_LINE.match(line))}
    memories = [memory_lines[i] for i in ranking.memories if i in shown_ids][:n]
    passages = [p for p in ranking.passages if p in lines][:n]
    again = [*passages[::-1], *memories[::-1]]  # the best memory last: memories are the person's own statements
    head = user.find("New email from ")
    if not again or head < 0:
        return system, user
    block = "\n".join([AGAIN_HEAD, *again])
    return system, f"{user[:head]}{block}\n\n\n{user[head:]}"


FOCUSED_K = 5  # passages the focused second look shows, the best by Quinn's ranking (the BM25 baseline pastes 5)
FOCUSED_HEAD = "Your past emails with this person that bear most on this email (oldest first):"
PROFILE_HEAD = "\n\nWhat you know about "


def focused_again(system: str, user: str, answer: str, address: str, ranking: Ranking) -> list[dict[str, str]] | None:
    """A second look Quinn does not take (the test of one): when the answer says it does not know while passages
    of its prompt share at least ``UNSURE_SHARED`` content words with the email, the email asked afresh (not on
    top of that answer) with only the ``FOCUSED_K`` best of those passages by Quinn's ranking, shown as blocks
    (oldest first) right above the email as the BM25 baseline's are; no memory list, no profile. None when the
    answer answers or no passage shares that much."""
    if not _UNSURE.search(answer):
        return None
    lines = f"{system}\n{user}".split("\n")
    shown = [p for p in ranking.passages if p in lines][:FOCUSED_K]
    asked = asked_words(user)
    if not any(shared_words(p, asked) >= UNSURE_SHARED for p in shown):
        return None
    oldest_first = sorted(shown, key=lambda p: p.split("]", 1)[0])  # by the "[mail:DATE" each line opens with
    blocks = [PASSAGE_LINE.sub(lambda m: f"--- {m.group(1)} ---\n{m.group(2)}\n", p) for p in oldest_first]

    def without_recall(text: str) -> str:
        for head in (PROFILE_HEAD, MEMORIES_HEAD, *PASSAGES_HEADS):
            text = without_section(text, head)
        return text

    bare = without_recall(user)
    at = bare.find("New email from ")
    focused = f"{bare[:at].rstrip()}\n\n{FOCUSED_HEAD}\n" + "\n".join(blocks) + f"\n\n{bare[at:]}"
    return [{"role": "system", "content": without_recall(system)}, {"role": "user", "content": focused.lstrip("\n")}]


#: Ablations by Quinn's own ranking (``--db``): what ``[memory] search_k`` = N would keep, or the same lines in the
#: ranking's order.
RANKED: dict[str, Callable[[str, str, Ranking], tuple[str, str]]] = {
    "search_k_5": lambda system, user, ranking: top_ranked(system, user, ranking, 5),
    "search_k_3": lambda system, user, ranking: top_ranked(system, user, ranking, 3),
    "best_first": lambda system, user, ranking: by_rank(system, user, ranking, best_last=False),
    "best_last": lambda system, user, ranking: by_rank(system, user, ranking, best_last=True),
    "best_again_last": best_again,
}


#: Ablations that follow the answer up as Quinn does (a second request on top of the first answer).
FOLLOW_UPS: dict[str, Callable[[str, str, str, str], list[dict[str, str]] | None]] = {
    "guesses_sent_back": guesses_sent_back,
    "unsure_sent_back": unsure_sent_back,
}
#: Follow-ups that need Quinn's ranking (``--db``) as well as the answer.
RANKED_FOLLOW_UPS: dict[str, Callable[[str, str, str, str, Ranking], list[dict[str, str]] | None]] = {
    "focused_again": focused_again,
}
#: Each ablation: one change to the prompt as sent, its title and what it changes.
CHANGES = {"recall_in_user": moved, "without_memories": without_memories,
           "without_abstain_line": without_abstain_line, "passages_as_blocks": passages_as_blocks,
           "without_repeated_memories": without_repeated_memories, "writer_named": writer_named,
           "dates_in_words": dates_in_words, "without_earlier": without_earlier,
           "earlier_when_asked": earlier_when_asked, "dates_in_words_now": dates_in_words_now}  # fmt: skip
TITLES = {"recall_in_user": "the recalled lines in the system message or at the head of the user message",
          "without_memories": "the prompt with and without its list of recalled memories",
          "without_abstain_line": "the prompt with and without its standing \"say you do not know\" line",
          "passages_as_blocks": "past mail as one bulleted line per passage or as blocks, like a thread",
          "without_repeated_memories": "the prompt with and without the memories a shown passage holds",
          "writer_named": "the recalled lines saying \"they wrote\" or naming the writer",
          "dates_in_words": "dates as ISO days (2025-03-19) or in words (19 March 2025)",
          "without_earlier": "memories with and without the version they replaced",
          "earlier_when_asked": "replaced versions always, or only when the email looks back in time",
          "dates_in_words_now": "today's prompt with dates as ISO days or in words (but in citation tags)",
          "guesses_sent_back": "replies naming what their prompt never said, as written or sent back once",
          "unsure_sent_back": "replies saying they do not know, as written or shown the lines that may answer",
          "focused_again": "replies saying they do not know, as written or asked again with the best passages alone",
          "search_k_5": "all the recalled lines, or only Quinn's best (search_k 5)",
          "search_k_3": "all the recalled lines, or only Quinn's best (search_k 3)",
          "best_first": "the recalled lines oldest first or best first",
          "best_last": "the recalled lines oldest first or best last (nearest the email)",
          "best_again_last": "the recalled lines oldest first, or also their best two again by the email"}  # fmt: skip
CHANGED = {"recall_in_user": "where the recall stands", "without_memories": "the list of recalled memories",
           "without_abstain_line": "the standing abstain line", "passages_as_blocks": "the layout of the past mail",
           "without_repeated_memories": "the memories repeated by a passage",
           "writer_named": "who the recalled lines say wrote them", "dates_in_words": "how dates are written",
           "without_earlier": "the replaced versions", "earlier_when_asked": "when replaced versions are shown",
           "dates_in_words_now": "how dates are written (replaced versions shown only when asked)",
           "guesses_sent_back": "whether a reply's guesses are sent back",
           "unsure_sent_back": "whether a reply that does not know is shown the lines that may answer",
           "focused_again": "whether a reply that does not know is asked again with the best passages alone",
           "search_k_5": "how many of the recalled lines, by Quinn's ranking",
           "search_k_3": "how many of the recalled lines, by Quinn's ranking",
           "best_first": "the order of the recalled lines", "best_last": "the order of the recalled lines",
           "best_again_last": "whether the best recalled lines are repeated by the email"}  # fmt: skip


@dataclass(frozen=True)
class Sent:
    """Quinn's reply prompt of one question, as the run sent it, and the run's answer."""

    probe: Probe
    source: str
    system: str
    user: str
    answer: str


def quinn_prompts(calls: Sequence[dict[str, Any]], people: Sequence[Any]) -> list[Sent]:
    """For every question of ``people``, Quinn's first reply prompt that asked it (a baseline's prompt has no
    recall section; a reply asked again after a copy is the same prompt)."""
    replies = [c for c in calls if c.get("purpose") == "reply" and len(c.get("messages") or ()) >= 2]
    found: list[Sent] = []
    for person in people:
        for probe in person.questions:
            for call in replies:
                system, user = call["messages"][0]["content"], call["messages"][1]["content"]
                if probe.text in user and any(
                    head in system or head in user or user.startswith(head.lstrip()) for head in RECALL_HEADS
                ):
                    found.append(Sent(probe, person.source, system, user, call.get("answer") or ""))
                    break
            else:
                raise ReplayError(
                    f"no Quinn reply prompt in the transcript asks {probe.text!r}: give the flags "
                    "of the run that wrote it (--people, --skip, --real, --real-people, --seed)"
                )
    return found


def ask(base_url: str, system: str, user: str) -> Asked:
    """One chat completion at temperature 0, as the run's (``max_output_tokens`` the same)."""
    return ask_messages(base_url, [{"role": "system", "content": system}, {"role": "user", "content": user}])


def ask_messages(base_url: str, messages: Sequence[dict[str, str]]) -> Asked:
    """``ask`` for a conversation of several turns (a follow-up: the answer, then Quinn's note)."""
    body = {"model": "replay", "temperature": 0, "max_tokens": MAX_OUTPUT_TOKENS, "messages": list(messages)}
    request = urllib.request.Request(f"{base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})  # fmt: skip
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=1800) as response:  # the lab's model, on 127.0.0.1
        answer = json.loads(response.read())
    usage = answer.get("usage") or {}
    # The prompt scored (what recall put in it) is the first request's, not the answer or note that follow.
    return Asked("\n".join(m["content"] for m in messages[:2]), answer["choices"][0]["message"]["content"] or "",
                 int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                 time.perf_counter() - started)  # fmt: skip


def replay(sent: Sequence[Sent], base_url: str, re_ask: bool, variants: Sequence[str] = ("recall_in_user",),
           rankings: Sequence[Ranking] = ()) -> Iterator[Scored]:  # fmt: skip
    """Each prompt's rows: as sent (the run's answer, or asked again), then changed by each of ``variants``
    (a ``RANKED`` one by the prompt's ``rankings``, in the order of ``sent``)."""
    ranked = dict(zip((id(one) for one in sent), rankings, strict=False))

    def changed_by(variant: str, one: Sent) -> tuple[str, str]:
        if variant in RANKED:
            return RANKED[variant](one.system, one.user, ranked[id(one)])
        return CHANGES[variant](one.system, one.user)

    for variant in variants:
        if (variant in RANKED or variant in RANKED_FOLLOW_UPS) and len(rankings) != len(sent):
            raise ReplayError(f"--variant {variant}: give the run's database with --db (Quinn's ranking)")
        if variant in FOLLOW_UPS or variant in RANKED_FOLLOW_UPS:  # a part none of whose answers Quinn follows
            continue  # up still counts (all as sent)
        if all(changed_by(variant, one) == (one.system, one.user) for one in sent):
            raise ReplayError(f"--variant {variant}: it changes none of the run's prompts, so there is nothing to "
                              "compare")  # fmt: skip
    for one in sent:
        if re_ask:
            as_sent = ask(base_url, one.system, one.user)
        else:
            as_sent = Asked(f"{one.system}\n{one.user}", one.answer, 0, 0, 0.0)
        yield score(one.probe.user, one.source, one.probe, "as_sent", as_sent)
        for variant in variants:
            if variant in FOLLOW_UPS or variant in RANKED_FOLLOW_UPS:  # what follows this answer, if anything
                turns = (FOLLOW_UPS[variant](one.system, one.user, as_sent.reply, one.probe.user)
                         if variant in FOLLOW_UPS else
                         RANKED_FOLLOW_UPS[variant](one.system, one.user, as_sent.reply, one.probe.user,
                                                    ranked[id(one)]))  # fmt: skip
                again = as_sent if turns is None else ask_messages(base_url, turns)
                yield score(one.probe.user, one.source, one.probe, variant, again)
                continue
            changed = changed_by(variant, one)
            # A prompt the change leaves as it was keeps its as-sent answer: asking again would only add the
            # server's noise.
            again = as_sent if changed == (one.system, one.user) else ask(base_url, *changed)
            yield score(one.probe.user, one.source, one.probe, variant, again)


def variants_of(data: dict[str, Any]) -> list[str]:
    """The variants a replay's result compares with the prompts as sent (one, in results written before
    ``--variant`` could be given more than once)."""
    return list(data.get("variants") or [data.get("variant", "recall_in_user")])


def summary(rows: Sequence[Scored]) -> dict[str, Any]:
    """Right answers per variant, overall and by source; and the questions whose outcome a variant changed."""
    table: dict[str, Any] = {}
    variants = list(dict.fromkeys(r.condition for r in rows))
    for variant in variants:
        mine = [r for r in rows if r.condition == variant]
        table[variant] = {"n": len(mine), "correct": sum(r.correct for r in mine),
                          "stale": sum(r.stale for r in mine), "leaks": sum(r.leak for r in mine),
                          "by_source": {s: sum(r.correct for r in mine if r.source == s)
                                        for s in sorted({r.source for r in mine})}}  # fmt: skip
    # By person and question: the generated people are asked the same questions.
    before = {(r.user, r.question): r.correct for r in rows if r.condition == "as_sent"}
    moves = [r for r in rows if r.condition != "as_sent" and r.correct != before[(r.user, r.question)]]
    table["variants"] = variants
    table["changed"] = [{"question": r.question, "category": r.category, "now": r.correct, "variant": r.condition}
                        for r in moves]  # fmt: skip
    return table


def markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    variants = variants_of(result["data"])
    title = TITLES[variants[0]] if len(variants) == 1 else "ablations of the reply prompt, side by side"
    changed = " or ".join(dict.fromkeys(CHANGED[v] for v in variants))  # two variants may change the same thing
    lines = [
        f"# Long memory: {title}",
        "",
        f"Transcripts: {', '.join(result['data']['transcripts'])}; re-asked as sent: {result['data']['re_ask']}.",
        f"Same prompts, same model and sampling; only {changed} differs (bench/long_memory/replay.py).",
        *(
            ["As sent: the same prompts asked again by this tool's server (the run's answers are not used)."]
            if result["data"]["re_ask"]
            else [
                "As sent: the run's first answer to each prompt (Quinn asks again when a reply copies the email; a",
                "replay does not).",
            ]
        ),
        *([result["data"]["note"]] if result["data"].get("note") else []),
        "",
        "| variant | questions | right | stale | forget leaks | right by source |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for variant in s.get("variants", ["as_sent", "recall_in_user"]):
        v = s[variant]
        by = ", ".join(f"{k} {n}" for k, n in v["by_source"].items())
        lines.append(
            f"| {variant.replace('_', ' ')} | {v['n']} | {v['correct']} | {v['stale']} | {v['leaks']} | {by} |"
        )
    lines += ["", "Questions whose outcome a change changed:", ""]
    for c in s["changed"]:
        by = f"{c['variant'].replace('_', ' ')}, " if len(variants) > 1 else ""
        lines.append(f"- {'now right' if c['now'] else 'now wrong'} ({by}{c['category']}): {c['question']}")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = run_parser()
    p.prog = "python -m bench.long_memory.replay"
    p.description = __doc__.splitlines()[0]
    p.set_defaults(name="long_memory-replay")
    p.add_argument("--transcript", type=Path, help="the run's calls.jsonl (its --workdir)")
    p.add_argument("--re-ask", action="store_true", help="ask the as-sent prompts again too")
    p.add_argument(
        "--variant",
        choices=sorted([*CHANGES, *FOLLOW_UPS, *RANKED, *RANKED_FOLLOW_UPS]),
        action="append",
        help="a change to each prompt, asked beside the prompt as sent; give it again to compare several in one "
        "server start (default: recall_in_user)",
    )
    p.add_argument("--db", type=Path, help="the run's quinn.db (its --workdir), for the variants by Quinn's ranking")
    return p


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = parser()
    args = p.parse_args(argv)
    apply_part(p, args)
    args.no_plot = True  # a table of two rows says it
    if args.merge:
        parts = [read_part(p, path, "long_memory_replay") for path in args.merge]
        rows = [Scored(**row) for part in parts for row in part["rows"]]
        compared = {tuple(variants_of(part["data"])) for part in parts}
        if len(compared) > 1:
            named = "; ".join(", ".join(v) for v in sorted(compared))
            raise ReplayError(f"--merge: the parts replay different variants ({named}); merge the parts of the "
                              "same variants at a time")  # fmt: skip
        data = {"transcripts": [t for part in parts for t in part["data"]["transcripts"]],
                "re_ask": all(part["data"]["re_ask"] for part in parts), "variants": list(compared.pop())}  # fmt: skip
        result = {"benchmark": "long_memory_replay", "machine": parts[0]["machine"], "model": parts[0]["model"],
                  "data": data, "summary": summary(rows), "rows": [asdict(r) for r in rows]}  # fmt: skip
        return write_result(args, result, markdown, None)
    if args.transcript is None or not args.transcript.is_file():
        raise ReplayError(f"--transcript {args.transcript}: no such file; give the calls.jsonl of a run made with "
                          "--workdir")  # fmt: skip
    try:
        calls = [json.loads(line) for line in args.transcript.read_text(encoding="utf-8").splitlines() if line]
    except json.JSONDecodeError as exc:
        raise ReplayError(f"--transcript {args.transcript}: line {exc.lineno} is not JSON ({exc.msg})") from None
    sent = quinn_prompts(calls, people_of(args))
    variants = list(dict.fromkeys(args.variant or ["recall_in_user"]))
    ranked = any(v in RANKED or v in RANKED_FOLLOW_UPS for v in variants)
    rankings = rank(args.db, sent) if ranked and args.db is not None else []
    with model_target(args.base_url, args.n_ctx, args.model, args.threads) as target:
        rows = list(replay(sent, f"http://{target.host}:{target.port}", args.re_ask, variants, rankings))
    result = {"benchmark": "long_memory_replay", "machine": machine_info(), "model": {"name": args.model},
              "data": {"transcripts": [str(args.transcript)], "re_ask": args.re_ask, "variants": variants},
              "summary": summary(rows), "rows": [asdict(r) for r in rows]}  # fmt: skip
    return write_result(args, result, markdown, None)


if __name__ == "__main__":
    main()
