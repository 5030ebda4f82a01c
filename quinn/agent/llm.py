"""The one seam to language models: every model call in Quinn goes through ``LLM``.

Providers are registered explicitly from config (never Mirascope's implicit hosted router). One retry layer:
the provider SDK's own (``max_retries``, with its backoff), Mirascope's retries unused. Token usage is summed
across a tool loop and returned, so the caller records it per user, per email and per job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import httpx
from mirascope import llm
from mirascope.llm.providers.openai.completions.base_provider import BaseOpenAICompletionsProvider
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel

from quinn.config import LlmConfig
from quinn.errors import ConfigError, ConnectError, RetryLater

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
NATIVE = ("openai", "anthropic", "google")
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

    def _model_name(self, model_id: str) -> str:
        return model_id.removeprefix(self._prefix)


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
        llm.reset_provider_registry()
        for model in {self.model_id, self.background_model_id}:
            self._register(model)

    def _register(self, model: str) -> None:
        prefix = provider_prefix(model)
        c = self.config
        api_key = c.secret("api_key")
        if prefix in NATIVE:
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
        provider = OpenAICompatibleProvider(
            prefix=prefix, base_url=c.base_url, api_key=api_key, timeout_s=c.timeout_s, retries=c.max_retries
        )
        llm.register_provider(provider, f"{prefix}/")

    def _model(self, background: bool) -> llm.Model:
        params: dict[str, Any] = {}
        if self.config.temperature is not None:
            params["temperature"] = self.config.temperature
        return llm.Model(self.background_model_id if background else self.model_id, **params)

    @staticmethod
    def _messages(system: str, user: str) -> list[Any]:
        return [llm.messages.system(system), llm.messages.user(user)]

    async def text(
        self, system: str, user: str, *, tools: Sequence[Any] = (), ctx: Any = None, background: bool = False
    ) -> TextResult:
        """A text answer; tool calls are executed and resumed up to ``max_tool_rounds`` times.

        When the bound is reached and the model still asks for tools, the calls are answered with a refusal that
        tells it to write its answer now; a model that still gives no text is retried later (``RetryLater``).
        """
        model = self._model(background)
        usage = Usage(model.model_id)
        rounds = 0
        try:
            if ctx is not None:
                response = await model.context_call_async(self._messages(system, user), ctx=ctx, tools=list(tools))
            else:
                response = await model.call_async(self._messages(system, user), tools=list(tools) or None)
            usage += _usage(response, model.model_id)
            while response.tool_calls:
                if rounds >= self.config.max_tool_rounds:
                    if rounds > self.config.max_tool_rounds:
                        break
                    log.warning("model %s hit the tool limit (%d rounds)", model.model_id, rounds)
                    outputs = [_refused(call, self.config.max_tool_rounds) for call in response.tool_calls]
                else:
                    outputs = await (response.execute_tools(ctx) if ctx is not None else response.execute_tools())
                rounds += 1
                response = await (response.resume(ctx, outputs) if ctx is not None else response.resume(outputs))
                usage += _usage(response, model.model_id)
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            raise _translate(exc, model.model_id) from exc
        text = response.text().strip()
        if not text:
            raise RetryLater(f"model {model.model_id} returned no text after {rounds} tool rounds")
        return TextResult(text, usage, rounds)

    async def structured(self, system: str, user: str, format: type[T], *, background: bool = True) -> tuple[T, Usage]:
        """A structured answer validated into ``format``; one repair round when the JSON does not validate."""
        model = self._model(background)
        usage = Usage(model.model_id)
        try:
            response = await model.call_async(self._messages(system, user), format=format)
            usage += _usage(response, model.model_id)
            try:
                return response.parse(), usage
            except llm.ParseError as exc:
                log.info("model %s gave invalid %s, asking once more: %s", model.model_id, format.__name__, exc)
                response = await response.resume(f"That was not valid: {exc}. Answer again with valid JSON only.")
                usage += _usage(response, model.model_id)
                return response.parse(), usage
        except llm.ParseError as exc:
            raise RetryLater(f"model {model.model_id} gave no valid {format.__name__}: {exc}") from exc
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            raise _translate(exc, model.model_id) from exc

    async def check(self) -> str:
        """One tiny request to the main model, for ``quinn check``; returns the model id."""
        try:
            await self._model(False).call_async(self._messages("Answer with OK.", "ping"))
        except (llm.Error, *TRANSPORT_ERRORS) as exc:
            raise ConnectError(f"LLM {self.model_id}: {_translate(exc, self.model_id)}") from exc
        return self.model_id


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
    """Mirascope errors as Quinn's: an operator mistake is a ConfigError, anything else is retried later."""
    if isinstance(exc, llm.AuthenticationError | llm.PermissionError):
        return ConfigError(f"LLM {model} rejected our credentials: {exc}", "check llm.api_key_env")
    if isinstance(exc, llm.NotFoundError):
        return ConfigError(f"LLM {model} not found at the endpoint: {exc}", "check llm.model and llm.base_url")
    return RetryLater(f"LLM {model} failed: {exc.__class__.__name__}: {exc}")
