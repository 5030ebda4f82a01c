"""Updates decided in code (issue 32): a new value of the same thing supersedes the old one even when the model
filed it as new.

Each extracted memory names the attribute it states (``about``: "home city", "employer", "diet"). A "new" memory
whose key equals the key of one of the user's current memories becomes a new version of that memory, so "Alice
lives in Porto" closes "Alice lives in Lisbon" although the small model never said it was an update. Single-valued
kinds (fact, personal, context, identity) match on the normalised key; list-like kinds (a preference, a goal,
anything else: a person may hold several at once) only on exactly the same key and type. Pure: data in, data out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

SINGLE_VALUED = frozenset({"fact", "personal", "context", "identity"})
ABOUT_CHARS = 60  # a key is a short noun phrase; a longer one is cut (the model's text is data)
# Words that do not change which attribute is meant ("my home city" is "home city").
_FILLER = frozenset({"a", "an", "the", "my", "his", "her", "their", "its", "our", "your", "of", "current", "new"})
# Keys that name no attribute: two memories "about" these are not the same thing.
VAGUE = frozenset({
    "", "fact", "facts", "info", "information", "other", "misc", "general", "detail", "details", "note", "notes",
    "personal", "preference", "preferences", "goal", "goals", "context", "news", "update", "identity", "person",
})  # fmt: skip


def clean_about(about: str | None) -> str:
    """The key as stored: lower case, spaces folded, at most ``ABOUT_CHARS`` characters; "" for none."""
    return " ".join((about or "").lower().split())[:ABOUT_CHARS].strip()


def normalise_about(about: str | None) -> str:
    """The key compared for single-valued kinds: words only, without fillers ("My home-city" -> "home city");
    "" when it names no attribute (``VAGUE``)."""
    words = [w for w in re.findall(r"[^\W_]+", clean_about(about)) if w not in _FILLER]
    key = " ".join(words)
    return "" if key in VAGUE else key


def same_attribute(new_type: str, new_about: str | None, old_type: str, old_about: str | None) -> bool:
    """Whether a new memory states the same attribute as an old one, so the new value replaces the old."""
    new_key, old_key = normalise_about(new_about), normalise_about(old_about)
    if not new_key or new_key != old_key:
        return False
    if new_type in SINGLE_VALUED and old_type in SINGLE_VALUED:
        return True
    return new_type == old_type and clean_about(new_about) == clean_about(old_about)


def superseded(
    new: Sequence[tuple[str, str | None]],
    current: Sequence[tuple[int, str, str | None]],
    taken: Sequence[int] = (),
    near: Sequence[Callable[[int], bool]] | None = None,
) -> list[int | None]:
    """For each new memory (type, about), the id of the current memory (id, type, about) it replaces, or None.

    ``current`` is newest first; the newest match wins. A memory already changed (``taken``: the model's own
    updates) or replaced by an earlier new memory of the batch is not replaced twice. ``near``, one per new
    memory: whether a current memory (by id) is near it in meaning; a key shared with one that is not names no
    attribute they share (the small model's "location" for a school play and for a home city).
    """
    used = set(taken)
    found: list[int | None] = []
    for i, (new_type, new_about) in enumerate(new):
        match = next(
            (mid for mid, old_type, old_about in current
             if mid not in used and same_attribute(new_type, new_about, old_type, old_about)
             and (near is None or near[i](mid))),
            None,
        )  # fmt: skip
        if match is not None:
            used.add(match)
        found.append(match)
    return found
