"""The LLM seam against the scripted server: each provider string, keys, retries, usage, the tool bound."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mirascope import llm
from pydantic import BaseModel

from quinn.agent.llm import LLM
from quinn.config import LlmConfig, parse_config, resolve_secrets
from quinn.errors import ConfigError, RetryLater
from tests.lab.llm_server import Delay, Error, Json, ScriptedLLM, Text, ToolCall, count_tokens

pytestmark = pytest.mark.lab  # every test here talks to the scripted model's HTTP server

# Anthropic structured output goes through the SDK's deprecated beta `output_format` (Mirascope 2.8.2): the SDK
# warns about it, and so does pydantic when Mirascope dumps the parsed block. Both happen against the real API too.
ANTHROPIC_WARNINGS = [
    pytest.mark.filterwarnings("ignore:The 'output_format' parameter is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
]

# provider string -> (endpoint path the server must see, model name it must see, base URL kind)
PROVIDERS = {
    # With a base_url, openai/ means an OpenAI-compatible server: chat completions, the name as written
    # (llama.cpp, Ollama and vLLM serve no /v1/responses); `:responses` asks for the Responses API.
    "openai/gpt-x": ("/v1/chat/completions", "gpt-x", "v1"),
    "openai/qwen/qwen2.5-coder-0.5b": ("/v1/chat/completions", "qwen/qwen2.5-coder-0.5b", "v1"),
    "openai/gpt-x:completions": ("/v1/chat/completions", "gpt-x", "v1"),
    "openai/gpt-x:responses": ("/v1/responses", "gpt-x", "v1"),
    "ollama/qwen/qwen3-8b": ("/v1/chat/completions", "qwen/qwen3-8b", "v1"),
    "vllm/meta-llama/Llama-3.1-8B-Instruct": ("/v1/chat/completions", "meta-llama/Llama-3.1-8B-Instruct", "v1"),
    "lmstudio/qwen2.5-7b-instruct": ("/v1/chat/completions", "qwen2.5-7b-instruct", "v1"),
    "anthropic/claude-x": ("/v1/messages", "claude-x", "host"),
    "google/gemini-x": ("/v1beta/models/gemini-x:generateContent", "gemini-x", "host"),
}


class Answer(BaseModel):
    city: str


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as srv:
        yield srv


@pytest.fixture
def srv(server: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "MIRASCOPE_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    server.reset()
    yield server
    server.reset()
    llm.reset_provider_registry()


def make_llm(srv: ScriptedLLM, model: str, *, key: bool = True, base: str | None = "auto", **extra: object) -> LLM:
    """An LLM built from a parsed [llm] section, secrets resolved from an env mapping, as Quinn does."""
    if base == "auto":
        base = srv.base_url if PROVIDERS.get(model, ("", "", "v1"))[2] == "host" else srv.openai_base_url
    section: dict[str, object] = {"model": model, "max_retries": 0, "timeout_s": 10, **extra}
    if base is not None:
        section["base_url"] = base
    if key:
        section["api_key_env"] = "QUINN_TEST_LLM_KEY"
    config = parse_config({"imap": {"host": "h", "username": "u", "password_env": "P"},
                           "smtp": {"host": "h", "from_address": "quinn@example.test"}, "llm": section})  # fmt: skip
    resolve_secrets(config, {"P": "x", "QUINN_TEST_LLM_KEY": "test-key"})
    return LLM(config.llm)


@pytest.mark.parametrize("model", list(PROVIDERS))
async def test_provider_string_routes_to_its_endpoint(srv: ScriptedLLM, model: str) -> None:
    path, name, _ = PROVIDERS[model]
    srv.script(Text("Hello from the script."))
    result = await make_llm(srv, model).text("You are Quinn.", "Which OS do I use? Linux.")
    assert result.text == "Hello from the script."
    [request] = srv.requests
    assert (request.path, request.model) == (path, name)
    assert "Which OS do I use? Linux." in request.text and "You are Quinn." in request.text
    assert result.usage.calls == 1 and result.usage.input_tokens > 0 and result.usage.output_tokens > 0
    assert result.usage.model == model


@pytest.mark.parametrize(
    "model", [pytest.param(m, marks=ANTHROPIC_WARNINGS) if m.startswith("anthropic") else m for m in PROVIDERS]
)
async def test_structured_output_per_provider(srv: ScriptedLLM, model: str) -> None:
    srv.script(Json({"city": "Lisbon"}))
    answer, usage = await make_llm(srv, model).structured("Extract.", "I live in Lisbon.", Answer)
    assert answer == Answer(city="Lisbon")
    assert srv.requests[-1].path == PROVIDERS[model][0]
    assert srv.requests[-1].purpose == "Answer"  # the schema's name, as each wire format carries it
    assert usage.calls == 1


@pytest.mark.parametrize("model", [m for m, (path, *_) in PROVIDERS.items() if path == "/v1/chat/completions"])
async def test_an_openai_compatible_server_is_told_what_each_call_is_for(srv: ScriptedLLM, model: str) -> None:
    """The purpose tag, not the prompt's wording, tells a reply, a tool round of it and a job's text call apart."""
    seam = make_llm(srv, model)
    srv.script(ToolCall("lookup", {"host": "db1"}), Text("The reply."), Text("A summary."))
    await seam.text("You are Quinn.", "Hello.", tools=[lookup])
    await seam.text("Summarize.", "The thread.", purpose="summarize", background=True)
    assert [r.purpose for r in srv.requests] == ["reply", "reply", "summarize"]
    assert srv.requests[-1].headers["x-quinn-purpose"] == "summarize"


async def test_temperature_reaches_an_openai_compatible_server(srv: ScriptedLLM) -> None:
    # The built-in openai:completions route drops temperature for unknown models (FACTS.md); ours keeps it.
    srv.script(Text("ok"))
    await make_llm(srv, "vllm/meta-llama/Llama-3.1-8B-Instruct", temperature=0.3).text("s", "u")
    assert srv.requests[-1].body_json["temperature"] == 0.3


def test_missing_key_is_a_config_error_naming_the_variable_even_with_a_router_key(
    srv: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIRASCOPE_API_KEY", "would-route-to-the-hosted-router")
    for model, var in (("openai/gpt-x", "OPENAI_API_KEY"), ("anthropic/claude-x", "ANTHROPIC_API_KEY"),
                       ("google/gemini-x", "GOOGLE_API_KEY")):  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            make_llm(srv, model, key=False, base=None)
        assert var in str(caught.value) and "llm.api_key_env" in str(caught.value)
    assert srv.requests == []


async def test_explicit_registration_wins_over_the_router_key(srv: ScriptedLLM, monkeypatch) -> None:
    monkeypatch.setenv("MIRASCOPE_API_KEY", "would-route-to-the-hosted-router")
    srv.script(Text("from the configured endpoint"))
    result = await make_llm(srv, "anthropic/claude-x").text("s", "u")
    assert result.text == "from the configured endpoint"
    assert [r.path for r in srv.requests] == ["/v1/messages"]  # the network guard fails anything else


def test_openai_compatible_prefix_needs_a_base_url(srv: ScriptedLLM) -> None:
    with pytest.raises(ConfigError, match=r"llm\.base_url"):
        make_llm(srv, "ollama/llama3.2", key=False, base=None)


def test_background_model_is_registered_and_used_for_structured_calls(srv: ScriptedLLM) -> None:
    seam = make_llm(srv, "ollama/big-model", background_model="ollama/small-model")
    assert seam.background_model_id == "ollama/small-model"


async def test_background_model_serves_extraction(srv: ScriptedLLM) -> None:
    srv.script(Json({"city": "Porto"}), Text("main"))
    seam = make_llm(srv, "ollama/big-model", background_model="ollama/small-model")
    await seam.structured("Extract.", "Porto", Answer)
    await seam.text("s", "u")
    assert [r.model for r in srv.requests] == ["small-model", "big-model"]


@pytest.mark.parametrize("model", ["openai/gpt-x", "anthropic/claude-x", "google/gemini-x", "ollama/m"])
async def test_one_retry_layer_the_sdk_retries_max_retries_times(srv: ScriptedLLM, model: str) -> None:
    srv.script(Error(503, "overloaded", retry=True), Text("second try"))
    result = await make_llm(srv, model, max_retries=1).text("s", "u")
    assert result.text == "second try"
    assert len(srv.requests) == 2  # exactly one retry: no second layer multiplying attempts


@pytest.mark.parametrize("model", ["openai/gpt-x", "anthropic/claude-x", "google/gemini-x", "ollama/m"])
async def test_failure_without_retries_is_retry_later(srv: ScriptedLLM, model: str) -> None:
    srv.script(Error(503, "overloaded", retry=True))
    with pytest.raises(RetryLater, match="overloaded"):
        await make_llm(srv, model, max_retries=0).text("s", "u")
    assert len(srv.requests) == 1


async def test_bad_credentials_are_a_config_error(srv: ScriptedLLM) -> None:
    srv.script(Error(401, "invalid api key"))
    with pytest.raises(ConfigError, match="credentials"):
        await make_llm(srv, "openai/gpt-x").text("s", "u")


@llm.tool
async def lookup(host: str) -> str:
    """Look a host up."""
    return f"{host} runs Linux"


async def test_tool_loop_is_bounded_and_usage_summed(srv: ScriptedLLM) -> None:
    seam = make_llm(srv, "ollama/m", max_tool_rounds=2)
    srv.responder = lambda request: ToolCall("lookup", {"host": "db1"}) if len(srv.requests) <= 3 else Text("done")
    result = await seam.text("s", "u", tools=[lookup])
    assert result.text == "done"
    # 2 rounds executed, a third refused with "write your reply now", then the answer: 4 requests in all.
    assert len(srv.requests) == 4
    assert result.tool_rounds == 3
    assert "db1 runs Linux" in srv.requests[1].text
    assert "limit of 2 tool rounds" in srv.requests[3].text
    assert result.usage.calls == 4
    assert result.usage.input_tokens == sum(count_tokens(r.text) for r in srv.requests)  # summed over the chain


async def test_a_model_that_never_stops_calling_tools_is_retried_later(srv: ScriptedLLM) -> None:
    seam = make_llm(srv, "ollama/m", max_tool_rounds=1)
    srv.responder = lambda request: ToolCall("lookup", {"host": "db1"})
    with pytest.raises(RetryLater, match="no text"):
        await seam.text("s", "u", tools=[lookup])
    assert len(srv.requests) == 3  # 1 executed round, 1 refused round, and no more


async def test_no_tool_rounds_means_no_tools_offered(srv: ScriptedLLM) -> None:
    srv.script(Text("plain"))
    result = await make_llm(srv, "ollama/m", max_tool_rounds=0).text("s", "u", tools=[lookup])
    assert result.text == "plain"
    assert [r.tool_names for r in srv.requests] == [[]]


def test_llm_config_rejects_a_model_without_provider() -> None:
    with pytest.raises(ValueError, match="provider/model"):
        LlmConfig(model="gpt-4")


@pytest.mark.parametrize("model", ["openai/gpt-x", "anthropic/claude-x", "google/gemini-x", "ollama/m"])
async def test_timeout_s_bounds_a_hung_request(srv: ScriptedLLM, model: str) -> None:
    srv.script(Delay(5, Text("too late")))
    with pytest.raises(RetryLater, match=model.split("/")[0] if model != "ollama/m" else "ollama/m"):
        await make_llm(srv, model, timeout_s=0.5).text("s", "u")
    assert len(srv.requests) == 1  # max_retries = 0: the timeout is not retried behind our back
