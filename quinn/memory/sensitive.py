"""Sensitive data that must never slip into a shared thread, found by shape rather than by a model's judgement.

The store runs `detect` on every memory it writes (extraction, tools, an explicit "remember", jobs, imports), and
a memory with a finding is private: withheld whenever anyone but its owner is on the thread. The model marks
what it judges private too (``ExtractedMemory.private``); this is the floor under that judgement, for the shapes
that can be recognised without one:

* ``iban``: an IBAN whose ISO 13616 mod-97 check holds;
* ``card``: 13-19 digits (spaces or dashes between groups) that pass the Luhn check;
* ``national_id``: a US social security number, a UK National Insurance number, or a number introduced as a
  passport, ID card, licence, tax or social security number;
* ``credential``: a password, PIN, passcode, security/verification/one-time code, API key or code word followed
  by its value;
* ``health``: words of diagnosis, treatment and conditions (GDPR art. 9 treats health data as special).

Pure functions, no I/O. False positives cost little (a fact withheld from a group thread); false negatives leak.
"""

from __future__ import annotations

import re

_IBAN = re.compile(r"\b([A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?)\b")
_CARD = re.compile(r"(?<![\d-])(\d(?:[ -]?\d){12,18})(?![\d-])")
_SSN = re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")
_NINO = re.compile(r"\b(?![DFIQUV])[A-Z](?![DFIQUVO])[A-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b")
_ID_WORDS = re.compile(
    r"\b(?:passport|id[ -]?card|identity card|driv(?:er'?s|ing) licen[cs]e|licen[cs]e|social security|"
    r"national insurance|ni|tax(?:payer)?|personal identification|residence permit|visa)\s*(?:number|no\.?|#|id)\b",
    re.IGNORECASE,
)
_SECRET_WORDS = (
    r"\b(?:password|passphrase|passcode|pass code|pin(?: code| number)?|security code|verification code|"
    r"one[- ]time code|otp|2fa code|api[ -]?key|access token|secret key|code ?word|safe combination|"
    r"alarm code|door code|wifi key)\b"
)
# The word and its value: after "is", "was", "=" or ":" anything; otherwise a value with a digit ("PIN 4411").
_CREDENTIAL = re.compile(_SECRET_WORDS + r"(?:\W{0,3}(?:is|was|=|:)\s*\S+|\s+\S*\d\S*)", re.IGNORECASE)
_HEALTH = re.compile(
    r"\b(?:diagnos\w*|prescri\w*|medication|medicine|antidepressant\w*|chemo\w*|therap(?:y|ist)|"
    r"psychiatr\w*|psycholog\w*|depress(?:ion|ed)|anxiety|panic attacks?|bipolar|adhd|autis\w*|cancer|tumou?r|"
    r"diabet\w*|hiv|aids|hepatitis|epilep\w*|asthma|allerg\w*|pregnan\w*|miscarri\w*|ivf|surgery|operation on|"
    r"blood pressure|insulin|rehab|addiction|alcoholi\w*|disorder|disabilit\w*|illness|chronic|"
    r"in (?:the )?hospital|doctor'?s? (?:said|appointment)|gp appointment|sick leave)\b",
    re.IGNORECASE,
)


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a card number (digits only)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def iban_ok(candidate: str) -> bool:
    """The ISO 13616 check: move the first four characters to the end, letters to numbers, mod 97 == 1."""
    text = candidate.replace(" ", "").upper()
    if not 15 <= len(text) <= 34:
        return False
    moved = text[4:] + text[:4]
    number = "".join(str(int(c, 36)) for c in moved)
    return int(number) % 97 == 1


def detect(text: str) -> tuple[str, ...]:
    """The kinds of sensitive data in ``text``, sorted; empty when none is recognised."""
    found: set[str] = set()
    if any(iban_ok(m.group(1)) for m in _IBAN.finditer(text.upper())):
        found.add("iban")
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group(1))
        if 13 <= len(digits) <= 19 and luhn_ok(digits) and len(set(digits)) > 1:
            found.add("card")
            break
    if _SSN.search(text) or _NINO.search(text) or _ID_WORDS.search(text):
        found.add("national_id")
    if _CREDENTIAL.search(text):
        found.add("credential")
    if _HEALTH.search(text):
        found.add("health")
    return tuple(sorted(found))
