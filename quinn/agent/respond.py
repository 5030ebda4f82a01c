"""The reply pipeline: render the reply template with the assembled context and ask the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from quinn.agent.llm import LLM, Usage
from quinn.agent.prompts import PromptStore


@dataclass(frozen=True)
class DraftedReply:
    """The model's reply text, the template version that produced it, and its cost."""

    body: str
    prompt_version: str
    usage: Usage


async def draft_reply(llm: LLM, prompts: PromptStore, variables: dict[str, Any]) -> DraftedReply:
    """Render ``reply`` with ``variables`` and get the reply body from the main model."""
    rendered = prompts.render("reply", variables)
    result = await llm.text(rendered.system, rendered.user)
    return DraftedReply(result.text, rendered.version, result.usage)
