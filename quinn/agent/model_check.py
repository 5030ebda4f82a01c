"""Whether the configured model can do Quinn's job, from a few fixed probes (``quinn check``, ``quinn demo``).

Issue 34: a model too small for Quinn was found out only by its replies (refusals, "Sure, here's the reply body:",
the person's own mail sent back, a steak recipe for a vegetarian). Three probes, the same for every model, ask
what Quinn asks of it: two replies to a short mail, judged as ``LLM.text`` judges a reply (plain text, no JSON,
not a copy of the mail), and one extraction answered in the structured-output mode the server takes (the
``Extraction`` schema, through ``LLM.structured`` with its fallbacks and repair round, as the daemon calls it).
The verdict is the model's own output, unrepaired: Quinn copes with a model that fails one probe now and then,
but not with one that fails them as a rule.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from quinn.agent.extract import Extraction
from quinn.agent.json_text import echoed, opens_json, unfenced, whole_json
from quinn.agent.llm import LLM
from quinn.errors import ConfigError, QuinnError

TOO_SMALL = "this model is too small for Quinn: replies will be poor"
REPLY_SYSTEM = (
    "You are Quinn, an email assistant. Write the body of your reply to the email the user message shows, as "
    "plain text to the person who wrote it: no JSON, no tool calls, no subject line, no notes about the reply."
)
# Fixed mails: a preference that must shape the answer, and a plain question. Never the wording of a template.
PROBE_MAILS = (
    "From: sam@example.org\nSubject: Dinner on Friday\n\nHi Quinn,\n\nI am vegetarian and moved to Porto last "
    "month. Could you suggest a dinner I could cook for four friends on Friday? Nothing too hard, please.\n\nSam",
    "From: sam@example.org\nSubject: Trip to Lyon\n\nHello Quinn,\n\nMy train to Lyon leaves at 7:40 on Monday "
    "and I come back on Wednesday. What should I pack for two days of meetings there?\n\nThanks, Sam",
)
EXTRACT_SYSTEM = (
    "Read the email and list what it says about its writer that is worth remembering for later mail: facts, "
    "preferences, plans. Answer with one JSON object that follows the schema."
)
# What a model writes about its reply instead of the reply, or instead of answering (seen with 1.5B models).
_SCAFFOLDING = re.compile(r"</?[a-z_]+/?>|^(sure|certainly|okay|of course)\b[^\n]{0,40}\b(here|reply)\b", re.I | re.M)
_REFUSAL = re.compile(r"^\W*(i['’]?m|i am) sorry,? (but )?i (can(no|['’])t|am unable|['’]?m unable)", re.I | re.M)
# A reply that greets Quinn was written as the sender, not to them (seen with a 0.5B model: "Dear Quinn, ...").
_ROLE_SWAP = re.compile(r"\A\W*(dear|hi|hello|hey)\s+quinn\b", re.I)


@dataclass
class ModelVerdict:
    """What the probes found: ``problems`` empty means the model passed."""

    model: str
    mode: str
    seconds: float
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def line(self) -> str:
        """One line for ``quinn check``."""
        if self.passed:
            return (f"{self.model}: replies as plain text, does not echo the mail, structured output as "
                    f"{self.mode}; {len(PROBE_MAILS) + 1} probes in {self.seconds:.1f} s")  # fmt: skip
        return f"{self.model}: {'; '.join(self.problems)}: {TOO_SMALL}"


def judge_reply(text: str, mail: str) -> str | None:
    """What is wrong with ``text`` as a reply to ``mail``, or None."""
    body = unfenced(text)
    if not body.strip():
        return "an empty reply"
    if whole_json(body) is not None or opens_json(body):
        return "JSON instead of a reply"
    if echoed(body, mail, REPLY_SYSTEM):
        return "sends the mail back"
    if _REFUSAL.search(body):
        return "refuses to answer"
    if _ROLE_SWAP.search(body):
        return "writes as the sender, to Quinn"
    if _SCAFFOLDING.search(body):
        return "a chatbot's preamble or tags, not a mail"
    return None


async def check_model(llm: LLM) -> ModelVerdict:
    """Run the probes against ``llm``'s main model (replies) and background model (extraction)."""
    started = time.perf_counter()
    verdict = ModelVerdict(llm.where, "none", 0.0)
    faults: list[str] = []
    for mail in PROBE_MAILS:
        fault = judge_reply(await llm.probe(REPLY_SYSTEM, mail), mail)
        if fault is not None:
            faults.append(fault)
    for fault in dict.fromkeys(faults):
        verdict.problems.append(f"{fault} ({faults.count(fault)} of {len(PROBE_MAILS)} replies)")
    try:
        await llm.structured(EXTRACT_SYSTEM, PROBE_MAILS[0], Extraction)
        verdict.mode = llm.format_mode()
    except ConfigError:
        raise
    except QuinnError as exc:
        verdict.problems.append(f"no valid structured output ({exc.message[:160]})")
    verdict.seconds = time.perf_counter() - started
    return verdict
