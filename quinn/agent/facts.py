"""One fact per memory (issue 35): a sentence the model wrote about several facts of the person, split (pure).

A 1.5B model merged "lives in Lisbon, has a dog called Biscuit, allergic to peanuts" into one memory, so a later
"forget that I have a dog" or "I moved to Porto" touched all three. Extraction now stores each fact on its own.
Only the clear case is split: a sentence whose subject is a name ("Alice …") and whose clauses after the first,
joined by commas, semicolons, "and" or "but", each start with a verb of that subject ("has a dog", "is allergic
to …") or with a subject of their own ("Bob lives in Porto"). "Alice likes tea and coffee" stays whole: "coffee"
is no clause.
"""

from __future__ import annotations

import re

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=\S)")
# Each alternative starts where a whitespace run starts (or at the comma): unanchored, "\s*," retried at every
# space of a long run was quadratic (16,000 spaces: 7 s) on a stranger's text.
_CLAUSE = re.compile(r"(?:(?<!\s)\s+)?[,;]\s*(?:and\s+|but\s+)?|(?<!\s)\s+(?:and|but)\s+", re.IGNORECASE)
VERBS = frozenset({"is", "was", "has", "had", "can", "will", "would", "does", "did", "may", "must", "plans",
                   "prefers", "likes", "loves", "hates", "works", "lives", "owns", "wants", "needs", "speaks",
                   "studies", "uses", "drives", "keeps", "takes", "goes", "moved", "started", "joined", "left",
                   "used", "became", "got", "went"})  # fmt: skip
PRONOUNS = frozenset({"He", "She", "They", "It", "I", "We", "You", "This", "That"})


def _starts_with_verb(clause: str) -> bool:
    words = clause.split()
    if len(words) < 2:
        return False
    first = words[0]
    return first in VERBS or (first.islower() and first.endswith("s") and not first.endswith("ss") and len(first) > 3)


def _own_subject(clause: str) -> bool:
    words = clause.split()
    return (
        len(words) >= 3
        and words[0][:1].isupper()
        and words[0] not in PRONOUNS
        and _starts_with_verb(" ".join(words[1:]))
    )


def facts(content: str) -> list[str]:
    """``content`` as one text per fact (itself, whole, when it is one fact or not clearly several)."""
    out: list[str] = []
    for sentence in _SENTENCE.split(content.strip()):
        end = sentence[-1] if sentence[-1:] in ".!?" else "."
        clauses = [c.strip() for c in _CLAUSE.split(sentence.rstrip(".!? ")) if c.strip()]
        subject = clauses[0].split()[0] if clauses else ""
        named = (
            subject[:1].isupper() and subject not in PRONOUNS and _starts_with_verb(" ".join(clauses[0].split()[1:]))
        )
        if len(clauses) < 2 or not named or not all(_starts_with_verb(c) or _own_subject(c) for c in clauses[1:]):
            out.append(sentence)
            continue
        out += [f"{clauses[0]}{end}"] + [f"{c}{end}" if _own_subject(c) else f"{subject} {c}{end}" for c in clauses[1:]]
    return out if len(out) > 1 else [content]
