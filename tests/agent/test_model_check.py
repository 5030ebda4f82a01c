"""The model check (issue 34): fixed probes tell a model that can do Quinn's job from one that cannot, against the
scripted model taught each behaviour (a real HTTP server; ``like_llama_cpp`` for the structured-output fallback)."""

from __future__ import annotations

import pytest

from quinn.agent.model_check import PROBE_MAILS, TOO_SMALL, check_model, judge_reply
from tests.agent.test_llm import make_llm
from tests.lab.brain import Brain, first_user_message
from tests.lab.llm_server import RecordedRequest, ScriptedLLM, Text

MODEL = "openai/qwen2.5-coder-0.5b-instruct"


async def test_a_model_that_answers_well_passes(llm_server: ScriptedLLM, brain: Brain) -> None:
    brain.reply = lambda request: Text("Hi Sam, a mushroom risotto is easy for four. Enjoy Friday!")
    llm_server.like_llama_cpp = True  # json_schema refused: the check finds the mode the server takes
    verdict = await check_model(make_llm(llm_server, MODEL))
    assert verdict.passed, verdict.problems
    assert verdict.mode == "json_object"
    assert len(brain.requests("model-check")) == len(PROBE_MAILS)
    assert len(brain.requests("Extraction")) == 2  # refused as json_schema, answered as json_object
    assert "does not echo the mail" in verdict.line() and "json_object" in verdict.line()


async def test_a_model_that_sends_the_mail_back_is_too_small(llm_server: ScriptedLLM, brain: Brain) -> None:
    def echo(request: RecordedRequest) -> Text:
        return Text(first_user_message(request))  # what a 0.5B model does: the mail, as its reply

    brain.reply = echo
    llm_server.responder = echo  # extraction too: the mail again, no JSON
    verdict = await check_model(make_llm(llm_server, MODEL))
    assert not verdict.passed
    assert f"sends the mail back ({len(PROBE_MAILS)} of {len(PROBE_MAILS)} replies)" in verdict.problems
    assert any(p.startswith("no valid structured output") for p in verdict.problems)
    assert verdict.line().endswith(TOO_SMALL)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("reply", "fault"),
    [
        ("", "an empty reply"),
        ('{"reply": "Try a risotto."}', "JSON instead of a reply"),
        ("I'm sorry, but I can't help with that.", "refuses to answer"),
        ("Dear Sam,\n\nI’m sorry, but I can’t assist with that.", "refuses to answer"),
        ("Dear Quinn,\n\nThanks for the tips on Porto!", "writes as the sender, to Quinn"),
        ("Sure, here's the reply body:\n\nTry a risotto.", "a chatbot's preamble or tags, not a mail"),
        ("<tools/>\nTry a risotto.", "a chatbot's preamble or tags, not a mail"),
        ("Hi Sam, a mushroom risotto is easy to cook for four, and vegetarian.", None),
    ],
)
def test_judge_reply(reply: str, fault: str | None) -> None:
    assert judge_reply(reply, PROBE_MAILS[0]) == fault
