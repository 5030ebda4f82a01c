"""Quinn's error taxonomy.

Every error an operator can cause or fix is a ``QuinnError`` with a one-line message and a hint. The CLI turns
them into one line on stderr and an exit code in exactly one place (``quinn.cli.main``). Anything else that
escapes is a bug and keeps its traceback.
"""

from __future__ import annotations


class QuinnError(Exception):
    """Base class: an expected failure with a message for the operator and a hint on how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class ConfigError(QuinnError):
    """The configuration is missing, malformed or names something that does not work."""

    exit_code = 2


class ConnectError(QuinnError):
    """A server (IMAP, SMTP, LLM, database) could not be reached or refused us."""

    exit_code = 3


class RetryLater(QuinnError):
    """A transient failure: the work stays pending and is retried with backoff."""


class MailParseError(QuinnError):
    """An email could not be turned into an ``InboundEmail``; it is quarantined with this reason."""


class TemplateError(QuinnError):
    """A prompt template failed to load or render; names the file and line when known."""

    exit_code = 2


class StoreError(QuinnError):
    """The memory store refused an operation (bad input, immutable memory, wrong user, dimension mismatch)."""
