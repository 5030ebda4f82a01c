"""A scripted model that answers like a model would: JSON to the extraction call, text to the reply call.

Calls are told apart by their purpose (``RecordedRequest.purpose``: the schema name or Quinn's purpose tag),
never by the wording of a template, which an admin may change (issue 17, tests/agent/test_reworded_prompts.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.lab.llm_server import REPLY, Json, RecordedRequest, ScriptedLLM, Text

EXTRACTION = "Extraction"  # quinn.agent.extract.Extraction: the schema the extraction call answers in
NOTHING = {"new": [], "updated": [], "contradicted": []}
# The new email's Date as Quinn renders it (ISO 8601, ``email.date``); earlier mails of the thread come before it.
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?")


def memory_id(request: RecordedRequest, content: str) -> int:
    """The id the extraction prompt shows for an existing memory with ``content``."""
    match = re.search(r"\[(\d+)\][^\n]*?" + re.escape(content), request.text)
    assert match, f"{content!r} not among the existing memories in the prompt:\n{request.text}"
    return int(match.group(1))


def first_user_message(request: RecordedRequest) -> str:
    """The text of the request's first user message (the rendered template's user block), else all its text."""
    body = request.body_json if isinstance(request.body_json, dict) else {}
    for message in body.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            return str(content or "")
    return request.text


def new_mail(request: RecordedRequest) -> str:
    """The new email in a reply or extraction prompt, found by its data: from the line with its Date on, the last
    timestamp of the user message (memories and recalled mail carry dates without a time, the thread before it
    older times). The whole user message when the mail had no Date."""
    user = first_user_message(request)
    stamps = list(TIMESTAMP.finditer(user))
    return user[user.rfind("\n", 0, stamps[-1].start()) + 1 :] if stamps else user


class Brain:
    """The scripted model: ``learn[trigger]`` answers extraction of a mail containing ``trigger``."""

    def __init__(self, server: ScriptedLLM) -> None:
        self.server = server
        self.learn: dict[str, Callable[[RecordedRequest], dict[str, Any]] | dict[str, Any]] = {}
        self.reply: Callable[[RecordedRequest], Any] = lambda request: Text("Noted, thank you.")
        server.responder = self

    def __call__(self, request: RecordedRequest) -> Any:
        if request.purpose == EXTRACTION:
            mail = new_mail(request)
            for trigger, answer in self.learn.items():
                if trigger in mail:
                    return Json(answer(request) if callable(answer) else answer)
            return Json(NOTHING)
        return self.reply(request)

    def requests(self, purpose: str) -> list[RecordedRequest]:
        """The requests made for ``purpose`` ("Extraction", "reply", "SessionReview"…), in order."""
        return [r for r in self.server.requests if r.kind != "embeddings" and r.purpose == purpose]

    def extractions(self) -> list[str]:
        """The new email of every extraction request, in order."""
        return [new_mail(r) for r in self.requests(EXTRACTION)]

    def prompts(self, containing: str) -> list[str]:
        """Texts of reply requests (not extraction) whose new email contains ``containing``."""
        return [r.text for r in self.requests(REPLY) if containing in new_mail(r)]

    def prompt(self, containing: str) -> str:
        found = self.prompts(containing)
        assert found, f"no reply prompt for a mail containing {containing!r}"
        return found[-1]

    def context(self, containing: str) -> str:
        """The last reply prompt for a mail containing ``containing`` up to that mail: what Quinn gave as context."""
        found = [r for r in self.requests(REPLY) if containing in new_mail(r)]
        assert found, f"no reply prompt for a mail containing {containing!r}"
        return found[-1].text.split(new_mail(found[-1]), 1)[0]
