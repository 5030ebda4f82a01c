"""A scripted LLM server for tests: a real HTTP server on 127.0.0.1.

It speaks the wire formats the provider SDKs under Mirascope 2.8 use, so the
whole stack (Mirascope, the OpenAI/Anthropic SDKs, httpx) runs for real:

=====================================================  ==========================================
endpoint                                               used by
=====================================================  ==========================================
``POST /v1/responses``                                 ``openai/<model>`` (OpenAI Responses API)
``POST /v1/chat/completions``                          ``ollama/<model>``, ``openai/<m>:completions``
``POST /v1/messages`` (``?beta=true`` ignored)         ``anthropic/<model>``
``POST /v1/embeddings``                                the OpenAI SDK's ``embeddings.create``
``POST /v1beta/models/{model}:generateContent``        Google (``google-genai``), also
``POST /v1beta/models/{model}:streamGenerateContent``  ``?alt=sse`` streaming
``GET  /v1/models``                                    a one-model listing
=====================================================  ==========================================

Every endpoint answers ``stream: true`` (or ``:streamGenerateContent``) with SSE.

Base URLs (``ScriptedLLM.base_url`` is ``http://127.0.0.1:PORT``, without ``/v1``):

* OpenAI SDK based providers (``openai``, ``openai:completions``, ``ollama``) want the
  ``/v1`` suffix: use ``llm_server.openai_base_url`` (``base_url + "/v1"``).
* Anthropic and Google want the bare host: use ``llm_server.base_url``.

Usage::

    with ScriptedLLM() as srv:
        llm.register_provider("ollama", scope="ollama/", base_url=srv.openai_base_url, api_key="x")
        srv.script(Text("hello"), ToolCall("lookup", {"q": "x"}), Json({"a": 1}))
        ...
        assert "Linux" in srv.requests[-1].text

Replies are consumed one per chat request (embeddings never consume the queue); when the
queue is empty ``srv.responder(request)`` is asked, and when it returns ``None`` (or is
unset) the default ``Text("Scripted reply.")`` is sent, so a caller never hangs.

``srv.like_llama_cpp = True`` imitates llama-cpp-python's server on chat completions (measured,
tests/lab/real_llm.py): ``response_format: {"type": "json_schema"}`` gets a 500 without consuming a
reply, and scripted tool calls come back as ``<tool_call>{"name": …, "arguments": …}</tool_call>`` text.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import math
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "FORMAT_TOOL_PREFIX",
    "PURPOSE_HEADER",
    "REPLY",
    "Delay",
    "Disconnect",
    "Error",
    "Json",
    "RecordedRequest",
    "Reply",
    "ScriptedLLM",
    "Text",
    "ToolCall",
    "ToolCalls",
    "count_tokens",
    "pseudo_embedding",
    "purpose_of",
    "tune_provider_clients",
]

FORMAT_TOOL_PREFIX = "__mirascope_formatted_output_tool__"
"""Mirascope's reserved tool name for structured output in "tool" format mode."""

DEFAULT_REPLY_TEXT = "Scripted reply."


# ---------------------------------------------------------------------------------------
# Replies
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """A plain assistant text turn. ``finish="length"`` simulates a max-tokens cut-off."""

    text: str
    finish: str = "stop"


@dataclass(frozen=True)
class ToolCall:
    """One tool call (``args`` is sent as the JSON arguments). ``id`` is generated if None."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class ToolCalls:
    """Several tool calls in one assistant turn, optionally preceded by some text."""

    calls: list[ToolCall]
    text: str | None = None


@dataclass(frozen=True)
class Json:
    """Structured output. Sent as the text content, except when the request offers
    Mirascope's format tool (``__mirascope_formatted_output_tool__``, "tool" format mode):
    then it is a call of that tool with ``obj`` as arguments, as a real model would do.
    ``obj`` may also be a pre-serialised ``str`` (e.g. deliberately invalid JSON)."""

    obj: Any


@dataclass(frozen=True)
class Error:
    """An HTTP error in the provider's error format. ``retry`` sets ``x-should-retry``
    (``false`` by default, so the SDKs do not retry it on their own)."""

    status: int = 500
    message: str = "Scripted server error."
    retry: bool = False
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` (interrupted by ``stop()``) before sending ``then``."""

    seconds: float
    then: Reply | None = None


@dataclass(frozen=True)
class Disconnect:
    """Close the connection without any response (a connection error for the client)."""


Reply = Text | ToolCall | ToolCalls | Json | Error | Delay | Disconnect


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received.

    ``text`` is every message/system/instruction/input/tool-output string of the request
    flattened into one newline-joined string (``"Linux" in req.text``).
    ``kind`` is one of ``chat``, ``responses``, ``messages``, ``embeddings``, ``google``,
    ``other``. ``headers`` has lower-cased names.
    """

    path: str
    headers: dict[str, str]
    body_json: Any
    model: str | None
    text: str
    kind: str = "other"
    method: str = "POST"
    query: dict[str, list[str]] = field(default_factory=dict)
    stream: bool = False

    @property
    def tool_names(self) -> list[str]:
        """Names of the tools offered in the request (all formats)."""
        return [name for name, _ in _offered_tools(self.body_json)]

    @property
    def purpose(self) -> str:
        """What the call is for, as Quinn names it on the wire (`purpose_of`): ``"Extraction"``, ``"reply"``…;
        ``"embeddings"`` for an embedding request."""
        return "embeddings" if self.kind == "embeddings" else purpose_of(self.body_json, self.headers)


Responder = Callable[[RecordedRequest], "Reply | str | None"]

PURPOSE_HEADER = "x-quinn-purpose"
"""The header Quinn tags its calls with on OpenAI-compatible servers (quinn/agent/llm.py)."""
REPLY = "reply"


def purpose_of(body: Any, headers: dict[str, str] | None = None) -> str:
    """What a model request is for, from what Quinn sends as data, never from the prompt's wording.

    A structured call is named by its schema, as each wire format carries it: chat completions'
    ``response_format`` (``json_schema.name``, or the ``schema``'s title in json_object mode), the Responses
    API's ``text.format.name``, Anthropic's ``output_config`` schema title, Google's ``responseSchema`` title.
    Otherwise Quinn's own ``X-Quinn-Purpose`` header: the schema name in the prompt-only JSON mode, the template
    of a text call (``reply``, ``summarize``, ``consolidate``, ``digest``). Otherwise Mirascope's format tool
    (Anthropic's legacy tool mode), else ``"reply"``: a text call (or a tool-loop continuation of one).
    """
    name = _schema_name(body)
    if name:
        return name
    tag = {k.lower(): v for k, v in (headers or {}).items()}.get(PURPOSE_HEADER)
    return tag or _format_tool_name(body) or REPLY


def _schema_name(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    chat = body.get("response_format")
    if isinstance(chat, dict):
        if isinstance(chat.get("json_schema"), dict):
            return chat["json_schema"].get("name")
        if isinstance(chat.get("schema"), dict):  # {"type": "json_object", "schema": …} (llama.cpp)
            return chat["schema"].get("title")
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict) and text["format"].get("name"):
        return str(text["format"]["name"])
    output = (body.get("output_config") or {}).get("format")
    if isinstance(output, dict) and isinstance(output.get("schema"), dict):
        return output["schema"].get("title")
    generation = body.get("generationConfig") or body.get("generation_config")
    if isinstance(generation, dict):
        schema = generation.get("responseSchema") or generation.get("responseJsonSchema")
        if isinstance(schema, dict):
            return schema.get("title")
    return None


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def count_tokens(text: str) -> int:
    """The server's token estimate: about four characters a token, at least one."""
    return max(1, math.ceil(len(text) / 4))


def pseudo_embedding(text: str, dims: int = 384) -> list[float]:
    """A deterministic unit vector derived from a hash of ``text``."""
    values: list[float] = []
    for counter in itertools.count():
        digest = hashlib.blake2b(f"{counter}:{text}".encode(), digest_size=64).digest()
        for (n,) in struct.iter_unpack("<I", digest):
            values.append(n / 0xFFFFFFFF * 2.0 - 1.0)
        if len(values) >= dims:
            break
    values = values[:dims]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


_SKIP_KEYS = frozenset(
    {
        "role", "type", "id", "call_id", "tool_call_id", "tool_use_id", "name", "status",
        "cache_control", "detail", "media_type", "mime_type", "mimeType", "image_url", "url",
        "data", "file_data", "filename", "signature", "format", "file_id",
    }
)  # fmt: skip


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key not in _SKIP_KEYS:
                yield from _strings(value)


_TEXT_KEYS = ("instructions", "system", "systemInstruction", "messages", "input", "contents")


def _flatten_text(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    parts: list[str] = []
    for key in _TEXT_KEYS:
        if key in body:
            parts.extend(s for s in _strings(body[key]) if s)
    return "\n".join(parts)


def _offered_tools(body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, tool) for every function tool in a chat/responses/anthropic/google body."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(body, dict):
        return out
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("function"), dict):  # chat completions
            out.append((tool["function"].get("name", ""), tool))
        elif "functionDeclarations" in tool or "function_declarations" in tool:  # google
            decls = tool.get("functionDeclarations") or tool.get("function_declarations") or []
            out.extend((d.get("name", ""), d) for d in decls if isinstance(d, dict))
        elif "name" in tool:  # responses / anthropic
            out.append((tool["name"], tool))
    return out


def _format_tool_name(body: Any) -> str | None:
    for name, _ in _offered_tools(body):
        if name.startswith(FORMAT_TOOL_PREFIX):
            return name
    return None


def _json_text(obj: Any) -> str:
    return obj if isinstance(obj, str) else json.dumps(obj)


def _json_obj(obj: Any) -> Any:
    if isinstance(obj, str):
        try:
            return json.loads(obj)
        except ValueError:
            return {"value": obj}
    return obj


@dataclass
class _Turn:
    """A reply normalised to text + tool calls."""

    text: str | None
    calls: list[tuple[str, str, Any]]  # (id, name, args object)
    finish: str  # "stop" | "length" | "tool_calls"


_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _chunks(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


# ---------------------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------------------


class ScriptedLLM:
    """A scripted, recording LLM server (see the module docstring)."""

    def __init__(
        self,
        *,
        embedding_dims: int = 384,
        default_text: str = DEFAULT_REPLY_TEXT,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.embedding_dims = embedding_dims
        self.default_text = default_text
        self.responder: Responder | None = None
        self.like_llama_cpp = False
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> ScriptedLLM:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        handler = type("_BoundHandler", (_Handler,), {"llm": self})
        httpd = ThreadingHTTPServer((self._host, self._port), handler)
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True,
            name=f"ScriptedLLM:{httpd.server_address[1]}",
        )  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes pending Delay replies
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ScriptedLLM is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the base_url for Anthropic and Google providers."""
        return f"http://{self._host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: the base_url for openai / ollama providers."""
        return f"{self.base_url}/v1"

    # -- scripting ----------------------------------------------------------------------

    def script(self, *replies: Reply | str) -> ScriptedLLM:
        """Queue replies, consumed in order, one per chat request. A ``str`` is ``Text``."""
        with self._lock:
            self._queue.extend(Text(r) if isinstance(r, str) else r for r in replies)
        return self

    @property
    def pending(self) -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def requests_of(self, kind: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.kind == kind]

    def reset(self) -> None:
        """Drop queued replies, recorded requests and the responder."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self.responder = None

    def embed(self, text: str, dims: int | None = None) -> list[float]:
        """The vector the server returns for ``text``."""
        return pseudo_embedding(text, dims or self.embedding_dims)

    # -- internals used by the handler --------------------------------------------------

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)

    def _next_reply(self, req: RecordedRequest) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        if responder is not None:
            reply = responder(req)
            if reply is not None:
                return Text(reply) if isinstance(reply, str) else reply
        return Text(self.default_text)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):06d}"

    def _wait(self, seconds: float) -> None:
        self._stopping.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    llm: ScriptedLLM  # set on the per-server subclass
    protocol_version = "HTTP/1.0"  # one request per connection; SSE ends at close
    server_version = "ScriptedLLM/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing -----------------------------------------------------------------------

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode("utf-8", "replace")

    def _send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (timeout) - nothing to do

    def _send_sse(self, events: Iterable[tuple[str | None, Any]]) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for event, data in events:
                line = data if isinstance(data, str) else json.dumps(data)
                chunk = (f"event: {event}\n" if event else "") + f"data: {line}\n\n"
                self.wfile.write(chunk.encode())
                self.wfile.flush()
        except OSError:
            pass

    # -- routing ------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        body = None
        self.llm._record(self._recorded(path, body, None, "", "other", "GET"))
        if path.rstrip("/") in ("/v1/models", "/models"):
            self._send_json(
                200,
                {"object": "list", "data": [
                    {"id": "scripted", "object": "model", "created": 0, "owned_by": "scripted"}
                ]},
            )  # fmt: skip
        else:
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:
        split = urlsplit(self.path)
        path = split.path
        body = self._read_json()
        model = body.get("model") if isinstance(body, dict) else None
        stream = bool(isinstance(body, dict) and body.get("stream"))

        if path.endswith("/chat/completions"):
            kind = "chat"
        elif path.endswith("/responses"):
            kind = "responses"
        elif path.endswith("/messages"):
            kind = "messages"
        elif path.endswith("/embeddings"):
            kind = "embeddings"
        elif ":generateContent" in path or ":streamGenerateContent" in path:
            kind = "google"
            model = path.rsplit("/", 1)[-1].split(":", 1)[0]
            stream = ":streamGenerateContent" in path
        else:
            kind = "other"

        if kind == "embeddings":
            text = "\n".join(_strings(body.get("input") if isinstance(body, dict) else None))
        else:
            text = _flatten_text(body)
        req = self._recorded(path, body, model, text, kind, "POST", split.query, stream)
        self.llm._record(req)

        if kind == "other":
            self._send_json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        if kind == "embeddings":
            self._embeddings(req)
            return
        response_format = body.get("response_format") if isinstance(body, dict) else None
        if (
            self.llm.like_llama_cpp
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            self._error(kind, Error(500, "llama.cpp: response_format json_schema is not supported"))
            return

        reply: Reply | None = self.llm._next_reply(req)
        while isinstance(reply, Delay):
            self.llm._wait(reply.seconds)
            reply = reply.then if reply.then is not None else Text(self.llm.default_text)
        if isinstance(reply, Disconnect):
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if isinstance(reply, Error):
            self._error(kind, reply)
            return
        turn = self._turn(reply, req)
        {
            "chat": self._chat,
            "responses": self._responses,
            "messages": self._messages,
            "google": self._google,
        }[kind](req, turn)

    def _recorded(
        self,
        path: str,
        body: Any,
        model: Any,
        text: str,
        kind: str,
        method: str,
        query: str = "",
        stream: bool = False,
    ) -> RecordedRequest:
        return RecordedRequest(
            path=path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body_json=body,
            model=model if isinstance(model, str) else None,
            text=text,
            kind=kind,
            method=method,
            query=parse_qs(query),
            stream=stream,
        )

    def _turn(self, reply: Reply, req: RecordedRequest) -> _Turn:
        new_id = self.llm._new_id
        id_prefix = {"messages": "toolu_", "google": "fc_"}.get(req.kind, "call_")
        if isinstance(reply, Text):
            return _Turn(reply.text, [], "length" if reply.finish == "length" else "stop")
        if isinstance(reply, ToolCall):
            reply = ToolCalls([reply])
        if isinstance(reply, ToolCalls):
            if self.llm.like_llama_cpp and req.kind == "chat":
                text = "\n".join(f'<tool_call>\n{json.dumps({"name": c.name, "arguments": c.args})}\n</tool_call>'
                                 for c in reply.calls)  # fmt: skip
                return _Turn(text, [], "stop")
            calls = [(c.id or new_id(id_prefix), c.name, c.args) for c in reply.calls]
            return _Turn(reply.text, calls, "tool_calls")
        if isinstance(reply, Json):
            tool = _format_tool_name(req.body_json)
            if tool is not None:
                return _Turn(None, [(new_id(id_prefix), tool, _json_obj(reply.obj))], "tool_calls")
            return _Turn(_json_text(reply.obj), [], "stop")
        raise TypeError(f"not a scripted reply: {reply!r}")

    # -- errors -------------------------------------------------------------------------

    def _error(self, kind: str, err: Error) -> None:
        headers = {"x-should-retry": "true" if err.retry else "false", **err.headers}
        if kind == "messages":
            etype = _ANTHROPIC_ERROR_TYPES.get(err.status, "api_error")
            payload: Any = {"type": "error", "error": {"type": etype, "message": err.message}}
            headers.setdefault("request-id", self.llm._new_id("req_"))
        elif kind == "google":
            status = _GOOGLE_STATUS.get(err.status, "UNKNOWN")
            payload = {"error": {"code": err.status, "message": err.message, "status": status}}
        else:
            etype = "server_error" if err.status >= 500 else "invalid_request_error"
            payload = {"error": {"message": err.message, "type": etype, "param": None, "code": None}}
        self._send_json(err.status, payload, headers)

    # -- embeddings ---------------------------------------------------------------------

    def _embeddings(self, req: RecordedRequest) -> None:
        body = req.body_json if isinstance(req.body_json, dict) else {}
        raw_input = body.get("input", "")
        if isinstance(raw_input, str):
            inputs = [raw_input]
        elif raw_input and all(isinstance(x, int) for x in raw_input):
            inputs = [json.dumps(raw_input)]  # one tokenised input
        else:
            inputs = [x if isinstance(x, str) else json.dumps(x) for x in raw_input]
        dims = int(body.get("dimensions") or self.llm.embedding_dims)
        b64 = body.get("encoding_format") == "base64"  # the OpenAI SDK's default
        data = []
        for index, text in enumerate(inputs):
            vec = pseudo_embedding(text, dims)
            emb: Any = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode() if b64 else vec
            data.append({"object": "embedding", "index": index, "embedding": emb})
        tokens = sum(count_tokens(t) for t in inputs)
        self._send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": req.model or "scripted-embedding",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    # -- OpenAI chat completions --------------------------------------------------------

    def _chat(self, req: RecordedRequest, turn: _Turn) -> None:
        created = int(time.time())
        rid = self.llm._new_id("chatcmpl-")
        model = req.model or "scripted"
        finish = turn.finish
        prompt_tokens = count_tokens(req.text)
        completion_tokens = count_tokens((turn.text or "") + "".join(json.dumps(a) for *_, a in turn.calls))
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        tool_calls = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in turn.calls
        ]
        if not req.stream:
            message: dict[str, Any] = {"role": "assistant", "content": turn.text, "refusal": None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            self._send_json(
                200,
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                    "usage": usage,
                },
            )
            return

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}],
            }

        def events() -> Iterator[tuple[str | None, Any]]:
            yield None, chunk({"role": "assistant", "content": ""} if turn.text else {"role": "assistant"})
            if turn.text:
                for piece in _chunks(turn.text):
                    yield None, chunk({"content": piece})
            for index, (cid, name, args) in enumerate(turn.calls):
                yield None, chunk({"tool_calls": [{
                    "index": index, "id": cid, "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]})  # fmt: skip
                for piece in _chunks(json.dumps(args), 16):
                    yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            yield None, chunk({}, finish)
            options = (req.body_json or {}).get("stream_options") or {}
            if options.get("include_usage"):
                yield None, {
                    "id": rid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [], "usage": usage,
                }  # fmt: skip
            yield None, "[DONE]"

        self._send_sse(events())

    # -- OpenAI Responses ---------------------------------------------------------------

    def _responses(self, req: RecordedRequest, turn: _Turn) -> None:
        body = req.body_json if isinstance(req.body_json, dict) else {}
        new_id = self.llm._new_id
        output: list[dict[str, Any]] = []
        if turn.text is not None:
            output.append({
                "id": new_id("msg_"), "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}],
            })  # fmt: skip
        for cid, name, args in turn.calls:
            output.append({
                "id": new_id("fc_"), "type": "function_call", "call_id": cid, "name": name,
                "arguments": json.dumps(args), "status": "completed",
            })  # fmt: skip
        input_tokens = count_tokens(req.text)
        output_tokens = count_tokens((turn.text or "") + "".join(o.get("arguments", "") for o in output))
        incomplete = turn.finish == "length"
        response: dict[str, Any] = {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": float(int(time.time())),
            "status": "incomplete" if incomplete else "completed",
            "model": req.model or "scripted",
            "output": output,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": body.get("instructions"),
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": body.get("temperature", 1.0),
            "top_p": body.get("top_p", 1.0),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools", []),
            "text": body.get("text") or {"format": {"type": "text"}},
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }
        if not req.stream:
            self._send_json(200, response)
            return

        seq = itertools.count()

        def ev(etype: str, **fields: Any) -> tuple[str, dict[str, Any]]:
            return etype, {"type": etype, "sequence_number": next(seq), **fields}

        def events() -> Iterator[tuple[str | None, Any]]:
            started = {**response, "status": "in_progress", "output": [], "incomplete_details": None}
            yield ev("response.created", response=started)
            yield ev("response.in_progress", response=started)
            for index, item in enumerate(output):
                if item["type"] == "message":
                    text = item["content"][0]["text"]
                    yield ev("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "content": []})  # fmt: skip
                    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                    common = {"item_id": item["id"], "output_index": index, "content_index": 0}
                    yield ev("response.content_part.added", **common, part=part)
                    for piece in _chunks(text):
                        yield ev("response.output_text.delta", **common, delta=piece, logprobs=[])
                    yield ev("response.output_text.done", **common, text=text, logprobs=[])
                    yield ev("response.content_part.done", **common, part=item["content"][0])
                else:
                    yield ev("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "arguments": ""})  # fmt: skip
                    common = {"item_id": item["id"], "output_index": index}
                    for piece in _chunks(item["arguments"], 16):
                        yield ev("response.function_call_arguments.delta", **common, delta=piece)
                    yield ev("response.function_call_arguments.done", **common,
                             arguments=item["arguments"], name=item["name"])  # fmt: skip
                yield ev("response.output_item.done", output_index=index, item=item)
            final = "response.incomplete" if incomplete else "response.completed"
            yield ev(final, response=response)

        self._send_sse(events())

    # -- Anthropic messages -------------------------------------------------------------

    def _messages(self, req: RecordedRequest, turn: _Turn) -> None:
        content: list[dict[str, Any]] = []
        if turn.text is not None:
            content.append({"type": "text", "text": turn.text})
        for cid, name, args in turn.calls:
            content.append({"type": "tool_use", "id": cid, "name": name, "input": args})
        stop_reason = {"tool_calls": "tool_use", "length": "max_tokens"}.get(turn.finish, "end_turn")
        input_tokens = count_tokens(req.text)
        output_tokens = count_tokens((turn.text or "") + "".join(json.dumps(a) for *_, a in turn.calls))
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": self.llm._new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": req.model or "scripted",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if not req.stream:
            self._send_json(200, message, {"request-id": self.llm._new_id("req_")})
            return

        def events() -> Iterator[tuple[str | None, Any]]:
            start_usage = {**usage, "output_tokens": 1}
            yield "message_start", {"type": "message_start", "message": {
                **message, "content": [], "stop_reason": None, "usage": start_usage,
            }}  # fmt: skip
            for index, block in enumerate(content):
                if block["type"] == "text":
                    yield "content_block_start", {
                        "type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""},
                    }  # fmt: skip
                    for piece in _chunks(block["text"]):
                        yield "content_block_delta", {
                            "type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        }  # fmt: skip
                else:
                    yield "content_block_start", {
                        "type": "content_block_start", "index": index,
                        "content_block": {**block, "input": {}},
                    }  # fmt: skip
                    for piece in _chunks(json.dumps(block["input"]), 16):
                        yield "content_block_delta", {
                            "type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        }  # fmt: skip
                yield "content_block_stop", {"type": "content_block_stop", "index": index}
            yield (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": output_tokens},
                },
            )
            yield "message_stop", {"type": "message_stop"}

        self._send_sse(events())

    # -- Google generateContent ---------------------------------------------------------

    def _google(self, req: RecordedRequest, turn: _Turn) -> None:
        parts: list[dict[str, Any]] = []
        if turn.text is not None:
            parts.append({"text": turn.text})
        for cid, name, args in turn.calls:
            parts.append({"functionCall": {"id": cid, "name": name, "args": args}})
        prompt_tokens = count_tokens(req.text)
        out_tokens = count_tokens((turn.text or "") + "".join(json.dumps(a) for *_, a in turn.calls))
        payload = {
            "candidates": [{
                "content": {"role": "model", "parts": parts},
                "finishReason": "MAX_TOKENS" if turn.finish == "length" else "STOP",
                "index": 0,
            }],
            "usageMetadata": {
                "promptTokenCount": prompt_tokens,
                "candidatesTokenCount": out_tokens,
                "totalTokenCount": prompt_tokens + out_tokens,
            },
            "modelVersion": req.model or "scripted",
            "responseId": self.llm._new_id("gresp_"),
        }  # fmt: skip
        if req.stream:
            self._send_sse([(None, payload)])
        else:
            self._send_json(200, payload)


# ---------------------------------------------------------------------------------------
# SDK client tuning
# ---------------------------------------------------------------------------------------


def tune_provider_clients(provider: Any, *, timeout: float | None = None, max_retries: int = 0) -> Any:
    """Set the SDK timeout / retry count on every OpenAI or Anthropic client a Mirascope
    provider holds (including the sub-providers of ``OpenAIProvider`` and Anthropic's beta
    provider). Mirascope 2.8 builds its SDK clients with the SDK defaults (600 s timeout,
    2 retries) and offers no knob for them. Returns ``provider``.

    ``max_retries=0`` matters for timeout tests: the SDKs retry a client-side timeout
    whatever ``x-should-retry`` says.
    """
    options: dict[str, Any] = {"max_retries": max_retries}
    if timeout is not None:
        options["timeout"] = timeout
    seen: set[int] = set()

    def visit(obj: Any) -> None:
        if id(obj) in seen or not hasattr(obj, "__dict__"):
            return
        seen.add(id(obj))
        for name, value in list(vars(obj).items()):
            module = type(value).__module__
            if module.startswith(("openai", "anthropic")) and hasattr(value, "with_options"):
                setattr(obj, name, value.with_options(**options))
            elif type(value).__module__.startswith("mirascope.llm.providers"):
                visit(value)

    visit(provider)
    return provider
