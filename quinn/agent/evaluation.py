"""Extraction quality on a labelled set: precision, recall, hallucination rate and duplicate rate.

Each case (one JSON object per line) is an email, the memories the user already has, and labels:

- ``expected``: memories that should come out, each ``{"must": [...]}``: every entry must occur in the
  extracted sentence (case-insensitive; ``"a|b"`` accepts either spelling);
- ``already_known``: facts the existing memories hold; a new memory restating one is a duplicate;
- ``forbidden``: words that must not appear in any memory (quoted text of others, invented details).

A prediction is correct when it matches an expected memory not matched before. It is a hallucination when it
names a forbidden word or most of its words have no support in the email or the existing memories (compared by
5-letter stems, so "prefers" is supported by "prefer"). It is a duplicate when it restates something already
known or an expected memory matched by an earlier prediction. The same prompts, gate, model call and cut to the
person's own words (agent/grounding.py) as the daemon are used, so the harness runs unchanged against the
scripted test server or a real provider and scores what Quinn would store. (The hallucination test and the cut
both ask for support in the email, so the cut lowers that rate partly by construction; precision, recall and
duplicates are the labels'.)
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from quinn.agent.extract import Extraction, extract_variables, own_words_only
from quinn.agent.gate import sensory_gate
from quinn.agent.grounding import Grounding
from quinn.agent.llm import LLM, Usage
from quinn.agent.prompts import PromptStore
from quinn.agent.samples import sample_memory
from quinn.errors import ConfigError
from quinn.mailbox import Address, InboundEmail
from quinn.memory import content_words

log = logging.getLogger(__name__)

SUPPORT_MIN = 0.5
STEM = 5


@dataclass
class CaseResult:
    """What one case produced and how it scored."""

    case_id: str
    predicted: list[str] = field(default_factory=list)
    correct: int = 0
    expected: int = 0
    matched_expected: int = 0
    hallucinated: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    gated: bool = False


@dataclass
class Report:
    """The scores over all cases."""

    cases: list[CaseResult]
    usage: Usage

    def _sum(self, attr: str) -> int:
        return sum(len(v) if isinstance(v := getattr(c, attr), list) else int(v) for c in self.cases)

    @property
    def predicted(self) -> int:
        """Memories extracted in all."""
        return self._sum("predicted")

    @property
    def precision(self) -> float:
        """Share of extracted memories that match an expected one."""
        return self._sum("correct") / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        """Share of expected memories that were extracted."""
        expected = self._sum("expected")
        return self._sum("matched_expected") / expected if expected else 1.0

    @property
    def hallucination_rate(self) -> float:
        """Share of extracted memories with no support in the email or the existing memories."""
        return self._sum("hallucinated") / self.predicted if self.predicted else 0.0

    @property
    def duplicate_rate(self) -> float:
        """Share of extracted memories that restate something already known or already extracted."""
        return self._sum("duplicates") / self.predicted if self.predicted else 0.0

    def table(self) -> str:
        """The printed report."""
        lines = [
            f"cases {len(self.cases)}, gate skipped {sum(c.gated for c in self.cases)}, extracted {self.predicted}, "
            f"expected {self._sum('expected')}, model {self.usage.model}, tokens {self.usage.input_tokens} in / "
            f"{self.usage.output_tokens} out",
            f"precision           {self.precision:.2f}",
            f"recall              {self.recall:.2f}",
            f"hallucination rate  {self.hallucination_rate:.2f}",
            f"duplicate rate      {self.duplicate_rate:.2f}",
        ]
        for case in self.cases:
            notes = [f"missed {m!r}" for m in case.missed]
            notes += [f"hallucinated {h!r}" for h in case.hallucinated]
            notes += [f"duplicate {d!r}" for d in case.duplicates]
            if notes:
                lines.append(f"  {case.case_id}: " + "; ".join(notes))
        return "\n".join(lines)


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The labelled cases of a JSONL file; a malformed line is a ConfigError naming it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"eval data {path} cannot be read: {exc}", "pass --data with a JSONL file") from None
    cases = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = json.loads(line)
            _required = (case["id"], case["email"]["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ConfigError(f"{path}:{number}: not a case ({exc})", "each line needs id and email.text") from None
        cases.append(case)
    return cases


def _matches(content: str, must: list[str]) -> bool:
    text = content.lower()
    return all(any(alt.strip().lower() in text for alt in term.split("|")) for term in must)


def _stems(text: str) -> set[str]:
    return {w[:STEM] for w in content_words(text)}


def score_case(case: dict[str, Any], predicted: list[str], user_name: str) -> CaseResult:
    """Score one case's extracted sentences against its labels."""
    result = CaseResult(case["id"], list(predicted), expected=len(case.get("expected", [])))
    expected = [e["must"] for e in case.get("expected", [])]
    known = [k["must"] for k in case.get("already_known", [])]
    support = _stems(case["email"]["text"] + " " + case["email"].get("subject", "") + " " + user_name)
    for memory in case.get("existing", []):
        support |= _stems(memory["content"])
    used: set[int] = set()
    for content in predicted:
        hit = next((i for i, must in enumerate(expected) if i not in used and _matches(content, must)), None)
        if hit is not None:
            used.add(hit)
            result.correct += 1
        elif any(_matches(content, must) for must in known) or any(_matches(content, must) for must in expected):
            result.duplicates.append(content)
        words = _stems(content)
        forbidden = any(f.lower() in content.lower() for f in case.get("forbidden", []))
        if forbidden or (words and len(words & support) / len(words) < SUPPORT_MIN):
            result.hallucinated.append(content)
    result.matched_expected = len(used)
    result.missed = [" + ".join(must) for i, must in enumerate(expected) if i not in used]
    return result


def _wording(known: dict[int, str], memory_id: int) -> str:
    """The text of a known memory by id ("" for an id the case does not have)."""
    return known.get(memory_id, "")


def case_email(case: dict[str, Any]) -> InboundEmail:
    """The case's email as Quinn would have parsed it (``text`` is the mail's own text, quotes stripped)."""
    mail = case["email"]
    name, _, address = mail.get("from", "Alice Example <alice@example.org>").rpartition("<")
    date = datetime.fromisoformat(mail.get("date", "2026-11-22T09:00:00+00:00"))
    return InboundEmail(
        message_id=f"<eval-{case['id']}@example.org>", in_reply_to=None, references=(),
        from_=Address(name.strip(), address.rstrip(">").strip().lower()), to=(), cc=(), reply_to=(),
        subject=mail.get("subject", ""), date=date, text=mail["text"], full_text=mail.get("full_text", mail["text"]),
    )  # fmt: skip


async def evaluate_extraction(llm: LLM, prompts: PromptStore, cases: list[dict[str, Any]]) -> Report:
    """Run the extraction prompt on every case (after the sensory gate, as the daemon does) and score it."""
    results = []
    usage = Usage(llm.background_model_id)
    for case in cases:
        email = case_email(case)
        user = email.sender or "alice@example.org"
        existing = [sample_memory(int(m.get("id", i + 1)), m["content"], m.get("type", "fact"))
                    for i, m in enumerate(case.get("existing", []))]  # fmt: skip
        name = email.sender_name or user
        if not sensory_gate(email.text).passed:
            result = score_case(case, [], name)
            result.gated = True
            results.append(result)
            continue
        rendered = prompts.render("extract", extract_variables(user, email, existing, case.get("domains", [])))
        extraction, cost = await llm.structured(rendered.system, rendered.user, Extraction)
        usage += cost
        # What the daemon would store: cut to the person's own words (agent/grounding.py), as apply_extraction does.
        known = {m.id: m.content for m in existing}
        extraction, _ = own_words_only(user, extraction, Grounding.of([email.text], [user, name]),
                                       partial(_wording, known))  # fmt: skip
        predicted = [m.content for m in (*extraction.new, *extraction.updated, *extraction.contradicted)]
        results.append(score_case(case, predicted, name))
    return Report(results, usage)
