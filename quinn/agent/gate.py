"""The sensory gate: cheap heuristics that decide whether a mail is worth an extraction call at all.

"thanks!" or "ok, see you" teach nothing; a personal statement, a named thing, a date or an explicit
"remember" might. The gate only skips mail that shows none of these signals; the decision and its reasons are
logged by the caller, so an operator can see why nothing was learnt from a mail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from quinn.memory import content_words

_PERSONAL = re.compile(r"\b(?:i|i'm|i’m|i've|i’ve|i'd|i’d|i'll|i’ll|my|mine|me|we|we're|our|us)\b", re.IGNORECASE)
_PREFERENCE = re.compile(
    r"\b(?:prefer\w*|like|likes|love|hate|dislike|rather|always|never|usually|please\s+(?:use|write|keep|be|answer)"
    r"|concise|brief|shorter|longer|detail\w*|formal|informal|casual|tone|language)\b",
    re.IGNORECASE,
)
_TEMPORAL = re.compile(
    r"\b(?:today|tomorrow|yesterday|tonight|next|last|until|since|deadline|due|birthday|anniversary|weekend|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|july|"
    r"august|september|october|november|december|week|month|year|\d{1,2}[:/.]\d{1,2}|\d{4})\b",
    re.IGNORECASE,
)
_REMEMBER = re.compile(r"\b(?:remember|don't forget|do not forget|note that|keep in mind)\b", re.IGNORECASE)
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)(?<!\n)\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b")
_SMALL_TALK = frozenset(
    "ok okay thanks thank thx cheers great cool nice perfect good awesome sure fine yes no yep nope bye see "
    "later got it noted appreciated welcome lol haha quinn hi hello hey dear regards best".split()
)
_NOT_NAMES = frozenset({"I", "Quinn", "Hi", "Hello", "Hey", "Dear", "Thanks", "Thank", "Best", "Regards", "Cheers"})
MIN_CONTENT_WORDS = 6


@dataclass(frozen=True)
class GateDecision:
    """Whether to run extraction, and the signals (or their absence) that decided it."""

    passed: bool
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"{'extract' if self.passed else 'skip'} ({', '.join(self.reasons)})"


def sensory_gate(text: str) -> GateDecision:
    """Decide on the clean text of a mail (quotes and signature stripped) whether extraction may find anything."""
    words = content_words(text)
    if not text.strip():
        return GateDecision(False, ("no text of their own",))
    if words <= _SMALL_TALK:
        return GateDecision(False, ("small talk only",))
    reasons: list[str] = []
    if _REMEMBER.search(text):
        reasons.append("asks to remember")
    if _PREFERENCE.search(text):
        reasons.append("preference words")
    if _PERSONAL.search(text) and len(words - _SMALL_TALK) >= 2:
        reasons.append("personal statement")
    if _TEMPORAL.search(text):
        reasons.append("temporal words")
    names = [n for n in _NAME.findall(text) if n.split()[0] not in _NOT_NAMES]
    if names:
        reasons.append(f"names ({', '.join(sorted(set(names))[:3])})")
    if len(words) >= MIN_CONTENT_WORDS:
        reasons.append(f"{len(words)} content words")
    if reasons:
        return GateDecision(True, tuple(reasons))
    return GateDecision(False, (f"trivial: {len(words)} content words, no personal, temporal or named signal",))
