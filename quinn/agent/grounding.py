"""Whether a memory is the person's own: what extraction stores must stand on the person's words.

Seen with the 0.5B model in every memory QA run: asked what a mail teaches about the person, it answered the
mail's request instead ("Organize a small birthday party at home by planning the seating arrangement, ..."
stored as the person's preference), stored its own refusal ("I'm sorry, but I can't assist with that.") as a
personal fact, copied the mail's question ("Could you help me write a polite note ...?"), and answered a
question the person asked with an invented value ("The car I bought to replace the old one is a BMW.", from
"What brand is the car I bought ...?"). The session review sees Quinn's replies too, so it can file Quinn's
advice under what the person said. Each such memory reaches every later prompt as something the person said.

``grounded`` keeps, of a memory's sentences, those that
* are statements: a question is not something the person told, nor a list's lead-in ("To save a little money
  each month, consider the following habits:");
* do not talk to the reader or about Quinn: a sentence with "you", "Quinn" or "the assistant" that does not
  name the person is advice, small talk or Quinn's doing ("To save money, you can start by ...", "I hope this
  helps you", "The assistant suggested creating a budget"); a memory names the person (the extract template
  asks for "Alice prefers ...");
* bring no name or number of their own: every capitalised word inside the sentence and every number is in the
  person's text. Years, months and weekdays may be the extractor's normalising, and so may a date ("2026-09-04",
  "4 September") when the person named a time ("until Friday", "next week", "in March"): a date answered to
  "When is my appointment?" is invented;
* have most (``SUPPORT``) of their content words in the person's text, as the word, a word sharing its first
  ``PREFIX`` letters ("organize" finds "organise", "prefers" "preferred"), or the word plus or less an ending
  ("keeps" finds "keep"); a sentence in the form a memory takes, naming the person ("Alice wants to finish her
  thesis draft" from "still working on my thesis"), needs one such word: it is about something they said, in
  the extractor's words, and what it cannot invent (names, numbers) is checked above. Advice, copies and
  refusals name nobody.
The person's names, Quinn's and words for "the user" are not counted. The figures are set by what they mean
(most of the words; a stem), not fitted to a data set. What is left of the memory is stored; a memory with
nothing left is dropped, with a log line naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from quinn.memory import content_words

ANSWER_WORDS = 1  # words a sentence standing on the person's questions may add besides INTENT ("save" of "saving")
#: What a question tells of the person: that they want, plan, need or ask about something. A memory standing on
#: their question may say so in these words; any other word it adds is an answer to the question.
INTENT = frozenset(
    "want wants wanted wanting plan plans planned planning need needs needed hope hopes hoping wish wishes ask "
    "asks asked asking interested looking considering thinking trying curious wondering like would".split()
)
SUPPORT = 0.5  # the share of a sentence's content words the person's own text must hold (unless it names them)
PRONOUNS = frozenset({"he", "she", "him", "her", "hers", "his", "its", "own"})
PREFIX = 5  # letters two forms of a word share ("organize"/"organise", "answers"/"answer")
ROOT, ENDING = 4, 3  # or one is the other plus an ending of up to 3 letters on a root of 4 ("keep"/"keeps")
PERSON = frozenset({"user", "person", "sender"})  # how a memory may call the person, besides their names
ASSISTANT = frozenset({"assistant", "quinn"})  # a sentence about Quinn alone is not about the person
GENERIC = PERSON | ASSISTANT
CALENDAR = frozenset(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday".split()
)
NUMBER_WORDS = {w: str(n) for n, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {w: str(n) for n, w in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split(), start=1)}  # fmt: skip
YOU = frozenset({"you", "your", "yours", "yourself", "you're", "you'll", "you've", "you'd"})
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)
_NUMBER = re.compile(r"\d+")
_ISO_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:T[\d:.+Z-]*)?")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAY_OF_MONTH = re.compile(
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b|\b(?:{_MONTHS})\s+\d{{1,2}}", re.I
)
WHEN = CALENDAR | {"today", "tonight", "tomorrow", "yesterday", "week", "weekend", "month", "year", "days"}


@dataclass(frozen=True)
class Grounding:
    """The person's own words a memory must stand on, and the names a memory may call them (and Quinn) by."""

    text: str
    names: frozenset[str] = frozenset()
    aliases: tuple[str, ...] = ()  # the names and addresses as written: a memory may call them so

    @classmethod
    def of(cls, texts: Iterable[str], names: Iterable[str]) -> Grounding:
        """From the person's texts and their names or addresses ("Alice Example", "alice.ex@example.org")."""
        written = tuple(sorted({n.strip() for n in names if n.strip()}, key=len, reverse=True))
        parts = {p.lower() for n in written for p in re.split(r"[\W_]+", n.split("@")[0])}
        return cls("\n".join(texts), frozenset(p for p in parts if len(p) > 1 and p.isalpha()), written)


@dataclass(frozen=True)
class _Own:
    """What the person's text holds: its content words (and their stems), all its words, and its numbers."""

    words: frozenset[str]
    stems: frozenset[str]  # first PREFIX letters of the longer words, and each word less an ending (<= 3 letters)
    every: frozenset[str]
    numbers: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Own:
        words = frozenset(_base(w) for w in content_words(text))
        every = frozenset(_base(m.group(0).lower()) for m in _WORD.finditer(text))
        numbers = {n.lstrip("0") or "0" for n in _NUMBER.findall(text)}
        numbers |= {NUMBER_WORDS[w] for w in every if w in NUMBER_WORDS}
        stems = {w[:PREFIX] for w in words if len(w) >= PREFIX} | {w[:k] for w in words for k in _cuts(w)}
        return cls(words, frozenset(stems), every, frozenset(numbers))


def _cuts(word: str) -> range:
    """Where ``word`` may end without its ending: "keeps" -> "keep", "cooking" -> "cook" (4 letters at least)."""
    return range(max(ROOT, len(word) - ENDING), len(word))


def _same_word(word: str, own: _Own) -> bool:
    """``word`` is in ``own``: as it is, by its first PREFIX letters, or one of the two is the other plus an
    ending ("keeps"/"keep", "moved"/"move", "answers"/"answer")."""
    if word in own.words or word in own.stems or (len(word) >= PREFIX and word[:PREFIX] in own.stems):
        return True
    return any(word[:k] in own.words for k in _cuts(word))


def _base(word: str) -> str:
    """A word without a possessive ("alice's" -> "alice")."""
    return re.sub(r"['’]s$", "", word)


def _new_specifics(sentence: str, own: _Own, names: frozenset[str]) -> list[str]:
    """Names and numbers in ``sentence`` that the person's text does not hold."""
    found = []
    if own.every & WHEN:  # the person named a time: a date the extractor resolved ("until Friday") is theirs
        sentence = _DAY_OF_MONTH.sub(" ", _ISO_DATE.sub(" ", sentence))
    for number in _NUMBER.findall(sentence):
        value = number.lstrip("0") or "0"
        if value not in own.numbers and not (len(number) == 4 and 1900 <= int(number) <= 2199):
            found.append(number)
    words = list(_WORD.finditer(sentence))
    for match in words[1:]:  # the first word of a sentence is capitalised anyway
        word = match.group(0)
        lowered = _base(word.lower())
        named = word[0].isupper() and word not in ("I", "I'm") and lowered not in CALENDAR | names | GENERIC
        if named and lowered not in own.every:
            found.append(word)
    return found


def supported(sentence: str, own: _Own, names: frozenset[str]) -> bool:
    """Whether ``sentence`` is a statement of the person's that their text supports (see the module's rules)."""
    if sentence.rstrip().endswith(("?", ":")):  # a question, or a list's lead-in ("consider the following:")
        return False
    lowered = {_base(m.group(0).lower()) for m in _WORD.finditer(sentence)}
    named = bool((names | PERSON) & lowered)
    if (YOU | ASSISTANT) & lowered and not named:
        return False
    if _new_specifics(sentence, own, names):
        return False
    words = [
        w
        for w in (_base(w) for w in content_words(sentence))
        if w not in names and w not in GENERIC and w not in PRONOUNS and not any(c.isdigit() for c in w)
    ]  # numbers: checked above
    if not words:
        return False
    found = sum(1 for w in words if _same_word(w, own))
    return found >= (1 if named else SUPPORT * len(words))


def grounded(content: str, grounding: Grounding, also: str = "") -> str:
    """``content`` cut to its sentences the person's words support ("" when none is). ``also``: more text a
    sentence may stand on (an updated memory's old wording).

    A sentence that stands only with the words of the person's questions may add at most ``ANSWER_WORDS`` of its
    own besides ``INTENT`` ("wants"): "Maren wants to save a little money" from "What are some good habits for
    saving a little money?" is theirs; "I should pack a raincoat and a jacket for the weekend of hiking in
    changeable weather" from "What should I pack for a weekend of hiking in changeable weather?" is the model's
    answer (the 1.5B pilot of bench/long_memory stored such answers as facts, again after each mail that asked)."""
    everything = _Own.of(f"{grounding.text}\n{also}")
    stated = _Own.of("\n".join([*_statements(grounding.text), also]))

    def kept(sentence: str) -> bool:
        named = _named(sentence, grounding)
        if supported(named, stated, grounding.names):
            return True
        return supported(named, everything, grounding.names) and _added(named, everything, grounding.names) <= (
            ANSWER_WORDS
        )

    sentences = _SENTENCE.split(content.strip())
    return " ".join(s for s in sentences if s and kept(s)).strip()


def _statements(text: str) -> list[str]:
    """The sentences of ``text`` that are not questions."""
    return [
        s for line in text.splitlines() for s in _SENTENCE.split(line) if s.strip() and not s.rstrip().endswith("?")
    ]


def _added(sentence: str, own: _Own, names: frozenset[str]) -> int:
    """How many content words of ``sentence`` the person's text does not hold (their names aside)."""
    words = {_base(w) for w in content_words(sentence)} - names - GENERIC - PRONOUNS - INTENT
    return sum(1 for w in words if not any(c.isdigit() for c in w) and not _same_word(w, own))


def _named(sentence: str, grounding: Grounding) -> str:
    """``sentence`` with the person's address or full name, as written, read as "user": the digits of
    "bob-4d2f@example.org" are no number the memory invented."""
    for alias in grounding.aliases:
        sentence = re.sub(re.escape(alias), "user", sentence, flags=re.I)
    return sentence


def mentioned(content: str, grounding: Grounding) -> bool:
    """Whether the person's text holds a content word of ``content`` (as the word, its stem or an ending; their
    names aside): a memory the model forgets on their behalf must be one their mail is about (the 1.5B pilot,
    asked to "forget that I grew up in Ericeira", forgot "I have been trying to walk more ..." by a made-up id)."""
    own = _Own.of(grounding.text)
    words = {_base(w) for w in content_words(_named(content, grounding))} - grounding.names - GENERIC - PRONOUNS
    return any(_same_word(w, own) for w in words)


GUESSES_SHOWN = 8  # names a note back to the model lists at most
#: Words that make a sentence a suggestion rather than a statement of fact ("You could visit the Van Gogh Museum").
SUGGESTING = frozenset("can could might may should try consider recommend suggest perhaps maybe".split())
#: Words that make a sentence about someone on the mail: the person ("you", or "I" as a small model writes for
#: them) or Quinn.
PERSONAL = YOU | frozenset({"i", "i'm", "i've", "i'd", "i'll", "me", "my", "mine", "myself", "we", "we're", "us",
                            "our", "ours"})  # fmt: skip
#: Where a sentence or a clause opens ("Exercise regularly: Regular activity helps" opens twice); not after a title.
_CLAUSE = re.compile(r"(?<!Dr\.)(?<!Mr\.)(?<!Ms\.)(?<!Mrs\.)(?<!St\.)(?<=[.!?:;])\s+(?=\S)")
#: A name of several words: capitalised words (a title's full stop kept), "of", "de", "van" ... between them.
_NAME = re.compile(r"[A-Z][\w'’-]*(?:\.(?= [A-Z]))?(?:\s+(?:(?:of|the|de|da|del|van|von|la|le)\s+)?[A-Z][\w'’-]*)*")
_LIST_MARK = re.compile(r"^\s*(?:[-*•>]|\d{1,2}[.)])\s+")  # a list's "- ", "2. ": the word after it opens the line


def guessed(reply: str, given: str, people: Iterable[str] = ()) -> list[str]:
    """The names and numbers of ``reply`` that nothing in ``given`` (everything the model was sent) holds, at
    most ``GUESSES_SHOWN`` of them, each once: what a reply brings of its own. Issue 32, bench/long_memory with
    the 1.5B model: asked about what the person never said, or had asked Quinn to forget, it answered "Dr.
    Smith", "Bank of America", "a Toyota Camry".

    A word counts as ``_new_specifics`` counts it for a memory (not "I", months, weekdays, years; a possessive
    as its word, "Ross's"); a capitalised word opening a sentence, a line, a list's item or what follows a
    colon is not a name. Only a sentence about someone on the mail counts (``PERSONAL``: "your dentist", "my
    car", "I have my savings account", as the small model writes in the person's voice; or one of ``people``,
    their names in lower case: "Ross's crush"). "The capital of Australia is Canberra" is nobody's fact to
    guess (told of its names, the 1.5B took back even that), and a suggestion is no fact (``SUGGESTING``: "you
    could see it at the Van Gogh Museum", which it also took back). A name is shown whole, with the capitalised
    words around the new one ("Bank of America", though the prompt says "bank")."""
    own = _Own.of(given)
    named = frozenset(p.lower() for p in people)
    found: dict[str, None] = {}
    for line in reply.splitlines():
        for sentence in _CLAUSE.split(_LIST_MARK.sub("", line)):
            words = {_base(w.lower()) for w in _WORD.findall(sentence)}
            if not (PERSONAL | named) & words or SUGGESTING & words:
                continue  # "The capital of Australia is Canberra", "You could see them at ...": no one's fact
            new = _new_specifics(sentence, own, frozenset())
            first = _WORD.search(sentence)
            for match in _NAME.finditer(sentence):
                name = match.group(0)
                if first and match.start() == first.start() and first.group(0) not in new:
                    name = name[len(first.group(0)) :].lstrip(". ")  # "Hi Ana": "Hi" opens the sentence, no name
                in_name = set(_WORD.findall(name))
                if in_name.intersection(new):
                    found.setdefault(_base(name), None)
                    new = [w for w in new if w not in in_name]
            for rest in new:  # numbers, and a name's word the pattern does not see
                found.setdefault(_base(rest), None)
    return list(found)[:GUESSES_SHOWN]
