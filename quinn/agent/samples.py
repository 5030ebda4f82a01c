"""Sample variables for every prompt template, built by the same functions that build the real ones.

``quinn prompts check`` renders each template with these, and ``PromptStore`` trial-renders an edited template
with them before putting it in use, so a misspelt variable is caught at the edit, not on the next email.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from quinn.agent.context import ReplyInputs, ThreadMessage, reply_variables, visible
from quinn.agent.extract import extract_variables
from quinn.agent.memory_mail import digest_groups
from quinn.documents import Extracted, Section
from quinn.mailbox import Address, InboundEmail
from quinn.memory import Memory, Passage, PassageHit, SearchHit

if TYPE_CHECKING:
    from quinn.agent.respond import Agent
    from quinn.config import Config

SAMPLE_USER = "alice@example.org"
HEAVY_ITEMS = 50  # every list of the heavy samples: more memories, messages and files than a reply gets
HEAVY_TEXT_CHARS = 10_000  # every piece of prose in them: a long mail, a long memory block
_WHEN = datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


def sample_memory(memory_id: int, content: str, type_: str = "fact", domain: str | None = None) -> Memory:
    """A current memory of the sample user."""
    return Memory(
        id=memory_id, user_id=SAMPLE_USER, scope="profile" if type_ in ("preference", "personal") else "episodic",
        domain=domain, type=type_, content=content, tags=(), importance=0.6, created_at=_WHEN.isoformat(),
        updated_at=_WHEN.isoformat(), version=1, root_id=memory_id, valid_from=_WHEN.isoformat(), valid_to=None,
        superseded_by=None, expires_at=None, active=True, immutable=False, access_count=0, last_accessed_at=None,
        stability=24.0, embedding_model=None, schema_version=1,
        metadata={"source": {"message_id": "<m1@example.org>", "subject": "Hello", "date": _WHEN.isoformat()}},
    )  # fmt: skip


def sample_email(text: str = "Hi Quinn, can you remind me what I told you about Project Alpha?") -> InboundEmail:
    """A plain mail from the sample user to Quinn."""
    return InboundEmail(
        message_id="<sample-1@example.org>", in_reply_to=None, references=(),
        from_=Address("Alice Example", SAMPLE_USER), to=(Address("Quinn", "quinn@example.org"),), cc=(),
        reply_to=(), subject="Project Alpha", date=_WHEN, text=text, full_text=text,
    )  # fmt: skip


def sample_variables() -> dict[str, dict[str, Any]]:
    """Variables for each packaged template name."""
    memories = [
        sample_memory(1, "Alice prefers short answers in Spanish.", "preference"),
        sample_memory(2, "Alice leads Project Alpha; its deadline is March 15.", "fact", "work"),
    ]
    email = sample_email()
    reply = reply_variables(ReplyInputs(
        email=email, user_id=SAMPLE_USER, assistant_name="Quinn", assistant_address="quinn@example.org",
        today=_WHEN.date().isoformat(), persona=(), profile=memories[:1], hits=[SearchHit(memories[1], 1.0)],
        passages=[PassageHit(Passage(1, SAMPLE_USER, "<m1@example.org>", "in", _WHEN.isoformat(), "Alpha", 0,
                                     "The kickoff of Project Alpha is in Lisbon.", frozenset({SAMPLE_USER})), 1.0)],
        state={"recent_goal_and_status": "ship Project Alpha"},
        thread=[ThreadMessage(SAMPLE_USER, _WHEN.isoformat(), "Earlier message.")], thread_summary="Summary.",
        domains=["work"], actions=["Saved, as asked: Alice asked to remember: the deadline [memory:3]"],
        documents=[Extracted("brief.pdf", "application/pdf", "pdf", 48_213, "0" * 64,
                             (Section("p.1", "Project Alpha kickoff: Lisbon, 3 March."),)),
                   Extracted("budget.xlsx", "application/vnd.ms-excel", "xlsx", 20_480, "1" * 64,
                             error="it is a password-protected or old-format (.doc, .xls, .ppt) Office file")],
    ))  # fmt: skip
    messages = [{"sender": SAMPLE_USER, "date": _WHEN.isoformat(), "body": "Earlier message."}]
    return {
        "reply": reply,
        "extract": extract_variables(SAMPLE_USER, email, memories, [{"name": "work", "description": "Work."}]),
        "summarize": {"user": {"address": SAMPLE_USER}, "subject": "Project Alpha", "previous_summary": "Summary.",
                      "messages": messages, "target_words": 120},
        "session_close": {"user": {"address": SAMPLE_USER}, "subject": "Project Alpha", "previous_summary": "",
                          "messages": messages, "existing": [{"id": m.id, "type": m.type, "content": m.content}
                                                             for m in memories],
                          "state": {"user_info": "", "recent_goal_and_status": "ship Project Alpha",
                                    "important_context": "", "agent_beliefs": ""},
                          "today": _WHEN.date().isoformat()},
        "entities": {"user": {"address": SAMPLE_USER}, "memories": [{"id": m.id, "content": m.content}
                                                                    for m in memories]},
        "consolidate": {"user": {"address": SAMPLE_USER}, "memories": [
            {"id": m.id, "type": m.type, "content": m.content, "valid_from": m.valid_from} for m in memories]},
        "reflect": {"user": {"address": SAMPLE_USER}, "episodes": [
            {"id": m.id, "content": m.content, "date": m.valid_from[:10]} for m in memories]},
        "digest": {"user": {"address": SAMPLE_USER}, "groups": digest_groups(memories), "others_on_thread": False},
    }  # fmt: skip


def heavy_sample_variables() -> dict[str, dict[str, Any]]:
    """``sample_variables`` grown to the sizes real mail and memory reach (``HEAVY_ITEMS`` in every list,
    ``HEAVY_TEXT_CHARS`` of every piece of prose): a template's trial render with these proves it renders in time
    with big data too, not only with the two sample memories."""
    return {name: _grown(variables) for name, variables in sample_variables().items()}


def _grown(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _grown(item) for key, item in value.items()}
    if isinstance(value, list | tuple) and value:
        items = [_grown(item) for item in value]
        return (items * (HEAVY_ITEMS // len(items) + 1))[:HEAVY_ITEMS]
    if isinstance(value, str) and " " in value:  # prose, not an address, a date or a name
        return ((value + " ") * (HEAVY_TEXT_CHARS // (len(value) + 1) + 1))[:HEAVY_TEXT_CHARS]
    return value


def preview_variables(config: Config, agent: Agent, name: str, user: str, text: str, subject: str) -> dict[str, Any]:
    """The variables ``name`` gets for a sample email from ``user`` with the user's real memory (read, never
    changed or touched): ``quinn prompts render --user`` and the console's preview. Runs on the DB thread."""
    c = config
    email = replace(sample_email(text), subject=subject, from_=Address("", user),
                    to=(Address(c.smtp.from_name, c.smtp.from_address),))  # fmt: skip
    memories = agent.store.get_all(user)
    if name == "reply":
        return reply_variables(agent.reply_inputs(email, user, True, touch=False))
    if name == "extract":
        known = [{"name": d.name, "description": d.description} for d in c.domains]
        return extract_variables(user, email, memories, known)
    if name == "digest":
        return {"user": {"address": user}, "groups": digest_groups(visible(memories, True)), "others_on_thread": False}
    variables = {**sample_variables()[name], "user": {"address": user}}
    if name == "consolidate":
        variables["memories"] = [{"id": m.id, "type": m.type, "content": m.content, "valid_from": m.valid_from}
                                 for m in memories[:10]]  # fmt: skip
    elif name == "reflect":
        variables["episodes"] = [{"id": m.id, "content": m.content, "date": m.valid_from[:10]}
                                 for m in memories if m.scope == "episodic"][:20]  # fmt: skip
    return variables
