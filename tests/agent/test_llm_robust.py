"""The LLM seam against models and servers as they are (issue 21): every failure shape of structured output and of
replies, each against a real HTTP server (the scripted one, taught the shape; ``like_llama_cpp`` imitates what
llama-cpp-python's server was measured to do)."""

from __future__ import annotations

import json

import pytest
from mirascope import llm
from pydantic import BaseModel, Field

from quinn.agent.llm import LLM, PromptTooLong
from quinn.errors import RetryLater
from tests.agent.test_llm import make_llm
from tests.lab.llm_server import Error, Json, ScriptedLLM, Text, ToolCall, ToolCalls

MODEL = "openai/qwen2.5-coder-0.5b-instruct"  # a name OpenAI does not know, at a base_url


class Fact(BaseModel):
    content: str
    kind: str = "fact"


class Facts(BaseModel):
    facts: list[Fact] = Field(default_factory=list)
    mood: str | None = None


GOOD = {"facts": [{"content": "Ana lives in Porto."}, {"content": "Ana has a dog named Rui."}]}


def local(srv: ScriptedLLM, **extra: object) -> LLM:
    return make_llm(srv, MODEL, **extra)


@pytest.mark.parametrize(
    "answer",
    [
        "Sure! Here is the JSON you asked for:\n" + json.dumps(GOOD) + "\nLet me know if you need more.",
        "```json\n" + json.dumps(GOOD, indent=2) + "\n```",
        "<tool_call>\n" + json.dumps(GOOD) + "\n</tool_call>",
        json.dumps({"Facts": GOOD}),
    ],
    ids=["prose", "code-fence", "tool-tags", "wrapped-in-its-name"],
)
async def test_json_found_where_models_put_it(llm_server: ScriptedLLM, answer: str) -> None:
    llm_server.script(Text(answer))
    facts, usage = await local(llm_server).structured("Extract.", "Ana lives in Porto and has a dog, Rui.", Facts)
    assert [f.content for f in facts.facts] == ["Ana lives in Porto.", "Ana has a dog named Rui."]
    assert usage.calls == 1 and len(llm_server.requests) == 1


async def test_truncated_answer_keeps_its_complete_elements(llm_server: ScriptedLLM) -> None:
    cut = json.dumps(GOOD)[:-25]  # inside the second fact's sentence
    llm_server.script(Text(cut, finish="length"))
    facts, _ = await local(llm_server).structured("Extract.", "Ana...", Facts)
    assert [f.content for f in facts.facts] == ["Ana lives in Porto."]


@pytest.mark.parametrize(
    ("first", "told"),
    [
        ("{}", "an empty object"),
        (json.dumps(Facts.model_json_schema()), "the JSON schema itself"),
        (json.dumps({"memories": ["Ana lives in Porto"]}), "not in the schema"),
        (json.dumps({"facts": [{"text": "Ana lives in Porto"}]}), "facts.0.content"),
        ("I cannot help with that.", "no JSON object"),
    ],
    ids=["empty-object", "schema-dump", "other-keys", "wrong-field", "no-json"],
)
async def test_an_answer_that_is_not_one_gets_one_repair_round(llm_server: ScriptedLLM, first: str, told: str) -> None:
    llm_server.script(Text(first), Json(GOOD))
    facts, usage = await local(llm_server).structured("Extract.", "Ana...", Facts)
    assert len(facts.facts) == 2 and usage.calls == 2
    assert told in llm_server.requests[1].text  # the model is told what was wrong


async def test_an_empty_object_twice_is_taken_as_nothing_to_say(llm_server: ScriptedLLM) -> None:
    llm_server.script(Text("{}"), Text("{}"))
    facts, _ = await local(llm_server).structured("Extract.", "Thanks!", Facts)
    assert facts == Facts()


async def test_invalid_twice_is_retried_later_not_lost(llm_server: ScriptedLLM) -> None:
    llm_server.script(Text("no idea"), Text(json.dumps(Facts.model_json_schema())))
    with pytest.raises(RetryLater, match="no valid Facts twice"):
        await local(llm_server).structured("Extract.", "Ana...", Facts)


class Scored(BaseModel):
    content: str
    importance: float = Field(default=0.5, ge=0, le=1)
    confidence: float = Field(default=0.5, ge=0, le=1)


class ScoredFacts(BaseModel):
    facts: list[Scored] = Field(default_factory=list)


async def test_scores_on_another_scale_are_put_back_on_ours_without_asking_again(llm_server: ScriptedLLM) -> None:
    answer = {"facts": [{"content": "Ana lives in Porto.", "importance": 8, "confidence": 95},
                        {"content": "Ana has a dog.", "importance": -0.2, "confidence": 1000}]}  # fmt: skip
    llm_server.script(Json(answer))
    facts, usage = await local(llm_server).structured("Extract.", "Ana...", ScoredFacts)
    assert [(f.importance, f.confidence) for f in facts.facts] == [(0.8, 0.95), (0.0, 1.0)]
    assert usage.calls == 1


async def test_an_answer_still_invalid_keeps_its_valid_items(llm_server: ScriptedLLM) -> None:
    bad = {"facts": [{"content": "Ana lives in Porto."}, {"text": "no content"}, {"content": "Ana has a dog."}]}
    llm_server.script(Json(bad), Json(bad))
    facts, usage = await local(llm_server).structured("Extract.", "Ana...", ScoredFacts)
    assert [f.content for f in facts.facts] == ["Ana lives in Porto.", "Ana has a dog."]
    assert usage.calls == 2  # asked once more first: the model may fix the item


async def test_an_answer_with_no_valid_item_is_still_retried_later(llm_server: ScriptedLLM) -> None:
    bad = {"facts": [{"text": "no content"}]}
    llm_server.script(Json(bad), Json(bad))
    with pytest.raises(RetryLater, match=r"facts\.0\.content"):
        await local(llm_server).structured("Extract.", "Ana...", ScoredFacts)


async def test_json_schema_refused_falls_back_to_json_object_with_the_schema_and_remembers(
    llm_server: ScriptedLLM,
) -> None:
    llm_server.like_llama_cpp = True
    seam = local(llm_server)
    llm_server.script(Json(GOOD), Json(GOOD))
    first, _ = await seam.structured("Extract.", "Ana...", Facts)
    second, _ = await seam.structured("Extract.", "Ana again...", Facts)
    assert first == second and len(first.facts) == 2
    formats = [(r.body_json.get("response_format") or {}).get("type") for r in llm_server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]  # one refusal, then the working mode kept
    assert {r.purpose for r in llm_server.requests} == {"Facts"}  # named by the schema in both modes
    sent = llm_server.requests[-1].body_json["response_format"]
    assert sent["schema"]["properties"].keys() == Facts.model_json_schema()["properties"].keys()


async def test_a_server_refusing_every_response_format_gets_json_asked_for_in_the_prompt(
    llm_server: ScriptedLLM,
) -> None:
    def reply(request: object) -> object:
        body = request.body_json  # type: ignore[attr-defined]
        return Error(400, "response_format is not supported") if "response_format" in body else Json(GOOD)

    llm_server.responder = reply
    facts, _ = await local(llm_server).structured("Extract.", "Ana...", Facts)
    assert len(facts.facts) == 2
    last = llm_server.requests[-1]
    assert len(llm_server.requests) == 3 and "response_format" not in last.body_json
    assert "facts" in last.text  # the schema travels in the prompt
    assert last.purpose == "Facts"  # and Quinn's purpose tag names it, as json_schema mode would


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_transient_server_error_keeps_the_mode_and_the_tools(llm_server: ScriptedLLM, status: int) -> None:
    seam = local(llm_server)
    llm_server.script(Error(status, "overloaded"), Error(status, "overloaded"))
    with pytest.raises(RetryLater):
        await seam.structured("Extract.", "Ana...", Facts)
    with pytest.raises(RetryLater):
        await seam.text("You are Quinn.", "Hi", tools=[remember])
    llm_server.script(Json(GOOD), Text("Hello Ana."))
    assert len((await seam.structured("Extract.", "Ana...", Facts))[0].facts) == 2
    assert (await seam.text("You are Quinn.", "Hi", tools=[remember])).text == "Hello Ana."
    formats = [(r.body_json.get("response_format") or {}).get("type") for r in llm_server.requests]
    assert formats == ["json_schema", None, "json_schema", None]
    assert ["tools" in r.body_json for r in llm_server.requests] == [False, True, False, True]


async def test_a_server_error_in_the_last_mode_is_retried_later(llm_server: ScriptedLLM) -> None:
    llm_server.script(Error(500), Error(500), Error(500))
    with pytest.raises(RetryLater):
        await local(llm_server).structured("Extract.", "Ana...", Facts)


# -- replies -----------------------------------------------------------------------------------------------------

saved: list[str] = []


@llm.tool
async def remember(content: str) -> str:
    """Save something worth remembering about the user."""
    saved.append(content)
    return "saved"


async def test_a_tool_call_written_as_text_is_run_and_never_becomes_the_reply(llm_server: ScriptedLLM) -> None:
    saved.clear()
    llm_server.like_llama_cpp = True
    llm_server.script(ToolCall("remember", {"content": "Ana likes tea"}), Text("Noted, Ana: tea it is."))
    result = await local(llm_server).text("You are Quinn.", "I like tea.", tools=[remember])
    assert result.text == "Noted, Ana: tea it is." and result.tool_rounds == 1
    assert saved == ["Ana likes tea"]
    assert "remember: saved" in llm_server.requests[1].text


async def test_a_tool_call_written_as_text_with_an_argument_the_tool_does_not_take_still_runs(
    llm_server: ScriptedLLM,
) -> None:
    """Seen with a 0.5B model: ``search_memory`` called with an ``importance``; the TypeError came back as the tool
    result, and the model then mailed it as its reply."""
    saved.clear()
    llm_server.like_llama_cpp = True
    llm_server.script(ToolCall("remember", {"content": "Ana likes tea", "importance": 5}), Text("Noted, Ana."))
    result = await local(llm_server).text("You are Quinn.", "I like tea.", tools=[remember])
    assert result.text == "Noted, Ana." and saved == ["Ana likes tea"]
    assert "remember: saved" in llm_server.requests[1].text and "unexpected keyword" not in llm_server.requests[1].text


async def test_the_same_tool_call_written_again_is_not_run_again(llm_server: ScriptedLLM) -> None:
    saved.clear()
    llm_server.like_llama_cpp = True
    call = ToolCall("remember", {"content": "Ana likes tea"})
    llm_server.script(call, call, Text("Noted, Ana."))
    result = await local(llm_server).text("You are Quinn.", "I like tea.", tools=[remember])
    assert result.text == "Noted, Ana." and saved == ["Ana likes tea"] and result.tool_rounds == 1
    assert "That was JSON, not a reply" in llm_server.requests[2].text


@pytest.mark.parametrize(
    "junk",
    [
        json.dumps({"name": "delete_everything", "arguments": {}}),  # a tool we do not offer
        json.dumps({"type": "object", "properties": {"reply": {"type": "string"}}}),  # a schema dump
        '```json\n{"reply": "Hello"}\n```',
        '{"name": "search_memory", "arguments": {"content": "To save a little money each month, you can',
    ],
    ids=["unknown-tool", "schema", "fenced-json", "tool-call-cut-off"],
)
async def test_json_instead_of_a_reply_is_sent_back_once(llm_server: ScriptedLLM, junk: str) -> None:
    llm_server.script(Text(junk), Text("Hello Ana."))
    result = await local(llm_server).text("You are Quinn.", "Hi", tools=[remember])
    assert result.text == "Hello Ana."
    assert "That was JSON, not a reply" in llm_server.requests[1].text


async def test_json_instead_of_a_reply_three_times_is_retried_later(llm_server: ScriptedLLM) -> None:
    llm_server.script(Text('{"reply": "Hello"}'), Text('[{"reply": "Hello"}]'), Text('{"reply": "Hello"}'))
    with pytest.raises(RetryLater, match="JSON instead of a reply, sampled too"):
        await local(llm_server).text("You are Quinn.", "Hi")
    assert len(llm_server.requests) == 3


async def test_the_last_try_after_two_copies_is_sampled_not_greedy(llm_server: ScriptedLLM) -> None:
    """Bench/long_memory, the 1.5B at temperature 0: a reply that pasted a recalled mail, then pasted it again
    when told, was deferred, and every retry of the mail wrote the same 369 characters (four deferrals of one
    mail). The last try asks once more at SAMPLED_TEMPERATURE; what it writes is checked like any answer."""
    from quinn.agent.llm import SAMPLED_TEMPERATURE

    pasted = '- [mail:2024-11-05] (they wrote, "News from me") Work has been hectic. We live in Split now.'
    user = f"{pasted}\n\nNew email from Ingrid:\nHow long is my commute these days?"
    llm_server.script(Text(pasted), Text(pasted), Text("About 47 minutes each way, by train."))
    result = await local(llm_server).text("You are Quinn.", user, echo_of=("How long is my commute these days?",),
                                          recalled=[pasted])  # fmt: skip
    assert result.text == "About 47 minutes each way, by train." and len(llm_server.requests) == 3
    temperatures = [r.body_json.get("temperature") for r in llm_server.requests]
    assert temperatures[2] == SAMPLED_TEMPERATURE and temperatures[2] != temperatures[0]
    # The sampled try is the request as first sent, without the note the paste earned.
    assert "not a reply" in llm_server.requests[1].text and "not a reply" not in llm_server.requests[2].text


async def test_a_model_refusing_the_sampled_temperature_is_asked_with_its_own(llm_server: ScriptedLLM) -> None:
    """OpenAI's reasoning models answer 400 to any temperature but their own: the sampled last try was lost to
    it, and the mail deferred at every try. It is asked once more with the configured sampling instead."""
    from quinn.agent.llm import SAMPLED_TEMPERATURE

    pasted = '- [mail:2024-11-05] (they wrote, "News from me") Work has been hectic. We live in Split now.'
    user = f"{pasted}\n\nNew email from Ingrid:\nHow long is my commute these days?"
    refused = Error(400, "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default "
                         "(1) value is supported.")  # fmt: skip
    llm_server.script(Text(pasted), Text(pasted), refused, Text("About 47 minutes each way, by train."))
    result = await local(llm_server).text("You are Quinn.", user, echo_of=("How long is my commute these days?",),
                                          recalled=[pasted])  # fmt: skip
    assert result.text == "About 47 minutes each way, by train." and len(llm_server.requests) == 4
    temperatures = [r.body_json.get("temperature") for r in llm_server.requests]
    assert temperatures[2] == SAMPLED_TEMPERATURE and temperatures[3] == temperatures[0] != SAMPLED_TEMPERATURE
    assert llm_server.requests[3].body_json["messages"] == llm_server.requests[2].body_json["messages"]


async def test_a_reply_naming_what_nothing_it_was_sent_holds_is_sent_back_once(llm_server: ScriptedLLM) -> None:
    """Bench/long_memory, the 1.5B: asked for a dentist the person never named, it answered "Dr. Smith"; told
    which names nothing above holds, it said it did not know (grounding.guessed; GUESSES_NOTE)."""
    user = "Memories:\n- I drive a dark green Mazda.\n\nNew email from Ingrid:\nWho is my dentist again?"
    llm_server.script(
        Text("Hi Ingrid,\n\nYour dentist is Dr. Smith, at Harbour Dental."),
        Text("Hi Ingrid,\n\nI don't know: you haven't told me who your dentist is."),
    )
    result = await local(llm_server).text("You are Quinn.", user, echo_of=(user,), guesses=["ingrid"])
    assert result.text == "Hi Ingrid,\n\nI don't know: you haven't told me who your dentist is."
    assert len(llm_server.requests) == 2 and result.usage.calls == 2
    second = llm_server.requests[1].body_json["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "Dr. Smith" in second[2]["content"]  # its own answer, then the note naming what it brought
    assert second[3]["content"].startswith("Your reply names Dr. Smith, Harbour Dental, which nothing above says.")


async def test_the_answer_to_the_guesses_note_is_the_reply_whatever_it_names(llm_server: ScriptedLLM) -> None:
    """Asked once, the model may say the same again (it may be general knowledge, or right): that answer is
    mailed (no third call, no deferral)."""
    answer = "Your book club is reading Persuasion by Jane Austen this month."
    llm_server.script(Text(answer), Text(answer))
    user = "New email from Ingrid:\nWhat is my book club reading this month?"
    result = await local(llm_server).text("You are Quinn.", user, echo_of=(user,), guesses=["ingrid"])
    assert result.text == answer and len(llm_server.requests) == 2
    assert "Persuasion, Jane Austen" in llm_server.requests[1].text


@pytest.mark.parametrize(
    ("reply", "guesses"),
    [
        ("Your car is a dark green Mazda, Ingrid.", ["ingrid"]),
        ("Your dentist is Dr. Smith.", None),
        ("The capital of Australia is Canberra.", ["ingrid"]),
    ],
    ids=["names-only-what-it-was-sent", "check-off", "no-one-on-the-mail"],
)
async def test_a_reply_is_asked_once_when_it_brings_no_name_or_the_check_is_off(
    llm_server: ScriptedLLM, reply: str, guesses: list[str] | None
) -> None:
    llm_server.script(Text(reply), Text("A second answer."))
    user = "Memories:\n- I drive a dark green Mazda.\n\nNew email from Ingrid:\nWhich car do I drive?"
    result = await local(llm_server).text("You are Quinn.", user, echo_of=(user,), guesses=guesses)
    assert result.text == reply and len(llm_server.requests) == 1


@pytest.mark.parametrize("cites", ["- [memory:32]", "[memory:32], [mail:2025-03-14]."])
async def test_a_reply_that_only_cites_the_prompt_is_sent_back(llm_server: ScriptedLLM, cites: str) -> None:
    """Bench/long_memory, the 1.5B: the whole reply was "- [memory:32]", and it was mailed. Sent back once, as
    JSON is; a reply with words and a cite is a reply, and a summary (no ``echo_of``) may be a cite."""
    user = "Memories:\n- [memory:32] (fact, since 2025-03-14) I drive a dark green Mazda.\n\nWhich car do I drive?"
    llm_server.script(Text(cites), Text("A dark green Mazda [memory:32]."))
    result = await local(llm_server).text("You are Quinn.", user, echo_of=(user,))
    assert result.text == "A dark green Mazda [memory:32]." and len(llm_server.requests) == 2
    assert "That was only references to memories, no words of your own, not a reply" in llm_server.requests[1].text
    llm_server.script(Text(cites))
    assert (await local(llm_server).text("Summarize.", user)).text == cites


async def test_a_model_stuck_on_tool_calls_is_asked_once_without_tools(llm_server: ScriptedLLM) -> None:
    saved.clear()
    llm_server.like_llama_cpp = True
    call = ToolCall("remember", {"content": "Ana likes tea"})
    llm_server.script(call, call, call, Text("Noted, Ana."))
    result = await local(llm_server).text("You are Quinn.", "I like tea.", tools=[remember])
    assert result.text == "Noted, Ana." and saved == ["Ana likes tea"]
    last = llm_server.requests[-1]
    assert "tools" not in last.body_json
    # The tool results come before the email: a small model copies the last thing it read.
    assert last.text.index("never copy them into the reply):\nremember: saved") < last.text.index("I like tea.")


@llm.tool
async def note(ctx: llm.Context[list[str]], content: str) -> str:
    """Note something about the user."""
    ctx.deps.append(content)
    return "noted"


@pytest.mark.parametrize("text", ["Hello Ana, I have noted it.", None], ids=["with-text", "call-alone"])
async def test_a_tool_call_in_the_retry_without_tools_is_not_run(llm_server: ScriptedLLM, text: str | None) -> None:
    """Issue 30: the last-resort request offers no tools, yet the model calls one. Running it raised "execute_tools()
    takes 1 positional argument but 2 were given" (a plain call's response takes no context) and the mail was
    deferred as a bug. Nothing was offered, so nothing runs: its text is the answer, or the mail waits."""
    junk = json.dumps({"name": "delete_everything", "arguments": {}})
    llm_server.script(Text(junk), Text(junk), ToolCalls([ToolCall("note", {"content": "Ana likes tea"})], text=text))
    notes: list[str] = []
    ask = local(llm_server).text("You are Quinn.", "I like tea.", tools=[note], ctx=llm.Context(deps=notes))
    if text is None:
        with pytest.raises(RetryLater, match="a tool call and no text; nothing was sent"):
            await ask
    else:
        assert (await ask).text == text
    assert notes == [] and "tools" not in llm_server.requests[-1].body_json and len(llm_server.requests) == 3


async def test_what_the_model_wrote_is_never_in_a_log_line_or_a_reason(
    llm_server: ScriptedLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: a model pasting a memory instead of replying put 200 characters of it in the WARNING log and in
    the mail's deferral reason (the ledger, the console). Now its length and hash only."""
    pasted = "Ana keeps the bank PIN 4242 private. Her card number is 4111 1111 1111 1111."
    llm_server.script(Text(pasted), Text(pasted), Text(pasted), Text(pasted))
    with pytest.raises(RetryLater) as raised:
        await local(llm_server).text("You are Quinn.", "What is my PIN?", tools=[remember],
                                     echo_of=("What is my PIN?",), recalled=[pasted])  # fmt: skip
    assert "4242" not in raised.value.message and "sha256" in raised.value.message
    assert caplog.records and not [r for r in caplog.records if "4242" in r.getMessage()]


async def test_a_request_larger_than_the_models_context_is_never_sent(llm_server: ScriptedLLM) -> None:
    """Issue 30: the context a server named in its refusal, or [llm] context_tokens, keeps a request that cannot
    fit from being sent at all (each sent one is a bill, and each failed try was up to three calls)."""
    llm_server.script(Error(400, "This model's maximum context length is 1000 tokens. However, you requested 5000 "
                                 "tokens (4800 in the messages, 200 in the completion)."))  # fmt: skip
    seam = local(llm_server)
    with pytest.raises(PromptTooLong):
        await seam.text("You are Quinn.", "x" * 20000)
    with pytest.raises(PromptTooLong, match="not sent"):
        await seam.text("You are Quinn.", "x" * 20000)
    with pytest.raises(PromptTooLong, match="not sent"):
        await seam.structured("Extract.", "x" * 20000, Facts)
    assert len(llm_server.requests) == 1
    assert (await seam.text("You are Quinn.", "Hi")).text  # what fits is sent
    configured = local(llm_server, context_tokens=2000, max_output_tokens=500)
    with pytest.raises(PromptTooLong, match="context of 2000: not sent"):
        await configured.text("You are Quinn.", "x" * 6200)  # 1,555 + 500 of answer
    assert len(llm_server.requests) == 2


async def test_a_server_refusing_tools_is_asked_without_them_from_then_on(llm_server: ScriptedLLM) -> None:
    def reply(request: object) -> object:
        body = request.body_json  # type: ignore[attr-defined]
        return Error(400, "tools are not supported") if "tools" in body else Text("Hello Ana.")

    llm_server.responder = reply
    seam = local(llm_server)
    assert (await seam.text("You are Quinn.", "Hi", tools=[remember])).text == "Hello Ana."
    assert (await seam.text("You are Quinn.", "Hi again", tools=[remember])).text == "Hello Ana."
    assert ["tools" in r.body_json for r in llm_server.requests] == [True, False, False]


ASKED = "Hi Quinn,\n\nWhat is the date of our wedding anniversary? Please keep it short.\n\nThanks,\nMaren"
INSTRUCTION = "Write the reply body only (no subject line, no headers)."


@pytest.mark.parametrize(
    "echo",
    [f"{ASKED}\n\n{INSTRUCTION}", "remember: saved"],
    ids=["the-email-and-its-instruction", "the-result-of-its-own-tool-call"],
)
async def test_a_reply_that_copies_its_input_is_never_sent(llm_server: ScriptedLLM, echo: str) -> None:
    """Seen with a 0.5B model: the email and the template's instruction, or a tool's result, sent back as the
    reply. Sent back once (as for JSON); a real reply is kept; summaries and digests may quote (no ``reply``)."""
    saved.clear()
    llm_server.like_llama_cpp = True
    script = [Text(echo), Text("Hi Maren, I don't know that date yet: tell me and I will remember it.")]
    if echo == "remember: saved":
        script.insert(0, ToolCall("remember", {"content": "Maren asked about her anniversary"}))
    llm_server.script(*script)
    user = f"New email from Maren:\n{ASKED}\n\n{INSTRUCTION}"
    result = await local(llm_server).text("You are Quinn.", user, tools=[remember], echo_of=(user,))
    assert result.text.startswith("Hi Maren, I don't know that date yet")
    assert "a copy of the email or of tool results, not a reply" in llm_server.requests[-1].text


async def test_a_reply_copying_its_input_at_every_try_is_retried_later_and_a_summary_may_quote(
    llm_server: ScriptedLLM,
) -> None:
    user = f"New email from Maren:\n{ASKED}\n\n{INSTRUCTION}"
    # Sent back, asked without tools, asked sampled: a copy each time.
    llm_server.script(Text(ASKED), Text(ASKED), Text(ASKED), Text(ASKED))
    with pytest.raises(RetryLater, match="a copy of the email or of tool results instead of a reply"):
        await local(llm_server).text("You are Quinn.", user, tools=[remember], echo_of=(user,))
    llm_server.script(Text(ASKED))  # a summary (no echo_of) that quotes its input is returned as it is
    assert (await local(llm_server).text("Summarize.", user)).text == ASKED


@pytest.mark.parametrize(
    ("reply", "sources", "results", "echo"),
    [
        (f"{ASKED}\n\n{INSTRUCTION}", (f"New email from Maren:\n{ASKED}\n\n{INSTRUCTION}",), (), True),
        ("search_memory: No memories match.", (), ("search_memory: No memories match.",), True),
        # A short answer restating the question copies little: an answer, not an echo.
        ("What is the date of our wedding anniversary? It is 12 June.", (ASKED,), (), False),
        # Quoting one line of a long email and answering it.
        (
            "> What is the date of our wedding anniversary?\n\nYou told me in March: it is 12 June, and you were "
            "married in Porto. Shall I remind you a week before next year?",
            (ASKED,),
            (),
            False,
        ),
        ("OK", (), ("OK: saved",), False),  # too short to tell
        # What Quinn said earlier in the thread is not a source: a reply may say it again.
        (
            "Your anniversary is 12 June; I have had it since your mail in March and will remind you in May.",
            (ASKED,),
            (),
            False,
        ),
    ],
    ids=["email-and-instruction", "tool-result", "restated-question", "quote-and-answer", "short", "repeat"],
)
def test_what_counts_as_an_echo(reply: str, sources: tuple[str, ...], results: tuple[str, ...], echo: bool) -> None:
    from quinn.agent.json_text import echoed

    assert echoed(reply, *sources, results=results) is echo


PAST_MAIL = ("My cousin just moved to Bologna, there was a power cut in the evening, so we played cards by candle "
             "light. The kids gave the parrot a name at last: Waffles.")  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "echo"),
    [
        ("Hi Quinn,\n\nWhat is Anouk's new job? Please keep it short.", True),  # the short question, sent back
        (f"Start by running a small party at home. {PAST_MAIL}", True),  # a past mail pasted as the answer
        ("Your cousin moved to Bologna, you told me in March.", False),  # a fact restated from past mail
        ("My cousin just moved to Bologna, there was a power cut in the evening.", False),  # one sentence of it
        (
            "My cousin just moved to Bologna, there was a power cut in the evening, so we played cards by candle "
            "light. The kids gave the parrot a name.",
            True,
        ),  # two sentences of it: a paste
        ("The parrot is called Waffles.", False),
        (f'You wrote to me on 3 March: "{PAST_MAIL}"', False),  # asked what exactly they wrote: a quotation
        (f"You wrote to me on 3 March:\n\n> {PAST_MAIL}\n\nShall I remind you of anything else?", False),
    ],
    ids=[
        "short-question",
        "past-mail-pasted",
        "fact-restated",
        "one-sentence-said-again",
        "two-sentences-pasted",
        "short-fact",
        "quotation",
        "quoted-lines",
    ],
)
def test_an_echo_of_the_question_or_of_recalled_mail(reply: str, echo: bool) -> None:
    """Seen in the memory QA run: the 0.5B model sent back the question itself (under the 60-character floor),
    or one of the person's past mails that conversation recall had put in the prompt."""
    from quinn.agent.json_text import echoed

    email = f"New email from Maren:\nHi Quinn,\n\nWhat is Anouk's new job? Please keep it short.\n\n{INSTRUCTION}"
    assert echoed(reply, email, recalled=(PAST_MAIL, "Maren's cousin lives in Bologna.")) is echo


async def test_a_reply_sending_back_quinns_own_note_or_in_a_code_fence(llm_server: ScriptedLLM) -> None:
    """Seen: told "write it as plain text, no JSON, no tool calls", the model answered "no JSON, no tool calls."
    in a code fence; and real replies arrive as "```plaintext ...```"."""
    saved.clear()
    llm_server.like_llama_cpp = True  # the tool call comes as text; Quinn's note ends "no JSON, no tool calls."
    llm_server.script(ToolCall("remember", {"content": "Ana likes tea"}), Text("```plaintext\nno JSON, no tool "
                      "calls.\n```"), Text("```plaintext\nHello Ana, tea it is.\n```"))  # fmt: skip
    result = await local(llm_server).text("You are Quinn.", "I like tea.", tools=[remember], echo_of=("I like tea.",))
    assert result.text == "Hello Ana, tea it is." and saved == ["Ana likes tea"]
    assert "a copy of the email or of tool results, not a reply" in llm_server.requests[-1].text  # sent back once


# -- a prompt longer than the model's context ------------------------------------------------------------------

# llama-cpp-python's server, seen in the memory QA run (n_ctx 4096, a long session review).
TOO_LONG = ("This model's maximum context length is 4096 tokens. However, you requested 4582 tokens (4182 in the "
            "messages, 400 in the completion). Please reduce the length of the messages or completion.")  # fmt: skip


async def test_a_prompt_too_long_keeps_the_mode_and_says_how_long(llm_server: ScriptedLLM) -> None:
    """Seen: the overflow's 400 was taken for a refused json_object mode, and the model was asked for JSON in
    the prompt from then on. It is a ``PromptTooLong`` with the server's figures, and the mode stays."""
    from quinn.agent import PromptTooLong

    llm_server.like_llama_cpp = True
    seam = local(llm_server)
    llm_server.script(Json(GOOD))  # json_schema refused (llama.cpp's 500), json_object works and is kept
    await seam.structured("Extract.", "Ana...", Facts)
    llm_server.script(Error(400, TOO_LONG), Json(GOOD))
    with pytest.raises(PromptTooLong) as raised:
        await seam.structured("Extract.", "Ana... " * 100, Facts)
    assert (raised.value.limit, raised.value.requested) == (4096, 4582)
    assert len((await seam.structured("Extract.", "Ana...", Facts))[0].facts) == 2
    formats = [(r.body_json.get("response_format") or {}).get("type") for r in llm_server.requests]
    assert formats == ["json_schema", "json_object", "json_object", "json_object"]


async def test_a_reply_prompt_too_long_keeps_the_tools(llm_server: ScriptedLLM) -> None:
    """A 400 for the length is not a server refusing tools: the next reply is offered them again."""
    from quinn.agent import PromptTooLong

    seam = local(llm_server)
    llm_server.script(Error(400, TOO_LONG), Text("Hello Ana."))
    with pytest.raises(PromptTooLong):
        await seam.text("You are Quinn.", "Hi " * 100, tools=[remember])
    assert (await seam.text("You are Quinn.", "Hi", tools=[remember])).text == "Hello Ana."
    assert ["tools" in r.body_json for r in llm_server.requests] == [True, True]


@pytest.mark.parametrize(
    "message",
    [
        "the request exceeds the available context size, try increasing it",  # llama.cpp's own server
        "Input is too long: context_length_exceeded",
    ],
)
def test_what_reads_as_a_prompt_too_long(message: str) -> None:
    from quinn.agent.llm import context_overflow

    assert context_overflow(llm.BadRequestError(message, "openai"), "m") is not None
    assert context_overflow(llm.BadRequestError("response_format is not supported", "openai"), "m") is None
