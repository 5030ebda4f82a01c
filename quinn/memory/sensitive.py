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
# The word and its value: after "is", "was", "=" or ":" anything, also when what it is for comes between ("the
# password for the wifi is …"); otherwise a value with a digit ("PIN 4411").
_CREDENTIAL = re.compile(
    _SECRET_WORDS + r"(?:(?:\s+(?:for|of|to|on|at)(?:\s+[\w'’-]+){1,3}?)?\W{0,3}(?:is|was|=|:)\s*\S+|\s+\S*\d\S*)",
    re.IGNORECASE,
)
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


#: The kinds that are secrets: kept only when the person asks (issue 35), masked everywhere else. Health and the
#: like are kept, private (withheld from shared threads), and not masked: they are what the person told.
SECRETS = frozenset({"iban", "card", "national_id", "credential"})
_ID_VALUE = re.compile(_ID_WORDS.pattern + r"(?:\W{0,3}(?:is|was|=|:))?\s*(?=\S*\d)\S+", re.IGNORECASE)
_TAIL = re.compile(r"(\S+?)([.,;:!?)\]'\"]*)$")
_ASKED = re.compile(
    r"\b(?:remember|keep|save|store|note down|hold on to)\b[^.?!\n]{0,60}?\b(?:iban|password|passphrase|pin|"
    r"passcode|code|card|account|number|passport|licen[cs]e|key|token|it|this|that|them)\b",
    re.IGNORECASE,
)


def _hidden(kind: str) -> str:
    return {"iban": "[IBAN withheld]", "card": "[card number withheld]", "national_id": "[id number withheld]",
            "credential": "[secret withheld]"}[kind]  # fmt: skip


def _last_value(match: re.Match[str], kind: str) -> str:
    """The match with its last word (the value after "password is", "PIN") hidden, its punctuation kept."""
    text = match.group(0)
    tail = _TAIL.search(text)
    if tail is None:
        return text
    return text[: tail.start(1)] + _hidden(kind) + tail.group(2)


def mask(text: str) -> str:
    """``text`` with every secret's value replaced by a note of its kind ("password is [secret withheld]"):
    IBANs and card numbers whose checks hold, national id numbers, and the values of credentials."""
    text = _IBAN.sub(lambda m: _hidden("iban") if iban_ok(m.group(1)) else m.group(0), text)
    upper = text.upper()
    for m in reversed(list(_IBAN.finditer(upper))):  # lower-case IBANs: found on the upper-cased text
        if iban_ok(m.group(1)):
            text = text[: m.start(1)] + _hidden("iban") + text[m.end(1) :]

    def card(m: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", m.group(1))
        ok = 13 <= len(digits) <= 19 and luhn_ok(digits) and len(set(digits)) > 1
        return _hidden("card") if ok else m.group(0)

    text = _CARD.sub(card, text)
    text = _SSN.sub(_hidden("national_id"), text)
    text = _NINO.sub(_hidden("national_id"), text)
    text = _ID_VALUE.sub(lambda m: _last_value(m, "national_id"), text)
    return _CREDENTIAL.sub(lambda m: _last_value(m, "credential"), text)


def asked_to_keep(text: str) -> bool:
    """Whether the person's own text asks Quinn to keep something ("remember my IBAN", "keep it for the
    invoice"): only then is a secret in it kept (private) rather than masked."""
    return bool(_ASKED.search(text))
