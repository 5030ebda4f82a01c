"""``quinn init``: write a commented quinn.toml for a new install, asking (or taking flags) for what differs.

The file is the packaged example (every key, commented) with the answers filled in, so a newcomer sees every
other setting beside the ones they chose. Nothing secret is written: passwords and keys stay in environment
variables the file names. The result is loaded with ``load_config`` before it is written, so a file ``init``
writes always loads; an existing file is kept unless ``--force``. Reachability of the mail servers and a local
model is checked as it goes and reported, never fatal (the server may not be up yet); ``quinn check`` is the
full test, and the next command ``init`` prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from quinn.commands.presets import MAIL_PRESETS, add_preset_flag, chosen_preset, preset_values
from quinn.config import load_config
from quinn.errors import ConfigError
from quinn.packaged import packaged_file


@dataclass(frozen=True)
class Provider:
    """How a model provider is set up: the model prefix, a default model, its key variable and endpoint."""

    prefix: str
    model: str
    api_key_env: str | None
    base_url: str | None = None


PROVIDERS = {
    "openai": Provider("openai", "gpt-4.1-mini", "OPENAI_API_KEY"),
    "anthropic": Provider("anthropic", "claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
    "google": Provider("google", "gemini-2.0-flash", "GOOGLE_API_KEY"),
    "ollama": Provider("ollama", "llama3.2", None, "http://localhost:11434/v1"),
    # Any server speaking OpenAI's chat completions (vLLM, LM Studio, llama.cpp, a hosted gateway).
    "openai-compatible": Provider("openai", "", None),
}
OLLAMA_EXAMPLE = "--model ollama/llama3.2 (after `ollama pull llama3.2`; its server is http://localhost:11434/v1)"
TLS_PORTS = {"imap": {"ssl": 993, "starttls": 143, "none": 143}, "smtp": {"ssl": 465, "starttls": 587, "none": 25}}
DEFAULT_PASSWORD_ENV = "QUINN_IMAP_PASSWORD"


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn init``."""
    p = sub.add_parser("init", help="write a commented quinn.toml for this install (asks, or takes flags)",
                       description="Write quinn.toml: the packaged example with your answers filled in. Asks for "
                       "each value unless --non-interactive (then flags and defaults are used).")  # fmt: skip
    p.add_argument("-c", "--config", default=os.environ.get("QUINN_CONFIG", "quinn.toml"),
                   help="the file to write (default: $QUINN_CONFIG or ./quinn.toml)")  # fmt: skip
    p.add_argument("--non-interactive", action="store_true", help="ask nothing: take flags and defaults")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.add_argument("--address", help="Quinn's own mail address (a dedicated mailbox is best)")
    for proto, default_tls in (("imap", "ssl"), ("smtp", "ssl")):
        p.add_argument(f"--{proto}-host", help=f"{proto.upper()} server (default: {proto}.<domain of --address>)")
        p.add_argument(f"--{proto}-port", type=int, help=f"{proto.upper()} port (default: from --{proto}-tls)")
        p.add_argument(f"--{proto}-tls", choices=("ssl", "starttls", "none"),
                       help=f"transport security (default {default_tls}, or the mail provider's)")  # fmt: skip
        p.add_argument(f"--{proto}-user", help=f"{proto.upper()} login (default: --address"
                       + ('; "" for no SMTP login)' if proto == "smtp" else ")"))  # fmt: skip
    p.add_argument("--password-env", default=DEFAULT_PASSWORD_ENV,
                   help="the environment variable holding the mail password (IMAP and SMTP)")  # fmt: skip
    p.add_argument("--provider", choices=sorted(PROVIDERS) + sorted(MAIL_PRESETS), default="openai",
                   help="the model provider (a mail provider's name here means --mail-provider)")  # fmt: skip
    add_preset_flag(p)
    p.add_argument("--model", help="the model name (default: the provider's usual small model)")
    p.add_argument("--base-url", help="the model server's URL (Ollama: http://localhost:11434/v1)")
    p.add_argument("--api-key-env", help='the environment variable holding the API key ("" for none)')
    p.add_argument("--state-dir", default=".", help="where the database lives (default: the current folder)")
    p.add_argument(
        "--authserv-id",
        default="",
        help="the id your receiving mail server writes in Authentication-Results (deploy/SECURITY.md)",
    )
    p.add_argument(
        "--reply-mode",
        choices=("draft", "send"),
        default="draft",
        help="draft (default): replies wait in the Drafts folder for you to read; send: they go out",
    )
    p.set_defaults(handler=init_command, needs_config=False)


def named_provider(model: str, base_url: str | None) -> tuple[str, str]:
    """The provider a ``PROVIDER/MODEL`` string names (``quinn demo --model``) and the model's name: the provider's
    usual model when the string names only the provider. ``openai/...`` with a base URL is an OpenAI-compatible
    server (vLLM, LM Studio, llama.cpp, a gateway), which wants no OpenAI key."""
    prefix, _, name = model.strip().partition("/")
    if prefix == "openai" and base_url:
        prefix = "openai-compatible"
    provider = PROVIDERS.get(prefix)
    if provider is None or not (name or provider.model):
        named = ", ".join(p for p in sorted(PROVIDERS) if p != "openai-compatible")
        raise ConfigError(
            f"--model {model!r} names no model of a known provider",
            f"write PROVIDER/MODEL with PROVIDER one of {named} (openai/MODEL with --base-url URL for any "
            f"OpenAI-compatible server), e.g. {OLLAMA_EXAMPLE}",
        )
    return prefix, name or provider.model


def llm_values(provider_name: str, model: str, base_url: str | None, api_key_env: str | None) -> dict[
    tuple[str, str], str | int | None
]:  # fmt: skip
    """The ``[llm]`` keys of a provider's model, for `fill` (``quinn init`` and ``quinn demo``): the model prefixed
    with the provider's name unless it has one, and the provider's endpoint and key variable where not given
    (``api_key_env=""``: none)."""
    provider = PROVIDERS[provider_name]
    key_env = provider.api_key_env if api_key_env is None else api_key_env
    return {
        ("llm", "model"): model if "/" in model else f"{provider.prefix}/{model}",
        ("llm", "base_url"): base_url or provider.base_url or None,
        ("llm", "api_key_env"): key_env or None,
    }


def fill(template: str, values: dict[tuple[str, str], Any]) -> str:
    """``template`` (the example config, which documents every key) with each ``(section, key)`` set to its
    value, as TOML; a commented key is uncommented, and a value of None comments the key out."""
    lines = template.splitlines()
    section = ""
    todo = dict(values)
    for i, line in enumerate(lines):
        header = re.match(r"\[([a-z_]+)\]", line)
        setting = re.match(r"(#\s*)?([a-z_]+) = ", line)
        if header:
            section = header.group(1)
        elif setting and (section, setting.group(2)) in todo:
            value = todo.pop((section, setting.group(2)))
            if value is not None:
                lines[i] = f"{setting.group(2)} = {json.dumps(value)}"  # a JSON string or number is TOML too
            elif not setting.group(1):
                lines[i] = f"# {line}"
    if todo:  # cannot happen while tests/test_config.py keeps the example complete
        raise RuntimeError(f"the example config lacks {sorted(todo)}")
    return "\n".join(lines) + "\n"


def reachable(host: str, port: int, timeout_s: float = 3.0) -> str | None:
    """None when a TCP connection to host:port opens, else why not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc)


class Asker:
    """Asks on the terminal, or takes the default without asking (``--non-interactive``)."""

    def __init__(self, interactive: bool) -> None:
        self.interactive = interactive

    def __call__(self, question: str, default: str | None, choices: tuple[str, ...] = ()) -> str:
        if not self.interactive:
            if default is None:
                raise ConfigError(f"quinn init --non-interactive needs {question}", "pass it as a flag")
            return default
        shown = f" ({'/'.join(choices)})" if choices else ""
        while True:
            answer = input(f"{question}{shown} [{default or ''}]: ").strip() or (default or "")
            if (answer or default == "") and (not choices or answer in choices):  # "" may be a chosen default
                return answer
            print(f"  please answer {'one of ' + ', '.join(choices) if choices else 'this'}", file=sys.stderr)

    def note(self, what: str, problem: str | None) -> None:
        state = "ok" if problem is None else f"not reachable now ({problem}); fix it before quinn run"
        print(f"  {what}: {state}")


def init_command(args: argparse.Namespace, config: None) -> int:
    """Ask, check as it goes, write the file, print the next command."""
    path = Path(args.config)
    if path.exists() and not args.force:
        raise ConfigError(f"{path} exists; quinn init leaves it alone", "pass --force to overwrite it, or -c NEW_PATH")
    ask = Asker(not args.non_interactive)
    if args.non_interactive:
        missing_flags(args)  # all of them at once, before any server is probed
    address = ask("Quinn's mail address (a mailbox of its own: Quinn moves mail out of its inbox)", args.address)
    if "@" not in address:
        raise ConfigError(f"{address!r} is not a mail address", "give Quinn's address, e.g. quinn@example.org")
    domain = address.rsplit("@", 1)[1]
    preset = chosen_preset(args)
    values: dict[tuple[str, str], Any] = {}
    for proto in ("imap", "smtp"):
        host = ask(f"{proto.upper()} server", getattr(args, f"{proto}_host") or f"{proto}.{domain}")
        tls = ask(f"{proto.upper()} transport security", getattr(args, f"{proto}_tls") or "ssl",
                  ("ssl", "starttls", "none"))  # fmt: skip
        port = int(ask(f"{proto.upper()} port", str(getattr(args, f"{proto}_port") or TLS_PORTS[proto][tls])))
        user_flag = getattr(args, f"{proto}_user")
        user = ask(f"{proto.upper()} login", address if user_flag is None else user_flag) if (
            proto == "imap" or user_flag != "") else ""  # fmt: skip
        ask.note(f"{host}:{port}", reachable(host, port))
        values |= {(proto, "host"): host, (proto, "port"): port, (proto, "tls"): tls}
        values[(proto, "username")] = user or None
        values[(proto, "password_env")] = args.password_env if user else None
    values[("smtp", "from_address")] = address
    values[("smtp", "reply_mode")] = ask("Replies: draft (wait in Drafts for you) or send", args.reply_mode,
                                         ("draft", "send"))  # fmt: skip
    provider_name = ask("Model provider", args.provider, tuple(sorted(PROVIDERS)))
    provider = PROVIDERS[provider_name]
    model = ask("Model", args.model or provider.model or None)
    base_url = args.base_url or provider.base_url
    if provider_name in ("ollama", "openai-compatible") or args.base_url:
        base_url = ask("Model server URL (OpenAI-compatible servers end in /v1)", base_url)
        url = urlsplit(base_url)
        if url.hostname:
            ask.note(base_url, reachable(url.hostname, url.port or (443 if url.scheme == "https" else 80)))
    key_env = args.api_key_env
    if provider_name == "openai-compatible" and args.api_key_env is None:
        key_env = ask('API key variable ("" for none)', "") if ask.interactive else None
    values |= llm_values(provider_name, model, base_url, key_env)
    state = Path(ask("State directory (the database)", args.state_dir))
    values[("database", "url")] = str(state.resolve() / "quinn.db")  # quinn run may start from another folder
    values[("policy", "authserv_id")] = (
        ask(
            "Your receiving server's Authentication-Results id (empty: decide later, see deploy/SECURITY.md)",
            args.authserv_id,
        )
        or None
    )
    if preset is not None:
        values |= preset_values(preset, values, bool(values[("policy", "authserv_id")]), args.oauth_client_id)
    text = fill(packaged_file("quinn.example.toml").read_text(encoding="utf-8"), values)
    check_loads(text, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    needed = sorted({str(v) for (_s, k), v in values.items() if k.endswith("_env") and v})
    print(f"wrote {path}")
    if not state.is_dir():
        print(f"create the state directory first: mkdir -p {state}")
    exports = " ".join(f"{name}=..." for name in needed)
    if preset is not None and preset.note:
        print(f"note: {preset.note}")
    if values.get(("imap", "auth")) == "oauth2":
        first = "" if args.oauth_client_id else f"set oauth.client_id in {path} to your app's id, then "
        print(f"first: {first}sign in: quinn auth login -c {path}")
    print(f"next: {exports + ' ' if exports else ''}quinn check -c {path}")
    return 0


def missing_flags(args: argparse.Namespace) -> None:
    """``--non-interactive``: the flags that have no default and were not given, named together (issue 34)."""
    provider = PROVIDERS.get(args.provider)
    needed = {
        "--address": not args.address,
        "--model": provider is not None and not (args.model or provider.model),
        "--base-url": args.provider == "openai-compatible" and not args.base_url,
    }
    missing = [flag for flag, lacking in needed.items() if lacking]
    if missing:
        raise ConfigError(f"quinn init --non-interactive needs {' and '.join(missing)}",
                          f"e.g. quinn init --non-interactive {' '.join(f'{f} ...' for f in missing)}; "
                          "quinn init --help lists every flag")  # fmt: skip


def check_loads(text: str, path: Path) -> None:
    """Load the text as ``quinn run`` would (secrets aside): a file init writes always loads."""
    with tempfile.TemporaryDirectory() as folder:
        trial = Path(folder) / path.name
        trial.write_text(text, encoding="utf-8")
        try:
            load_config(trial, env={}, secrets_of=())
        except ConfigError as exc:
            raise ConfigError(f"the answers do not make a valid config: {exc.message}", exc.hint) from None
