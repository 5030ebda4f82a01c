"""The one seam to language models: every model call in Quinn goes through ``LLM``.

Providers are registered explicitly from config (never Mirascope's implicit hosted router). One retry layer:
the provider SDK's own (``max_retries``, with its backoff), Mirascope's retries unused. Token usage is summed
across a tool loop and returned, so the caller records it per user, per email and per job.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import httpx
from mirascope import llm
from mirascope.llm.providers.openai.completions.base_provider import BaseOpenAICompletionsProvider
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel, ValidationError

from quinn.agent.grounding import guessed
from quinn.agent.json_text import (
    echoed,
    find_json,
    is_schema_dump,
    opens_json,
    tool_calls_in_text,
    unfenced,
    whole_json,
)
from quinn.agent.salvage import rescaled, without_invalid_items
from quinn.config import LlmConfig
from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.logs import fingerprint
from quinn.sdks import skipped

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
NATIVE = ("openai", "anthropic", "google")
# Structured-output modes on an OpenAI-compatible server, tried in this order until the server takes one.
COMPATIBLE_MODES = ("json_schema", "json_object", "prompt")

# What servers say when the prompt and the answer's room are more than the model's context. OpenAI, vLLM and
# llama-cpp-python: "This model's maximum context length is 4096 tokens. However, you requested 4582 tokens (4182
# in the messages, 400 in the completion)" (code context_length_exceeded); llama.cpp's own server:
# "the request exceeds the available context size" (exceed_context_size_error, n_prompt_tokens, n_ctx).
_OVERFLOW_WORDS = re.compile(
    r"context_length_exceeded|exceed_context_size|maximum context length|exceeds? (?:the )?(?:available )?context"
    r"|context window", re.I,
)  # fmt: skip
# The last try after a reply that was JSON or a copy, twice: one answer sampled at this temperature (or the
# configured one, if higher). At temperature 0 the model writes the same paste on every retry of the mail: in the
# 1.5B run of bench/long_memory one mail was deferred four times over the same 369 characters, and three replies
# of 93 never came within the question's wait.
SAMPLED_TEMPERATURE = 0.7
# A reply naming what nothing the model was sent holds (grounding.guessed) is sent back once with this note (issue
# 32, bench/long_memory: asked for a dentist never named, the 1.5B answered "Dr. Smith"; for a car forgotten on
# the person's request, "a Toyota Camry"). General knowledge rightly names what no prompt holds: the model may
# write the same reply again, and its second answer is the reply either way.
GUESSES_NOTE = ("Your reply names {names}, which nothing above says. If that is a fact of this person's own life "
                "(their family, home, work, health, money, belongings, plans) that they never told you, do not guess "
                "it: write the reply again and say plainly that you do not know it. If it is general knowledge or a "
                "suggestion of yours, write the same reply again.")  # fmt: skip
# How the reply prompt cites what it shows ("[memory:12]", "[mail:2026-03-14]"). A reply with no word of its own
# once these are left out is no reply: the 1.5B of bench/long_memory answered "- [memory:32]", and it was mailed.
_CITE = re.compile(r"\[(?:memory|mail):[^\]\s]{1,40}\]")


def only_cites(text: str) -> bool:
    """Whether ``text`` cites the prompt's memories or past mail and says nothing else (marks and punctuation)."""
    return bool(_CITE.search(text)) and not re.search(r"[^\W_]", _CITE.sub(" ", text))


_CONTEXT_LIMIT = re.compile(r"(?:maximum context length is|context window of|n_ctx['\"]?\s*[:=]\s*)\s*(\d+)", re.I)
_REQUESTED = re.compile(r"(?:you requested|requested tokens \(|n_prompt_tokens['\"]?\s*[:=]\s*)\s*(\d+)", re.I)


class PromptTooLong(RetryLater):
    """The prompt and the room for the answer are more than the model's context. Sent again as it is, it fails
    again: the caller may send less. ``limit`` and ``requested`` are in tokens, when the server said them."""

    def __init__(self, message: str, limit: int | None = None, requested: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.requested = requested

    def keep_share(self) -> float:
        """How much of the prompt's variable parts (messages, memories, files) to keep when asking again: the share
        of the request the model's context holds, less a fifth for the fixed parts (instructions, schema, the
        answer's room); half when the server gave no figures."""
        if self.limit and self.requested and self.requested > self.limit:
            return max(0.1, self.limit / self.requested * 0.8)
        return 0.5


def context_overflow(exc: Exception, model: str) -> PromptTooLong | None:
    """``exc`` as a ``PromptTooLong`` when the server refused the request for its length, else None. Not a refused
    mode or refused tools: taken for one, it would switch a model that handles both to a worse mode for good."""
    if not isinstance(exc, llm.BadRequestError | llm.ServerError):  # llama.cpp's own server: 400; some proxies 500
        return None
    text = str(exc)
    if not _OVERFLOW_WORDS.search(text):
        return None
    limit, requested = _CONTEXT_LIMIT.search(text), _REQUESTED.search(text)
    return PromptTooLong(
        f"the prompt is longer than model {model}'s context: {text[:300]}",
        int(limit.group(1)) if limit else None,
        int(requested.group(1)) if requested else None,
    )


# Mirascope wraps the OpenAI/Anthropic SDK errors, but google-genai lets httpx's timeouts and connection errors
# through unwrapped: those are transient like any other provider's.
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, OSError)


class OpenAICompatibleProvider(BaseOpenAICompletionsProvider):
    """Chat completions on any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio).

    Only the "<prefix>/" is cut from the model id, so names with slashes (``qwen/qwen3-8b``) stay whole.
    """

    id: ClassVar[str] = "ollama"
    default_scope: ClassVar[str | list[str]] = "ollama/"
    default_base_url: ClassVar[str | None] = None
    api_key_env_var: ClassVar[str] = "OPENAI_COMPATIBLE_API_KEY"
    api_key_required: ClassVar[bool] = False
    provider_name: ClassVar[str | None] = "OpenAI-compatible"

    def __init__(self, *, prefix: str, base_url: str, api_key: str | None, timeout_s: float, retries: int) -> None:
        self._prefix = prefix + "/"
        key = api_key or "unused"
        self.client = OpenAI(api_key=key, base_url=base_url, timeout=timeout_s, max_retries=retries)
        self.async_client = AsyncOpenAI(api_key=key, base_url=base_url, timeout=timeout_s, max_retries=retries)
        _send_response_format(self.async_client)

    def _model_name(self, model_id: str) -> str:
        # `openai/<name>:completions` is Mirascope's spelling of chat completions; the server wants the name.
        return model_id.removeprefix(self._prefix).removesuffix(":completions")


# The response_format of the structured call in progress ("json_object" mode), read where the compatible
# provider sends its request: Mirascope has no way to send {"type": "json_object", "schema": …}, which
# llama.cpp's server honours (it answers 500 to {"type": "json_schema"}, FACTS.md).
_RESPONSE_FORMAT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("response_format",
                                                                                          default=None)  # fmt: skip
# What the call in progress is for ("reply", "summarize", or a structured call's schema name "Extraction"), sent
# as a header to OpenAI-compatible servers: a stable tag for proxies' logs and the scripted test model, which
# must not tell calls apart by the wording of admin-editable templates (issue 17). A schema name alone does not
# do: a text call has none, and in "prompt" mode the schema travels only inside the prompt.
PURPOSE_HEADER = "X-Quinn-Purpose"
_PURPOSE: contextvars.ContextVar[str | None] = contextvars.ContextVar("purpose", default=None)


def _send_response_format(client: AsyncOpenAI) -> None:
    """Make `client`'s chat completions send `_RESPONSE_FORMAT` and `_PURPOSE` when set for the current call."""
    completions = client.chat.completions
    create = completions.create

    async def create_with_format(*args: Any, **kwargs: Any) -> Any:
        response_format = _RESPONSE_FORMAT.get()
        if response_format is not None:
            kwargs["response_format"] = response_format
        purpose = _PURPOSE.get()
        if purpose is not None:
            kwargs["extra_headers"] = {**(kwargs.get("extra_headers") or {}), PURPOSE_HEADER: purpose}
        return await create(*args, **kwargs)

    completions.create = create_with_format  # type: ignore[method-assign]


@dataclass(frozen=True)
class Usage:
    """Tokens and calls of one call chain."""

    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.model, self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.calls + other.calls)  # fmt: skip


@dataclass(frozen=True)
class TextResult:
    """A text answer and what it cost."""

    text: str
    usage: Usage
    tool_rounds: int = 0


def provider_prefix(model: str) -> str:
    """``"openai/gpt-4.1"`` -> ``"openai"``."""
    return model.split("/", 1)[0]


def _tune(provider: Any, timeout_s: float, retries: int, seen: set[int] | None = None) -> None:
    """Give every SDK client inside a Mirascope provider our timeout and retry count (one retry layer).

    Mirascope 2.8 builds its OpenAI/Anthropic clients with the SDK defaults (600 s, 2 retries) and nests
    providers (OpenAI's completions/responses routes, Anthropic's beta provider for structured output), so the
    whole object graph is visited.
    """
    seen = set() if seen is None else seen
    if id(provider) in seen or not hasattr(provider, "__dict__"):
        return
    seen.add(id(provider))
    for name, value in list(vars(provider).items()):
        module = type(value).__module__
        if module.startswith(("openai", "anthropic")) and hasattr(value, "with_options"):
            setattr(provider, name, value.with_options(timeout=timeout_s, max_retries=retries))
        elif module.startswith("mirascope.llm.providers"):
            _tune(value, timeout_s, retries, seen)


def _google_client(api_key: str | None, base_url: str | None, timeout_s: float, retries: int) -> Any:
    """A google-genai client with our timeout and retries (its own default is no timeout and no retry)."""
    from google.genai import Client
    from google.genai.types import HttpOptions, HttpRetryOptions

    options = HttpOptions(timeout=int(timeout_s * 1000), retry_options=HttpRetryOptions(attempts=retries + 1))
    if base_url:
        # Mirascope sends the key as a bearer token to a custom endpoint (a proxy); keep that behaviour.
        options.base_url = base_url
        options.headers = {"Authorization": f"Bearer {api_key}"}
    return Client(api_key=api_key, http_options=options)


def missing_key_hint(prefix: str) -> str:
    """How to give a native provider its key, naming the variable its SDK documents."""
    var = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "google": "GOOGLE_API_KEY"}.get(
        prefix, "LLM_API_KEY"
    )
    return f'set llm.api_key_env = "{var}" and export {var}=... (or set llm.base_url for a keyless local endpoint)'


class LLM:
    """Registered providers for the configured models, and the calls Quinn makes."""

    def __init__(self, config: LlmConfig) -> None:
        self.config = config
        self.model_id = config.model
        self.background_model_id = config.background_model or config.model
        self._compatible: set[str] = set()  # model ids served by an OpenAI-compatible server
        self._format_mode: dict[str, str] = {}  # model id -> the structured-output mode its server accepts
        self._no_tools: set[str] = set()  # model ids whose server refused tool definitions
        self._context: dict[str, int] = {}  # model id -> the context window its server named in a refusal
        llm.reset_provider_registry()
        for model in {self.model_id, self.background_model_id}:
            self._register(model)

    def _register(self, model: str) -> None:
        prefix = provider_prefix(model)
        c = self.config
        api_key = c.secret("api_key")
        if prefix == "openai" and c.base_url is not None and not model.endswith(":responses"):
            # An OpenAI-compatible server (llama.cpp, Ollama, vLLM, LM Studio) at base_url: chat completions with
            # the name as written. Mirascope would send an unknown name to /v1/responses, which they do not serve.
            self._compatible.add(model)
            provider = OpenAICompatibleProvider(
                prefix=prefix, base_url=c.base_url, api_key=api_key, timeout_s=c.timeout_s, retries=c.max_retries
            )
            llm.register_provider(provider, f"{prefix}/")
            return
        if prefix in NATIVE:
            if skipped(prefix):  # a reload to a provider the process started without
                raise ConfigError(f"llm.model {model}: this quinn process started without the {prefix} SDK "
                                  "(it loads only the SDKs its config names)", "restart quinn")  # fmt: skip
            if api_key is None and c.base_url is None:
                # Without a key, Mirascope would fall back to its hosted router when MIRASCOPE_API_KEY is set
                # (FACTS.md): a missing key is the operator's mistake, said at startup, before any request.
                raise ConfigError(f"llm: model {model} needs an API key and llm.api_key_env is not set",
                                  missing_key_hint(prefix))  # fmt: skip
            try:
                provider = llm.register_provider(prefix, f"{prefix}/", api_key=api_key or "unused",
                                                 base_url=c.base_url)  # fmt: skip
            except ImportError as exc:
                raise ConfigError(f"llm.model {model}: the {prefix} SDK is not installed ({exc})",
                                  "pip install 'mirascope[openai,anthropic,google]'") from None  # fmt: skip
            if prefix == "google":
                provider.client = _google_client(api_key or "unused", c.base_url, c.timeout_s, c.max_retries)
            else:
                _tune(provider, c.timeout_s, c.max_retries)
            return
        if c.base_url is None:
            raise ConfigError(
                f"llm.model {model}: {prefix}/ is served through an OpenAI-compatible endpoint",
                "set llm.base_url, e.g. http://localhost:11434/v1 for Ollama",
            )
        self._compatible.add(model)
        provider = OpenAICompatibleProvider(
            prefix=prefix, base_url=c.base_url, api_key=api_key, timeout_s=c.timeout_s, retries=c.max_retries
        )
        llm.register_provider(provider, f"{prefix}/")

    def _model(self, background: bool, max_tokens: int | None = None, temperature: float | None = None) -> llm.Model:
        """The configured model with its sampling; ``temperature`` instead of the configured one when given."""
        params: dict[str, Any] = {}
        if temperature is not None or self.config.temperature is not None:
            params["temperature"] = temperature if temperature is not None else self.config.temperature
        bounds = [n for n in (self.config.max_output_tokens, max_tokens) if n is not None]
        if bounds:
            params["max_tokens"] = min(bounds)
        return llm.Model(self.background_model_id if background else self.model_id, **params)

    @staticmethod
    def _messages(system: str, user: str) -> list[Any]:
        return [llm.messages.system(system), llm.messages.user(user)]

    async def text(
        self,
        system: str,
        user: str,
        *,
        tools: Sequence[Any] = (),
        ctx: Any = None,
        background: bool = False,
        echo_of: Sequence[str] | None = None,
        recalled: Sequence[str] = (),
        purpose: str = "reply",
        guesses: Iterable[str] | None = None,
    ) -> TextResult:
        """A text answer; tool calls are executed and resumed up to ``max_tool_rounds`` times.

        When the bound is reached and the model still asks for tools, the calls are answered with a refusal that
        tells it to write its answer now; a model that still gives no text is retried later (``RetryLater``).
        An answer that is nothing but JSON is never returned as a reply: a tool call written as text (as
        llama.cpp's server returns them) naming one of `tools` is executed like a real one (a repeat of a call
        already run is not), anything else (a schema, an unknown call) is sent back once with the request for
        plain text, then asked once more without tools, then ``RetryLater``.
        A server that rejects the tool definitions (400) is asked again without tools, and from then on.
        ``echo_of``: the answer goes to a person, and these are the texts it must not merely copy (the new email
        and the template's instructions around it, not the thread a reply may rightly repeat); ``recalled``:
        the memories and past mail in the prompt, which it may restate but not paste. An answer that copies them,
        the notes sent to the model, or a tool's result (`json_text.echoed`) is treated like JSON. None
        (summaries, digests, which may quote): no such check. A code fence around the answer is dropped.
        ``guesses``: the names of the people on the mail (lower case; None: no such check). An answer that says,
        of them or of the reader, names or numbers that nothing sent to the model holds (``grounding.guessed``)
        is sent back once with ``GUESSES_NOTE``; the answer to that is the reply.
        ``purpose``: what the call is for, the name of its template ("reply", "summarize"), sent as `PURPOSE_HEADER`.
        """
        token = _PURPOSE.set(purpose)
        try:
            self._fits(self._model(background).model_id, system, user)
            return await self._text(system, user, tools, ctx, background, echo_of, recalled, guesses)
        except PromptTooLong as exc:
            self._learn_context(self._model(background).model_id, exc)
            raise
        finally:
            _PURPOSE.reset(token)

    def _fits(self, model_id: str, system: str, user: str) -> None:
        """Refuse, before anything is sent, a request that cannot fit the model's context (issue 30): the context
        is ``[llm] context_tokens``, else what the server named when it refused a long prompt; the request is
        estimated at four characters a token, plus the answer's room (``max_output_tokens``)."""
        limit = self.config.context_tokens or self._context.get(model_id)
        if limit is None:
            return
        needed = -(-(len(system) + len(user)) // 4) + (self.config.max_output_tokens or 0)
        if needed > limit:
            raise PromptTooLong(f"the request needs about {needed} tokens with the answer's room, more than model "
                                f"{model_id}'s context of {limit}: not sent", limit, needed)  # fmt: skip

    def _learn_context(self, model_id: str, exc: PromptTooLong) -> None:
        """Keep the context window a server named, so the next request too long for it is not sent at all."""
        if exc.limit and self.config.context_tokens is None:
            self._context[model_id] = exc.limit

    async def _text(
        self,
        system: str,
        user: str,
        tools: Sequence[Any],
        ctx: Any,
        background: bool,
        echo_of: Sequence[str] | None,
        recalled: Sequence[str],
        guesses: Iterable[str] | None = None,
    ) -> TextResult:
        model = self._model(background)
        usage = Usage(model.model_id)
        rounds = 0
        nudged = False
        ran_as_text: set[tuple[str, str]] = set()
        gathered: list[str] = []  # results of the tool calls run (native or written as text)
        notes: list[str] = []  # what Quinn told the model between rounds
        bare = False  # asked once without tools
        sampled = False  # asked once, sampled (SAMPLED_TEMPERATURE)
        asked_guesses = False  # the reply's own names sent back once (GUESSES_NOTE)
        if model.model_id in self._no_tools or self.config.max_tool_rounds == 0:
            tools = ()  # no tool round allowed: none offered (an offer it must refuse only invites tool-call JSON)
        try:
            try:
                response = await self._first_text_call(model, system, user, tools, ctx)
            except llm.BadRequestError as exc:
                # Ollama and vLLM answer 400 to tools a model or server does not support. Not a 5xx: a server
                # that is overloaded or down must make the mail wait, not lose its tools for good. Nor a prompt
                # too long for the model's context (also a 400).
                if not tools or context_overflow(exc, model.model_id) is not None:
                    raise
                log.warning("model %s: the server refused the request with tools (%.200s); answering without tools "
                            "from now on", model.model_id, exc)  # fmt: skip
                self._no_tools.add(model.model_id)
                tools = ()
                response = await self._first_text_call(model, system, user, tools, ctx)
            usage += _usage(response, model.model_id)
            while True:
                if response.tool_calls and bare:
                    # Asked without tools, the model still calls one: there is nothing to run it with (a plain
                    # call's response takes no context; issue 30 found the TypeError). Its text is the answer.
                    log.warning("model %s called %d tool(s) when none were offered; reading its text only",
                                model.model_id, len(response.tool_calls))  # fmt: skip
                    if not response.text().strip():
                        raise RetryLater(f"model {model.model_id} answered the request without tools with a tool "
                                         "call and no text; nothing was sent")  # fmt: skip
                elif response.tool_calls:
                    if rounds >= self.config.max_tool_rounds:
                        if rounds > self.config.max_tool_rounds:
                            break
                        log.warning("model %s hit the tool limit (%d rounds)", model.model_id, rounds)
                        outputs = [_refused(call, self.config.max_tool_rounds) for call in response.tool_calls]
                    else:
                        outputs = await (response.execute_tools(ctx) if ctx is not None else response.execute_tools())
                        gathered += [str(getattr(output, "result", output)) for output in outputs]
                    rounds += 1
                    response = await (response.resume(ctx, outputs) if ctx is not None else response.resume(outputs))
                    usage += _usage(response, model.model_id)
                    continue
                text = response.text().strip()
                json_answer = whole_json(text) is not None or opens_json(text)
                cites = echo_of is not None and only_cites(text)
                if not json_answer and not cites and not (echo_of is not None and echoed(
                        unfenced(text), *echo_of, *notes, results=gathered, recalled=recalled)):  # fmt: skip
                    # Off the event loop: the prompt read may be the whole [budget] request_tokens (~25 ms at 24k).
                    guesses_found = await asyncio.to_thread(
                        guessed, unfenced(text), "\n".join([system, user, *gathered, *notes]), guesses
                    ) if guesses is not None and not asked_guesses else []  # fmt: skip
                    if not guesses_found:
                        break
                    # Once: the second answer is the reply, whatever it names (general knowledge rightly names
                    # what no prompt holds). The names are the model's, not logged (they may be a memory's).
                    log.info("model %s: the reply names %d thing(s) nothing it was sent holds; asking once whether "
                             "it guessed", model.model_id, len(guesses_found))  # fmt: skip
                    asked_guesses = True
                    note = GUESSES_NOTE.format(names=", ".join(guesses_found))
                    notes.append(note)
                    response = await (response.resume(ctx, note) if ctx is not None else response.resume(note))
                    usage += _usage(response, model.model_id)
                    continue
                what = ("JSON" if json_answer else "only references to memories, no words of your own" if cites
                        else "a copy of the email or of tool results")  # fmt: skip
                calls = tool_calls_in_text(text) if json_answer else None
                names = {getattr(tool, "name", None) for tool in tools}
                keys = {(c.name, json.dumps(c.args, sort_keys=True)) for c in calls or ()}
                # A small model asks for the same call again and again (seen: five identical searches per mail);
                # a repeat gets no new answer, so it is treated as the JSON it is.
                fresh = bool(keys - ran_as_text)
                if calls and fresh and all(c.name in names for c in calls) and rounds < self.config.max_tool_rounds:
                    log.info("model %s wrote %d tool call(s) as text; running them", model.model_id, len(calls))
                    results = [await _run_text_call(response, call.name, call.args, ctx) for call in calls]
                    gathered += results
                    ran_as_text |= keys
                    rounds += 1
                    note = ("Your tool calls were run. Results:\n" + "\n".join(results) + "\nNow write the reply "
                            "to the email as plain text: no JSON, no tool calls.")  # fmt: skip
                elif not nudged:
                    # Its text is never logged: it may be the user's memories pasted (issue 30).
                    log.warning("model %s answered with %s instead of a reply (%s); asking for plain text",
                                model.model_id, what, fingerprint(text))  # fmt: skip
                    nudged = True
                    note = (f"That was {what}, not a reply (tool results you asked for are above). Write your own "
                            "reply to the email now as plain text, without JSON and without tool calls.")  # fmt: skip
                elif (tools and not bare) or not sampled:
                    # Last resorts before giving up: the same request with no tools to call, and what the text
                    # calls found so far; then that request once more, sampled. Greedy decoding would repeat the
                    # same JSON or paste on every retry otherwise (SAMPLED_TEMPERATURE).
                    again = model
                    if tools and not bare:
                        log.warning("model %s still answered with %s; asking once more without tools",
                                    model.model_id, what)  # fmt: skip
                    else:
                        log.warning("model %s still answered with %s; asking once more, sampled", model.model_id,
                                    what)  # fmt: skip
                        sampled = True
                        again = self._model(background, temperature=max(self.config.temperature or 0.0,
                                                                        SAMPLED_TEMPERATURE))  # fmt: skip
                    bare = True
                    # Before the email, not after it: a small model copies the last thing it read.
                    found = ("What your tool calls found (notes for you; never copy them into the reply):\n"
                             + "\n".join(gathered) + "\n\n") if gathered else ""  # fmt: skip
                    messages = self._messages(system, found + user)
                    try:
                        response = await again.call_async(messages)
                    except llm.BadRequestError as exc:
                        # Some models take no temperature but their own (OpenAI's reasoning models answer 400
                        # "Only the default (1) value is supported"): they sample at that one already.
                        if again is model or context_overflow(exc, model.model_id) is not None:
                            raise
                        log.warning("model %s refused the sampled try (%.200s); asking with its own sampling",
                                    model.model_id, exc)  # fmt: skip
                        response = await model.call_async(messages)
                    usage += _usage(response, model.model_id)
                    continue
                else:
                    raise RetryLater(f"model {model.model_id} answered with {what} instead of a reply, sampled too; "
                                     f"nothing was sent ({fingerprint(text)})")  # fmt: skip
                notes.append(note)  # our own words: a reply that sends them back is no reply either
                response = await (response.resume(ctx, note) if ctx is not None else response.resume(note))
                usage += _usage(response, model.model_id)
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            raise _translate(exc, model.model_id) from exc
        text = response.text().strip()
        if echo_of is not None:  # a reply to a person: without the code fence a small model may put around it
            text = unfenced(text)
        if not text:
            raise RetryLater(f"model {model.model_id} returned no text after {rounds} tool rounds")
        return TextResult(text, usage, rounds)

    async def _first_text_call(self, model: llm.Model, system: str, user: str, tools: Sequence[Any], ctx: Any) -> Any:
        if ctx is not None:
            return await model.context_call_async(self._messages(system, user), ctx=ctx, tools=list(tools))
        return await model.call_async(self._messages(system, user), tools=list(tools) or None)

    async def structured(self, system: str, user: str, format: type[T], *, background: bool = True) -> tuple[T, Usage]:
        """A structured answer validated into ``format``, from models and servers as they are.

        JSON in prose or code fences is found, a truncated object keeps its complete elements, and an answer
        that is not one (a schema echoed back, an empty ``{}``, keys outside the schema) gets one repair round.
        On an OpenAI-compatible server the request mode falls back json_schema → json_object with the schema
        (llama.cpp) → JSON asked for in the prompt when the server refuses one (400, or a plain 500), and the mode that
        worked is kept per model. Still no valid answer: ``RetryLater`` (the mail or job waits, nothing lost).
        """
        model = self._model(background)
        usage = Usage(model.model_id)
        modes = self._modes(model.model_id)
        purpose = _PURPOSE.set(format.__name__)  # the schema's name, as json_schema mode sends it
        try:
            self._fits(model.model_id, system, user)
            return await self._structured(model, modes, system, user, format, usage)
        except PromptTooLong as exc:
            self._learn_context(model.model_id, exc)
            raise
        finally:
            _PURPOSE.reset(purpose)

    async def _structured(
        self, model: llm.Model, modes: Sequence[str | None], system: str, user: str, format: type[T], usage: Usage
    ) -> tuple[T, Usage]:
        for i, mode in enumerate(modes):
            schema = {"type": "json_object", "schema": format.model_json_schema()} if mode == "json_object" else None
            token = _RESPONSE_FORMAT.set(schema)
            try:
                return await self._structured_in(model, mode, system, user, format, usage)
            except (llm.BadRequestError, llm.ServerError, llm.FeatureNotSupportedError) as exc:
                # llama-cpp-python refuses json_schema with a plain 500; 502-504 (overloaded, a proxy timing out)
                # are transient and say nothing about the mode.
                transient = isinstance(exc, llm.ServerError) and exc.status_code != 500
                if transient or i + 1 == len(modes) or context_overflow(exc, model.model_id) is not None:
                    raise _translate(exc, model.model_id) from exc
                log.warning("model %s: the server refused structured output as %s (%.200s); using %s from now on",
                            model.model_id, mode, exc, modes[i + 1])  # fmt: skip
                self._format_mode[model.model_id] = str(modes[i + 1])  # only compatible servers have a next mode
            except (llm.Error, *TRANSPORT_ERRORS) as exc:
                raise _translate(exc, model.model_id) from exc
            finally:
                _RESPONSE_FORMAT.reset(token)
        raise AssertionError("unreachable: the last mode returns or raises")

    def _modes(self, model_id: str) -> Sequence[str | None]:
        """The structured-output modes to try for `model_id`, the remembered working one first."""
        if model_id not in self._compatible:
            return (None,)  # the native providers' own default (strict schema or a format tool)
        start = self._format_mode.get(model_id, COMPATIBLE_MODES[0])
        return COMPATIBLE_MODES[COMPATIBLE_MODES.index(start) :]

    async def _structured_in(
        self, model: llm.Model, mode: str | None, system: str, user: str, format: type[T], usage: Usage
    ) -> tuple[T, Usage]:
        """One structured call in `mode`, with one repair round."""
        spec: Any = format if mode is None else llm.format(format, mode="strict" if mode == "json_schema" else "json")
        response = await model.call_async(self._messages(system, user), format=spec)
        usage += _usage(response, model.model_id)
        try:
            return _parse_answer(response, format, model.model_id, last_try=False), usage
        except _InvalidAnswer as exc:
            log.info("model %s gave invalid %s, asking once more: %s", model.model_id, format.__name__, exc)
            response = await response.resume(f"That was not valid: {exc}. Answer again with only the JSON object "
                                              "the schema describes.")  # fmt: skip
            usage += _usage(response, model.model_id)
        try:
            return _parse_answer(response, format, model.model_id, last_try=True), usage
        except _InvalidAnswer as exc:
            raise RetryLater(f"model {model.model_id} gave no valid {format.__name__} twice: {exc}") from exc

    @property
    def where(self) -> str:
        """The main model and, for a server of the operator's, its URL: what an error names."""
        return f"{self.model_id} at {self.config.base_url}" if self.config.base_url else self.model_id

    def format_mode(self, model_id: str | None = None) -> str:
        """The structured-output mode the model's server takes (so far): a compatible server's, or "native"."""
        model_id = model_id or self.background_model_id
        if model_id not in self._compatible:
            return "native"
        return str(self._modes(model_id)[0])

    async def check(self) -> str:
        """One tiny request to the main model, for ``quinn check``; returns the model id and where it is."""
        try:
            await self._model(False).call_async(self._messages("Answer with OK.", "ping"))
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            translated = _translate(exc, self.model_id)
            if isinstance(translated, ConfigError):
                raise translated from exc
            hint = "is the model's server running, and llm.base_url right?" if self.config.base_url else \
                "is the provider reachable from here?"  # fmt: skip
            raise ConnectError(f"{self.where} did not answer: {exc.__class__.__name__}: {exc}", hint) from exc
        return self.where

    async def probe(self, system: str, user: str, *, max_tokens: int = 300) -> str:
        """One plain call to the main model and its raw text, nothing retried or repaired, at most ``max_tokens``
        long: the model check (``quinn.agent.model_check``) judges what the model writes on its own."""
        token = _PURPOSE.set("model-check")
        try:
            response = await self._model(False, max_tokens).call_async(self._messages(system, user))
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            raise _translate(exc, self.model_id) from exc
        finally:
            _PURPOSE.reset(token)
        return response.text().strip()


class _InvalidAnswer(ValueError):
    """A structured answer that is not one; the message is what the model is told."""


def _parse_answer(response: Any, format: type[T], model: str, *, last_try: bool) -> T:
    """The answer in `response` validated into `format`; `_InvalidAnswer` says what is wrong with it. Numbers out
    of range are put back in range (quinn.agent.salvage); on the `last_try` an empty object means nothing to say
    and an answer still invalid keeps its valid list items."""
    text = response.text()
    try:
        value, repaired = find_json(text)
    except ValueError:
        try:
            return response.parse()  # e.g. a format tool's arguments, not text
        except llm.ParseError as exc:
            raise _InvalidAnswer(f"no JSON object in the answer ({fingerprint(text)})") from exc
    if is_schema_dump(value):
        raise _InvalidAnswer("that is the JSON schema itself, not an answer that follows it")
    fields = set(format.model_fields)
    if isinstance(value, dict) and value and not fields & set(value):
        inner = next(iter(value.values()))
        if len(value) == 1 and isinstance(inner, dict) and fields & set(inner):
            value = inner  # {"Extraction": {...}}: the answer wrapped in one more object
        else:
            # The model's keys are its text (logged with this message): counted, not shown.
            raise _InvalidAnswer(f"its {len(value)} key(s) are not in the schema; use {sorted(fields)}")
    if value == {} and fields and not last_try:
        raise _InvalidAnswer("an empty object {}: give the schema's fields (an empty list where there is nothing)")
    if repaired:
        log.warning("model %s: the %s answer was cut off; keeping its complete part", model, format.__name__)
    value, notes = rescaled(format, value)
    if notes:
        log.info("model %s: %s numbers out of range put back in range: %s", model, format.__name__, "; ".join(notes))
    try:
        return format.model_validate(value)
    except ValidationError as exc:
        errors = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        kept = without_invalid_items(format, value) if last_try else None
        if kept is not None:
            log.warning("model %s: %s answer still invalid (%s); keeping its valid items (%s)", model,
                        format.__name__, errors, ", ".join(kept[1]))  # fmt: skip
            return kept[0]
        raise _InvalidAnswer(errors) from exc


async def _run_text_call(response: Any, name: str, args: dict[str, Any], ctx: Any) -> str:
    """Run a tool call the model wrote as text, through the response's own toolkit; its result as a line.

    Arguments the tool does not take are dropped (a small model adds some: seen, ``search_memory`` with an
    ``importance``), so the call runs instead of answering with a Python TypeError the model may then copy."""
    tool = response.toolkit.tools_dict.get(name)
    known = set(getattr(getattr(tool, "parameters", None), "properties", None) or ())
    if known:
        args = {key: value for key, value in args.items() if key in known}
    call = llm.ToolCall(id=f"text-{uuid.uuid4().hex[:12]}", name=name, args=json.dumps(args))
    output = await (response.toolkit.execute(ctx, call) if ctx is not None else response.toolkit.execute(call))
    if getattr(output, "error", None) is not None:
        return f"{name}: the call failed, answer without it"
    return f"{name}: {output.result}"


def _refused(call: Any, limit: int) -> Any:
    """The answer to a tool call past the bound: not executed, and the model is told to answer now."""
    message = f"Not executed: the limit of {limit} tool rounds is reached. Write your reply now, without tools."
    return llm.ToolOutput(id=call.id, name=call.name, result=message)


def _usage(response: Any, model: str) -> Usage:
    u = getattr(response, "usage", None)
    if u is None:
        return Usage(model, calls=1)
    return Usage(model, int(getattr(u, "input_tokens", 0) or 0), int(getattr(u, "output_tokens", 0) or 0), 1)


def _translate(exc: Exception, model: str) -> Exception:
    """Mirascope errors as Quinn's: an operator mistake is a ConfigError, a prompt too long for the model's
    context a ``PromptTooLong``, anything else is retried later."""
    if (too_long := context_overflow(exc, model)) is not None:
        return too_long
    if isinstance(exc, llm.AuthenticationError | llm.PermissionError):
        return ConfigError(f"LLM {model} rejected our credentials: {exc}", "check llm.api_key_env")
    if isinstance(exc, llm.NotFoundError):
        return ConfigError(f"LLM {model} not found at the endpoint: {exc}", "check llm.model and llm.base_url")
    return RetryLater(f"LLM {model} failed: {exc.__class__.__name__}: {exc}")
