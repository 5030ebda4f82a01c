"""A scripted model that answers like a model would: JSON to the extraction prompt, text to the reply prompt."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.lab.llm_server import Json, RecordedRequest, ScriptedLLM, Text

EXTRACT_MARK = "long-term memory of an email assistant"
NOTHING = {"new": [], "updated": [], "contradicted": []}


def memory_id(request: RecordedRequest, content: str) -> int:
    """The id the extraction prompt shows for an existing memory with ``content``."""
    match = re.search(r"- \[(\d+)\] \([^)]*\) " + re.escape(content), request.text)
    assert match, f"{content!r} not among the existing memories in the prompt:\n{request.text}"
    return int(match.group(1))


class Brain:
    """The scripted model: ``learn[trigger]`` answers extraction of a mail containing ``trigger``."""

    def __init__(self, server: ScriptedLLM) -> None:
        self.server = server
        self.learn: dict[str, Callable[[RecordedRequest], dict[str, Any]] | dict[str, Any]] = {}
        self.reply: Callable[[RecordedRequest], Any] = lambda request: Text("Noted, thank you.")
        server.responder = self

    def __call__(self, request: RecordedRequest) -> Any:
        if EXTRACT_MARK in request.text:
            new_mail = request.text.split("New email from", 1)[-1]
            for trigger, answer in self.learn.items():
                if trigger in new_mail:
                    return Json(answer(request) if callable(answer) else answer)
            return Json(NOTHING)
        return self.reply(request)

    def prompts(self, containing: str) -> list[str]:
        """Texts of reply requests (not extraction) whose new email contains ``containing``."""
        return [r.text for r in self.server.requests
                if EXTRACT_MARK not in r.text and containing in r.text.split("New email from", 1)[-1]]  # fmt: skip

    def prompt(self, containing: str) -> str:
        found = self.prompts(containing)
        assert found, f"no reply prompt for a mail containing {containing!r}"
        return found[-1]
