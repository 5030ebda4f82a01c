"""Learning from the person's own words, with no model call (issue 32, ``[memory] learn = "own_words"``).

Each statement the person makes in their mail becomes one memory, in their words and dated by the mail. Seen in
the 1.5B run of bench/long_memory (bench/results/long_memory-1.5b-part1.md): asked what a mail teaches, the small
model stored small talk and the mail's question mixed ("Ingrid plans to spend a rainy Saturday in the city by
booking a table at the Georgian place" from "We live in Split now, and I take the train to work"), and the
allergy, the brother, the move and the city never became memories. Their own sentences hold every fact they
told, and recall ranks a single line well on real conversations (issue 31, bench/results/real_recall.md): a
memory that is their sentence can only be as wrong as what they wrote.

``statements`` keeps, of the mail's own text (quotes and signature already stripped, memory commands taken
out by ``memory_mail.learnable_text``), the sentences that tell something:
* not a greeting or sign-off ("Hi Quinn,", "Best, Ingrid"): the greeting before a sentence on the same line is
  cut from it;
* not a question, and not a request to the reader ("Could you …", "Please keep it short."): a sentence with
  "you" or "your" talks to Quinn. A request that sets a standing preference ("Please always answer in German")
  is kept. "you know" is spoken filler, not talk to Quinn ("Well, you know my dad left, and my mother died.");
* with at least ``MIN_WORDS`` content words of letters ("Thanks again." or a date alone tells nothing);
* at most ``MAX_CHARS`` long (a longer one is cut at a word) and at most ``MAX_STATEMENTS`` per mail (the first).
What happens next is what happens to any extraction (``extract.apply_extraction``): secrets masked unless the
person asked to keep them, data of a sensitive shape made private, a sentence said again restated as a new
version of the old memory (its date moves; nothing is duplicated), "forget" reaching every version.

A new value supersedes the old one in code (``changes``), as the issue asks, not by a model: a statement that says
something changed (a word of ``CHANGE``: "moved", "left", "now", "new", "no longer", …) replaces the person's
statement nearest it in meaning when the two are about one thing: they share a name or number ("Bashir",
"Split", "Tuesday") or ``ANCHORS`` content words ("pottery class"). One common word is not enough: in the
1.5B run "We live in Split now, and I take the train to work" replaced "Work has been hectic" by "work" alone.
"Bashir has left the company, so Nikolai is my manager now." replaces "My manager, Bashir, is great at
keeping meetings short."; the prompt then shows the old one as "earlier: … (until DATE)". Seen in the 1.5B run
with both shown as current, oldest first: the small model answered the old manager, class and city every time.
A statement the cue words miss stays beside the old one, both dated; one they wrongly catch moves the old
statement to "earlier" (still shown, still in history), never away.
"""

from __future__ import annotations

import logging
import re
from datetime import datetime

from quinn.agent.extract import (
    DUPLICATE_SIMILARITY,
    Applied,
    ChangedMemory,
    ExtractedMemory,
    Extraction,
    ExtractionOutcome,
    apply_extraction,
)
from quinn.agent.grounding import YOU
from quinn.mailbox import InboundEmail
from quinn.memory import MemoryStore, asked_to_keep, content_words, find_similar, stem

log = logging.getLogger(__name__)

MIN_WORDS = 3  # content words a sentence needs to tell something
MAX_CHARS = 400  # a longer sentence (a wall of text without stops) is cut at a word
MAX_STATEMENTS = 40  # statements kept of one mail, the first: bounded whatever a mail holds
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_GREETING = re.compile(
    r"^(?:(?:hi|hello|hey|dear|greetings|good\s+(?:morning|afternoon|evening))(?:\s+(?:again|there|all))?"
    r"(?:\s+[\w.'-]+){0,2}\s*[,!:]|(?:hi|hello|hey)\s+again\b[,!]?)\s*",
    re.IGNORECASE,
)
_SIGN_OFF = re.compile(
    r"^(?:thanks|thank\s+you|many\s+thanks|cheers|best|regards|best\s+regards|kind\s+regards|warm\s+regards|"
    r"all\s+the\s+best|yours|sincerely|take\s+care|talk\s+soon)\b[\s\w,.!-]{0,40}$",
    re.IGNORECASE,
)
_REQUEST = re.compile(r"^(?:please|pls|kindly|could|can|would|will|let\s+me\s+know)\b", re.IGNORECASE)
_STANDING = re.compile(r"\b(?:always|never|from\s+now\s+on|in\s+future|in\s+the\s+future|every\s+time)\b", re.I)
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_FILLER = re.compile(r"\byou\s+know\b", re.IGNORECASE)  # "you know" as in speech: no "you" that asks anything
#: Words that say a statement changes what was true before: "moved", "left", "now", "new", "no longer", "instead".
CHANGE = frozenset(
    "now moved move moves moving left leaving changed changes switched new longer anymore instead replaced".split()
)
ANCHORS = 2  # content words two statements share to be about one thing, unless one is a name or number


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that state something (see the module's rules), in order, each once."""
    kept: list[str] = []
    seen: set[str] = set()
    for line in text.splitlines():
        line = _GREETING.sub("", line.strip(), count=1).strip()
        for sentence in _SENTENCE.split(line):
            sentence = _cut(sentence.strip())
            key = " ".join(sentence.lower().split())
            if key in seen or not _tells(sentence):
                continue
            seen.add(key)
            kept.append(sentence)
            if len(kept) == MAX_STATEMENTS:
                return kept
    return kept


def _tells(sentence: str) -> bool:
    if not sentence or sentence.endswith(("?", ":")) or _SIGN_OFF.match(sentence):
        return False
    words = {m.group(0).lower() for m in _WORD.finditer(_FILLER.sub("", sentence))}
    standing = bool(_STANDING.search(sentence))
    if (words & YOU or _REQUEST.match(sentence)) and not standing:
        return False
    return sum(1 for w in content_words(sentence) if any(c.isalpha() for c in w)) >= MIN_WORDS  # not "[2024-01-09]"


def _cut(sentence: str) -> str:
    if len(sentence) <= MAX_CHARS:
        return sentence
    cut = sentence.rfind(" ", 0, MAX_CHARS)
    return sentence[: cut if cut > 0 else MAX_CHARS].rstrip(" ,;") + " …"


def learn_own_words(store: MemoryStore, user_id: str, email: InboundEmail) -> ExtractionOutcome:
    """Store ``email``'s statements (``statements``) as ``user_id``'s memories, dated by the mail; no model call.
    Runs on the DB thread."""
    found = statements(email.text)
    if not found:
        log.info("learning for %s: no statement of their own in %s", user_id, email.message_id)
        return ExtractionOutcome([], [], None)
    extraction = changes(store, user_id, found)
    source = {
        "source": {
            "message_id": email.message_id, "subject": email.subject,
            "date": email.date.isoformat() if email.date else None,
        },
        "via": "own_words",
    }  # fmt: skip
    valid_from: datetime | str = email.date or ""
    applied: Applied = apply_extraction(store, user_id, extraction, source=source, valid_from=valid_from,
                                        reason=f"own words of {email.message_id}", sent=email.date,
                                        keep_secrets=asked_to_keep(email.text))  # fmt: skip
    log.info("learning for %s: %d statements, %d new, %d restated (own words)", user_id, len(found),
             len(applied.created), len(applied.updated))  # fmt: skip
    return ExtractionOutcome(applied.created, applied.updated, None)


def changes(store: MemoryStore, user_id: str, found: list[str]) -> Extraction:
    """``found`` as an extraction: a statement of change (a ``CHANGE`` word) about the same thing as the person's
    statement nearest it in meaning (a shared name or number, or ``ANCHORS`` shared content words; no
    near-duplicate of it) is that statement's next version; the rest are new. Runs on the DB thread."""
    new: list[ExtractedMemory] = []
    updated: list[ChangedMemory] = []
    aimed: set[int] = set()
    for sentence in found:
        target = _replaced(store, user_id, sentence)
        if target is not None and target not in aimed:
            aimed.add(target)
            updated.append(ChangedMemory(content=sentence, type="fact", confidence="high", id=target))
        else:
            new.append(ExtractedMemory(content=sentence, type="fact", confidence="high"))
    return Extraction(new=new, updated=updated)


def _replaced(store: MemoryStore, user_id: str, sentence: str) -> int | None:
    """The id of the person's statement that ``sentence`` says has changed, if any (see ``changes``)."""
    words = {m.group(0).lower() for m in _WORD.finditer(sentence)}
    if not words & CHANGE:
        return None
    hits = find_similar(store, user_id, sentence, -1.0)
    if not hits or hits[0].score >= DUPLICATE_SIMILARITY:  # nothing to replace, or the same thing said again
        return None
    nearest = hits[0].memory
    if nearest.immutable or not nearest.in_their_words:
        return None
    anchors = _stems(sentence) & _stems(nearest.content)
    named = anchors & (_names(sentence) | _names(nearest.content))
    return nearest.id if len(anchors) >= ANCHORS or named else None


def _stems(text: str) -> set[str]:
    """The stemmed content words of ``text`` that are no words of change."""
    return {stem(w) for w in content_words(text) if w not in CHANGE}


def _names(text: str) -> set[str]:
    """The stems of ``text``'s names and numbers: a capitalised word not opening a sentence ("Bashir", "Split",
    "Tuesday"), or one with a digit."""
    found = set()
    for sentence in _SENTENCE.split(text):
        for i, match in enumerate(_WORD.finditer(sentence)):
            word = match.group(0)
            if any(c.isdigit() for c in word) or (i > 0 and word[0].isupper() and word != "I"):
                found.add(stem(word.lower()))
    return found
