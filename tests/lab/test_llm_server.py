"""The scripted LLM server, exercised through Mirascope 2.8 and the real provider SDKs."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from mirascope import llm
from openai import OpenAI
from pydantic import BaseModel, ValidationError

from quinn.lab.wait import wait_for
from tests.lab.llm_server import (
    Delay,
    Disconnect,
    Error,
    Json,
    RecordedRequest,
    ScriptedLLM,
    Text,
    ToolCall,
    ToolCalls,
    tune_provider_clients,
)

pytestmark = pytest.mark.lab  # every test here talks to the scripted model's HTTP server

# Anthropic + a bare pydantic `format=` goes through `client.beta.messages.parse(output_format=...)`
# (Mirascope 2.8.2, anthropic 0.125): the SDK deprecates `output_format`, and dumping the
# parsed text block trips a pydantic serializer warning. Both happen against the real API too.
ANTHROPIC_STRICT_FORMAT_WARNINGS = [
    pytest.mark.filterwarnings("ignore:The 'output_format' parameter is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning"),
]

API_KEY = "test-key"

# model id -> (endpoint path, model name the server must see)
MODELS = {
    "openai/gpt-x": ("/v1/responses", "gpt-x"),
    "ollama/qwen/qwen3-8b": ("/v1/chat/completions", "qwen/qwen3-8b"),
    "openai/gpt-x:completions": ("/v1/chat/completions", "gpt-x"),
    "anthropic/claude-x": ("/v1/messages", "claude-x"),
}
MODEL_IDS = list(MODELS)


class Book(BaseModel):
    title: str
    pages: int


@llm.tool
def lookup_os(host: str) -> str:
    """Return the operating system of a host."""
    return f"{host} runs Linux"


@llm.tool
async def lookup_os_async(host: str) -> str:
    """Return the operating system of a host."""
    await asyncio.sleep(0)
    return f"{host} runs Linux"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as srv:
        yield srv


def use(srv: ScriptedLLM, model_id: str) -> llm.Model:
    """Register (only) the provider ``model_id`` needs against ``srv``; return the model.

    Building a provider costs ~0.1-0.2 s (SDK clients, SSL contexts), so a test registers
    what it uses. OpenAI-SDK based providers want ``.../v1``; Anthropic wants the bare host.
    """
    prefix = model_id.split("/", 1)[0]
    if prefix == "openai":
        llm.register_provider("openai", scope="openai/", base_url=srv.openai_base_url, api_key=API_KEY)
    elif prefix == "ollama":
        llm.register_provider("ollama", scope="ollama/", base_url=srv.openai_base_url, api_key=API_KEY)
    elif prefix == "anthropic":
        llm.register_provider("anthropic", scope="anthropic/", base_url=srv.base_url, api_key=API_KEY)
    else:  # pragma: no cover
        raise ValueError(model_id)
    return llm.Model(model_id)


@pytest.fixture
def srv(server: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLM]:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MIRASCOPE_API_KEY", "OLLAMA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    server.reset()
    llm.reset_provider_registry()
    yield server
    server.reset()
    llm.reset_provider_registry()


def only_request(srv: ScriptedLLM) -> RecordedRequest:
    reqs = srv.requests
    assert len(reqs) == 1, reqs
    return reqs[0]


# ---------------------------------------------------------------------------------------
# plain text
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_plain_text(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(Text("Hello from the script."))
    resp = use(srv, model_id).call(
        [llm.messages.system("You are Quinn."), llm.messages.user("Which OS? Linux or BSD?")]
    )
    assert resp.text() == "Hello from the script."
    assert resp.usage is not None
    assert resp.usage.input_tokens > 0
    assert resp.usage.output_tokens > 0

    req = only_request(srv)
    path, name = MODELS[model_id]
    assert req.path == path
    assert req.model == name
    assert "Linux" in req.text
    assert "You are Quinn." in req.text
    if req.kind == "messages":
        assert req.headers["x-api-key"] == API_KEY
    else:
        assert req.headers["authorization"] == f"Bearer {API_KEY}"


def test_default_reply_and_responder(srv: ScriptedLLM) -> None:
    model = use(srv, "ollama/m")
    assert model.call("hi").text() == "Scripted reply."
    srv.responder = lambda req: f"echo: {req.text}"
    assert model.call("ping").text() == "echo: ping"
    srv.responder = lambda req: None  # None falls back to the default
    assert model.call("x").text() == "Scripted reply."
    srv.script("queued first")  # the queue wins over the responder
    srv.responder = lambda req: "responder"
    assert model.call("y").text() == "queued first"
    assert model.call("z").text() == "responder"
    assert srv.pending == 0
    assert len(srv.requests) == 5


def test_slashy_model_names(srv: ScriptedLLM) -> None:
    """Only the ollama provider keeps a model name with slashes whole."""
    use(srv, "ollama/qwen/qwen3-8b").call("a")
    use(srv, "openai/qwen/qwen3-8b:completions").call("b")
    use(srv, "openai/qwen/qwen3-8b").call("c")
    assert [(r.path, r.model) for r in srv.requests] == [
        ("/v1/chat/completions", "qwen/qwen3-8b"),
        ("/v1/chat/completions", "qwen"),  # cut at the first '/'
        ("/v1/responses", "qwen"),
    ]


def test_openai_completions_drops_params_for_unknown_models(srv: ScriptedLLM) -> None:
    """openai:completions treats unknown models as reasoning models (only a log line)."""
    use(srv, "openai/qwen3:completions").call("a")
    llm.Model("openai/qwen3:completions", temperature=0.2, max_tokens=50).call("b")
    use(srv, "ollama/qwen3")
    llm.Model("ollama/qwen3", temperature=0.2, max_tokens=50).call("c")
    completions, ollama = srv.requests[1].body_json, srv.requests[2].body_json
    assert "temperature" not in completions
    assert completions["max_completion_tokens"] == 50
    assert ollama["temperature"] == 0.2
    assert ollama["max_tokens"] == 50


def test_ollama_under_another_scope_keeps_the_scope(srv: ScriptedLLM) -> None:
    """OllamaProvider strips only "ollama/": under another scope the prefix is sent."""
    llm.register_provider("ollama", scope="local/", base_url=srv.openai_base_url, api_key=API_KEY)
    llm.Model("local/qwen/qwen3-8b").call("a")
    assert srv.requests[-1].model == "local/qwen/qwen3-8b"


class LocalProvider(llm.providers.BaseOpenAICompletionsProvider):
    """A chat-completions provider for any OpenAI-compatible server, scope "local/"."""

    id = "local"  # type: ignore[assignment]
    default_scope = "local/"
    api_key_env_var = "LOCAL_LLM_API_KEY"
    api_key_required = False
    provider_name = "Local"

    def _model_name(self, model_id: str) -> str:
        return model_id.split("/", 1)[1].removesuffix(":completions")


def test_custom_openai_compatible_provider(srv: ScriptedLLM) -> None:
    llm.register_provider(LocalProvider(api_key=API_KEY, base_url=srv.openai_base_url), scope="local/")
    srv.script(ToolCall("lookup_os", {"host": "h"}), Text("done"), Json({"title": "T", "pages": 1}))
    model = llm.Model("local/qwen/qwen3-8b", temperature=0.1)
    resp = model.call("os?", tools=[lookup_os])
    resp = resp.resume(resp.execute_tools())
    assert resp.text() == "done"
    assert resp.provider_id == "local"
    assert model.call("book", format=Book).parse() == Book(title="T", pages=1)
    assert [(r.model, r.body_json["temperature"]) for r in srv.requests] == [("qwen/qwen3-8b", 0.1)] * 3
    assert srv.requests[-1].tool_names == ["__mirascope_formatted_output_tool__"]  # tool mode


def test_finish_reason_length(srv: ScriptedLLM) -> None:
    for model_id in MODEL_IDS:
        srv.script(Text("cut off", finish="length"))
        resp = use(srv, model_id).call("go")
        assert resp.finish_reason == llm.FinishReason.MAX_TOKENS, model_id
        assert resp.text() == "cut off"


# ---------------------------------------------------------------------------------------
# tools
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_tool_round_trip(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(ToolCall("lookup_os", {"host": "mail1"}), Text("mail1 runs Linux."))
    resp = use(srv, model_id).call("What OS does mail1 run?", tools=[lookup_os])
    assert [(c.name, json.loads(c.args)) for c in resp.tool_calls] == [("lookup_os", {"host": "mail1"})]
    input_tokens = resp.usage.input_tokens if resp.usage else 0
    while resp.tool_calls:
        outputs = resp.execute_tools()
        assert [o.result for o in outputs] == ["mail1 runs Linux"]
        resp = resp.resume(outputs)
        input_tokens += resp.usage.input_tokens if resp.usage else 0
    assert resp.text() == "mail1 runs Linux."
    assert input_tokens > 0

    first, second = srv.requests
    assert first.tool_names == ["lookup_os"]
    assert "What OS does mail1 run?" in second.text  # history is resent
    assert "mail1 runs Linux" in second.text  # with the tool output


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_parallel_tool_calls(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(
        ToolCalls([ToolCall("lookup_os", {"host": "a"}), ToolCall("lookup_os", {"host": "b"})]),
        Text("both Linux"),
    )
    resp = use(srv, model_id).call("a and b?", tools=[lookup_os])
    assert len(resp.tool_calls) == 2
    outputs = resp.execute_tools()
    assert [o.result for o in outputs] == ["a runs Linux", "b runs Linux"]
    assert resp.resume(outputs).text() == "both Linux"
    assert "b runs Linux" in srv.requests[-1].text


# ---------------------------------------------------------------------------------------
# structured output
# ---------------------------------------------------------------------------------------

FORMAT_CASES = [
    pytest.param("openai/gpt-x", Book, id="responses-strict"),
    pytest.param("ollama/qwen/qwen3-8b", Book, id="ollama-tool"),
    pytest.param("openai/gpt-x:completions", Book, id="completions-strict"),
    pytest.param("anthropic/claude-x", llm.format(Book, mode="tool"), id="anthropic-tool"),
    pytest.param("anthropic/claude-x", Book, id="anthropic-strict-beta", marks=ANTHROPIC_STRICT_FORMAT_WARNINGS),
]


@pytest.mark.parametrize(("model_id", "fmt"), FORMAT_CASES)
def test_structured_output(srv: ScriptedLLM, model_id: str, fmt: object) -> None:
    srv.script(Json({"title": "Dune", "pages": 412}))
    resp = use(srv, model_id).call("Recommend a book", format=fmt)  # type: ignore[call-overload]
    assert resp.parse() == Book(title="Dune", pages=412)
    req = only_request(srv)
    assert "Recommend a book" in req.text


@pytest.mark.parametrize(("model_id", "fmt"), FORMAT_CASES)
def test_structured_output_invalid_json(srv: ScriptedLLM, model_id: str, fmt: object) -> None:
    srv.script(Json('{"title": "Dune"'))  # broken JSON, as a small model might send
    if model_id.startswith("anthropic/") and fmt is Book:
        # the SDK's beta parse() validates during call(): a raw pydantic error, no ParseError
        with pytest.raises(ValidationError):
            use(srv, model_id).call("x", format=fmt)  # type: ignore[call-overload]
        return
    resp = use(srv, model_id).call("x", format=fmt)  # type: ignore[call-overload]
    with pytest.raises(llm.ParseError):
        resp.parse()


# ---------------------------------------------------------------------------------------
# errors and timeouts
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_server_error_surfaces_without_retries(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(Error(500, "boom"), Text("never sent"))
    started = time.monotonic()
    with pytest.raises(llm.ServerError) as info:
        use(srv, model_id).call("hi")
    assert time.monotonic() - started < 5
    assert "boom" in str(info.value)
    assert len(srv.requests) == 1  # x-should-retry: false -> the SDK did not retry
    assert srv.pending == 1


@pytest.mark.parametrize(
    ("status", "error_type"),
    [
        (400, llm.BadRequestError),
        (401, llm.AuthenticationError),
        (404, llm.NotFoundError),
        (429, llm.RateLimitError),
        (503, llm.ServerError),
    ],
)
@pytest.mark.parametrize("model_id", ["openai/gpt-x", "ollama/m", "anthropic/claude-x"])
def test_error_statuses(srv: ScriptedLLM, model_id: str, status: int, error_type: type) -> None:
    srv.script(Error(status, f"status {status}"))
    with pytest.raises(error_type):
        use(srv, model_id).call("hi")
    assert len(srv.requests) == 1


def test_sdk_retries_when_allowed(srv: ScriptedLLM) -> None:
    """Error(retry=True) lets the SDK retry on its own (its default max_retries=2)."""
    model = use(srv, "ollama/m")
    tune_provider_clients(model.provider, max_retries=1)
    srv.script(Error(500, retry=True, headers={"retry-after-ms": "1"}), Text("second try"))
    assert model.call("hi").text() == "second try"
    assert len(srv.requests) == 2


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_timeout(srv: ScriptedLLM, model_id: str) -> None:
    model = use(srv, model_id)
    tune_provider_clients(model.provider, timeout=0.3, max_retries=0)
    srv.script(Delay(3, then=Text("too late")))
    started = time.monotonic()
    with pytest.raises(llm.TimeoutError):
        model.call("hi")
    assert time.monotonic() - started < 2.5
    assert len(srv.requests) == 1


def test_timeout_is_retried_by_the_sdk(srv: ScriptedLLM) -> None:
    """A client-side timeout is retried by the SDK whatever x-should-retry says."""
    model = use(srv, "ollama/m")
    tune_provider_clients(model.provider, timeout=0.3, max_retries=1)
    srv.script(Delay(3), Text("second attempt"))
    assert model.call("hi").text() == "second attempt"
    assert len(srv.requests) == 2


def test_delay_then_reply(srv: ScriptedLLM) -> None:
    srv.script(Delay(0.2, then=Text("slow but fine")))
    assert use(srv, "anthropic/claude-x").call("hi").text() == "slow but fine"


def test_disconnect_is_a_connection_error(srv: ScriptedLLM) -> None:
    model = use(srv, "openai/gpt-x")
    tune_provider_clients(model.provider, max_retries=0)
    srv.script(Disconnect())
    with pytest.raises(llm.ConnectionError):
        model.call("hi")
    assert len(srv.requests) == 1


# ---------------------------------------------------------------------------------------
# async and streaming
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", MODEL_IDS)
async def test_call_async_tool_loop(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(ToolCall("lookup_os_async", {"host": "mx"}), Text("mx runs Linux."))
    resp = await use(srv, model_id).call_async("What OS on mx?", tools=[lookup_os_async])
    while resp.tool_calls:
        outputs = await resp.execute_tools()
        resp = await resp.resume(outputs)
    assert resp.text() == "mx runs Linux."
    assert len(srv.requests) == 2
    assert "mx runs Linux" in srv.requests[-1].text


@pytest.mark.parametrize("model_id", MODEL_IDS)
async def test_call_async_structured_and_error(srv: ScriptedLLM, model_id: str) -> None:
    fmt = llm.format(Book, mode="tool") if model_id.startswith("anthropic/") else Book
    srv.script(Json({"title": "Emma", "pages": 9}), Error(500))
    resp = await use(srv, model_id).call_async("a book", format=fmt)
    assert resp.parse() == Book(title="Emma", pages=9)
    with pytest.raises(llm.ServerError):
        await use(srv, model_id).call_async("again")
    assert len(srv.requests) == 2


async def test_concurrent_async_calls(srv: ScriptedLLM) -> None:
    srv.responder = lambda req: req.text.upper()
    model = use(srv, "ollama/m")
    resps = await asyncio.gather(*(model.call_async(f"msg {i}") for i in range(20)))
    assert sorted(r.text() for r in resps) == sorted(f"MSG {i}" for i in range(20))
    assert len(srv.requests) == 20


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_stream_text_and_tools(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(Text("streamed Linux answer"), ToolCall("lookup_os", {"host": "s1"}))
    stream = use(srv, model_id).stream("stream please")
    # text_stream() ends every text part with a "\n" separator; stream.text() does not
    assert "".join(stream.text_stream()) == "streamed Linux answer\n"
    assert stream.text() == "streamed Linux answer"
    assert stream.usage is not None
    assert stream.usage.output_tokens > 0
    assert srv.requests[-1].stream

    stream = use(srv, model_id).stream("tool please", tools=[lookup_os])
    stream.finish()
    assert [(c.name, json.loads(c.args)) for c in stream.tool_calls] == [("lookup_os", {"host": "s1"})]


@pytest.mark.parametrize("model_id", MODEL_IDS)
async def test_stream_async(srv: ScriptedLLM, model_id: str) -> None:
    srv.script(Text("async stream"))
    stream = await use(srv, model_id).stream_async("go")
    await stream.finish()
    assert stream.text() == "async stream"
    assert stream.usage is not None
    assert stream.usage.input_tokens > 0


# ---------------------------------------------------------------------------------------
# embeddings, google, server behaviour
# ---------------------------------------------------------------------------------------


def test_embeddings(srv: ScriptedLLM) -> None:
    client = OpenAI(base_url=srv.openai_base_url, api_key=API_KEY, max_retries=0)
    res = client.embeddings.create(model="nomic-embed", input=["hello", "world", "hello"])  # base64
    vecs = [d.embedding for d in res.data]
    assert [len(v) for v in vecs] == [384, 384, 384]
    assert vecs[0] == pytest.approx(vecs[2])
    assert vecs[0] != pytest.approx(vecs[1])
    assert vecs[0] == pytest.approx(srv.embed("hello"), abs=1e-6)
    assert sum(x * x for x in vecs[0]) == pytest.approx(1.0, abs=1e-4)
    assert res.usage.prompt_tokens > 0

    floats = client.embeddings.create(model="nomic-embed", input="hello", encoding_format="float", dimensions=16)
    assert floats.data[0].embedding == pytest.approx(srv.embed("hello", 16))
    assert srv.requests[-1].kind == "embeddings"
    assert srv.requests[-1].text == "hello"
    srv.script(Text("unused"))
    client.embeddings.create(model="e", input="x")
    assert srv.pending == 1  # embeddings never consume scripted replies


def _post(url: str, body: object) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_google_generate_content_raw(srv: ScriptedLLM) -> None:
    """Not verified through Mirascope: google-genai is not installed in this venv."""
    srv.script(ToolCall("lookup_os", {"host": "g"}), Error(503, "busy"))
    url = f"{srv.base_url}/v1beta/models/gemini-x:generateContent"
    body = {
        "contents": [{"role": "user", "parts": [{"text": "OS of g? Linux?"}]}],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "tools": [{"functionDeclarations": [{"name": "lookup_os", "parameters": {}}]}],
    }
    status, payload = _post(url, body)
    assert status == 200
    part = payload["candidates"][0]["content"]["parts"][0]
    assert part["functionCall"]["name"] == "lookup_os"
    assert part["functionCall"]["args"] == {"host": "g"}
    assert payload["usageMetadata"]["promptTokenCount"] > 0
    req = srv.requests[-1]
    assert (req.kind, req.model, req.tool_names) == ("google", "gemini-x", ["lookup_os"])
    assert "Linux" in req.text
    assert "be brief" in req.text
    status, payload = _post(url, body)
    assert status == 503
    assert payload["error"]["status"] == "UNAVAILABLE"


def test_unknown_route_is_404(srv: ScriptedLLM) -> None:
    status, payload = _post(f"{srv.base_url}/v2/nothing", {})
    assert status == 404
    assert "error" in payload


def test_stop_interrupts_delay_and_restart_works() -> None:
    srv = ScriptedLLM().start()
    srv.script(Delay(30))
    result: list[object] = []

    def call() -> None:
        request = urllib.request.Request(
            f"{srv.openai_base_url}/chat/completions",
            data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as res:
                result.append(res.status)
        except Exception as exc:
            result.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    wait_for(lambda: srv.requests, "the request at the server", timeout_s=10, interval_s=0.01)
    started = time.monotonic()
    srv.stop()
    worker.join(timeout=10)
    assert time.monotonic() - started < 5
    assert not worker.is_alive()
    with ScriptedLLM() as again:
        assert again.port > 0
