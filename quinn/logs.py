"""Logging setup: stderr (journald adds its own metadata), text or JSON lines, and a redaction filter.

Secrets never reach a log line: the filter sits on the handler, so it sees every record of every library, and
replaces the configured secrets themselves plus the shapes secrets take in protocol traces (IMAP LOGIN and
AUTHENTICATE, SMTP AUTH, HTTP Authorization headers, ``api_key=`` pairs, ``sk-…`` keys, ``user:pass@`` URLs).
Mail bodies are kept out by discipline instead: Quinn logs ids, addresses and reasons, and the libraries that
would log request bodies (the model SDKs, httpx) are held at WARNING even when debug is on. What a model wrote
never reaches a log line or the ledger either: it may paste a user's memories (issue 30), so it is told by its
``fingerprint`` (length and hash), never by its text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

from quinn.config import SECTIONS, Config

REDACTED = "***"
# Loggers that print request bodies or protocol traces at DEBUG: held at WARNING whatever the level.
NOISY = (
    "httpx",
    "httpcore",
    "openai",
    "anthropic",
    "sentence_transformers",
    "transformers",
    "imapclient",
    "mailparser",
    "apscheduler",
    "google_genai",
)
MIN_SECRET_LEN = 3  # shorter "secrets" would blank out ordinary words and protect nothing

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # IMAP LOGIN / AUTHENTICATE after a command tag (RFC 9051 §6.2.2, §6.2.3): the rest is credentials.
    # Case-sensitive on purpose: protocol traces are upper case, and "IMAP login as x rejected" must survive.
    (re.compile(r"(\b[A-Za-z]+\d+ (?:LOGIN|AUTHENTICATE) ).*"), r"\1" + REDACTED),
    # SMTP AUTH (RFC 4954 §4): the initial response carries the base64 credentials.
    (re.compile(r"(\bAUTH (?:PLAIN|LOGIN|XOAUTH2|OAUTHBEARER|CRAM-MD5) )\S+"), r"\1" + REDACTED),
    # HTTP credentials (RFC 9110 §11.6.2) and the API-key headers of the model providers.
    (
        re.compile(
            r"((?:authorization|proxy-authorization)['\"]?\s*[:=]\s*(?:['\"](?:bearer|basic|token)?\s*|(?:bearer|basic|token)\s*)?)"
            r"[^\s'\",}]+",
            re.IGNORECASE,
        ),
        r"\1" + REDACTED,
    ),
    (
        re.compile(
            r"((?:x-api-key|x-goog-api-key|api[_-]?key|password|passwd|auth[_-]?token|secret)['\"]?\s*[:=]\s*"
            r"['\"]?)[^\s'\",}]+",
            re.IGNORECASE,
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"), REDACTED),
    # OAuth 2.0: a bearer token anywhere (RFC 6750 §2.1, as inside XOAUTH2/OAUTHBEARER), and token endpoint fields
    # (RFC 6749 §5.1, §6; RFC 8628 §3.4).
    (re.compile(r"(\bBearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE), r"\1" + REDACTED),
    # Bare token shapes: a JWT (Microsoft's access tokens), Google's access (ya29.) and refresh (1//) tokens.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), REDACTED),
    (re.compile(r"\bya29\.[A-Za-z0-9_-]+|(?<![\w/])1//0[A-Za-z0-9_-]+"), REDACTED),
    (
        re.compile(
            r"((?:access_token|refresh_token|device_code|id_token|code_verifier)['\"]?\s*[:=]\s*['\"]?)"
            r"[^\s'\",}&]+"
        ),
        r"\1" + REDACTED,
    ),
    # Credentials inside URLs (RFC 3986 §3.2.1).
    (re.compile(r"(//)[^/@\s:]+:[^/@\s]+@"), r"\1" + REDACTED + "@"),
)


def fingerprint(text: str) -> str:
    """A text told apart without showing it, for logs and reasons: its length and the start of its SHA-256
    ("412 characters, sha256 3f2a9c01b7de"). The same answer twice has the same fingerprint."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{len(text)} characters, sha256 {digest}"


class RedactingFilter(logging.Filter):
    """Rewrites every record so configured secrets and credential-shaped text become ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: list[str] = []
        self.set_secrets(secrets)

    def set_secrets(self, secrets: Iterable[str]) -> None:
        """Replace the known secret values (after a reload)."""
        self.secrets = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` with every secret and credential shape replaced."""
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep the raw template rather than lose the record
            message = str(record.msg)
        cleaned = self.redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC ISO 8601), level, logger, message, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False)


def secret_values(config: Config) -> list[str]:
    """Every secret the config resolved (passwords, API keys, tokens), for the redaction filter."""
    values = []
    for name in SECTIONS:
        section = getattr(config, name)
        for holder in (section, *(table for _where, table in section.tables())):  # [[console.admins]] too
            for key in holder._secrets:
                value = holder.secret(key)
                if value:
                    values.append(value)
    return values


def setup_logging(level: str, fmt: str = "text", secrets: Iterable[str] = ()) -> RedactingFilter:
    """Log to stderr at ``level`` in ``fmt`` (text or json), redacting ``secrets``; returns the filter."""
    handler = logging.StreamHandler(sys.stderr)
    redactor = RedactingFilter(secrets)
    handler.addFilter(redactor)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    elif os.environ.get("JOURNAL_STREAM"):  # journald stamps time and unit itself
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    set_level(level)
    return redactor


def set_level(level: str) -> None:
    """Change the level (SIGHUP); the noisy libraries stay at WARNING or above."""
    root = logging.getLogger()
    root.setLevel(level)
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class _Counter(logging.Handler):
    """Counts the records it is handed (the warnings kept off an interactive terminal)."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def quiet_terminal(log_file: Path | None) -> Callable[[], str | None]:
    """Keep WARNINGs off the terminal of an interactive command (``quinn ask``, ``quinn demo`` without
    ``--verbose``): the stderr handler shows ERRORs only; every record it would have shown goes to ``log_file``
    (same redaction). Returns a function that says, once the command is done, how many were kept off and where.
    Issue 34: the model's fallback warnings mixed into the chat on every run."""
    root = logging.getLogger()
    terminal = [h for h in root.handlers if isinstance(h, logging.StreamHandler) and h.stream in (sys.stderr,)]
    counter = _Counter(logging.WARNING)
    for handler in terminal:
        handler.setLevel(logging.ERROR)
        for flt in handler.filters:
            counter.addFilter(flt)
    root.addHandler(counter)
    if log_file is not None:
        try:
            file_handler = logging.FileHandler(log_file, encoding="utf-8", delay=True)
        except OSError:
            log_file = None
        else:
            file_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            for flt in terminal[0].filters if terminal else (RedactingFilter(),):
                file_handler.addFilter(flt)
            root.addHandler(file_handler)

    def summary() -> str | None:
        if not counter.count:
            return None
        where = f"in {log_file}" if log_file is not None else "not kept"
        return f"{counter.count} warning(s) {where}; --verbose shows them here"

    return summary
