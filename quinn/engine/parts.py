"""The composition root: every part of Quinn that outlives one mail is built here from a Config.

The daemon (``quinn.app``), the CLI commands and the tests build through these functions, and a reload
(SIGHUP) rebuilds through them too, so no part is put together twice in two ways, and none keeps a stale copy of
a setting: whatever holds a reloadable setting is rebuilt by ``Parts.reload``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quinn.clock import Clock
from quinn.config import Config, EmbeddingsConfig
from quinn.reload import ReloadPlan, plan_reload

if TYPE_CHECKING:  # the CLI imports this module for every command: the heavy parts load when first built
    from quinn.agent import LLM, Agent, PromptStore
    from quinn.db import Database
    from quinn.mailbox import Delivery, ImapMailbox, Rules, SmtpSender
    from quinn.memory import Embedder, MemoryStore
    from quinn.oauth import TokenSource
    from quinn.scheduler import JobRunner

log = logging.getLogger(__name__)


def prompts(config: Config, *, checked: bool = True) -> PromptStore:
    """The prompt templates of ``prompts.dir``; ``checked``: every template is loaded now, so a broken one is an
    error at start (or at reload), not on the first mail."""
    from quinn.agent import TEMPLATE_NAMES, PromptStore, sample_variables

    store = PromptStore(config.prompts.dir, samples=sample_variables)
    if checked:
        for name in TEMPLATE_NAMES:
            store.load(name)
    return store


def llm(config: Config) -> LLM:
    """The model client of ``[llm]``."""
    from quinn.agent import LLM

    return LLM(config.llm)


def rules(config: Config) -> Rules:
    """Who gets an answer and how (``[policy]``, the address, the loop header)."""
    from quinn.mailbox import LOOP_HEADER, Rules

    return Rules.from_config(config, LOOP_HEADER)


def tokens(config: Config) -> TokenSource | None:
    """The OAuth token source, when IMAP or SMTP logs in with ``auth = "oauth2"`` (``[oauth]``)."""
    from quinn.oauth import token_source

    return token_source(config)


def sender(config: Config, source: TokenSource | None = None) -> SmtpSender:
    """The SMTP client of ``[smtp]``; ``source``: the token source it shares with the mailbox (default: its own)."""
    from quinn.mailbox import SmtpSender

    return SmtpSender(config.smtp, source or (tokens(config) if config.smtp.auth == "oauth2" else None))


def mailbox(config: Config, source: TokenSource | None = None) -> ImapMailbox:
    """The IMAP client of ``[imap]`` (not connected yet); ``source`` as for ``sender``."""
    from quinn.mailbox import ImapMailbox

    return ImapMailbox(config.imap, source or (tokens(config) if config.imap.auth == "oauth2" else None))


def database(config: Config) -> Database:
    """The database of ``database.url``, opened and migrated."""
    from quinn.db import Database

    return Database.open(config.database.url, config.database.secret("auth_token"))


def embedder(config: EmbeddingsConfig) -> Embedder | None:
    """The embedding model of ``[embeddings]`` (seconds to load a local one)."""
    from quinn.hardening import fit_torch_to_sandbox
    from quinn.memory import embedder_for

    if config.backend == "sentence-transformers":
        fit_torch_to_sandbox()  # under MemoryDenyWriteExecute=yes torch's JIT kernels would fail
    return embedder_for(config)


def store(db: Database, embedder: Embedder | None) -> MemoryStore:
    """The memory store on ``db``; without an embedder it searches by keywords only."""
    from quinn.memory import MemoryStore

    return MemoryStore(db, embedder)


def agent(config: Config, llm: LLM, prompts: PromptStore, store: MemoryStore, stage: Any = None) -> Agent:
    """The agent that answers and learns; ``stage``: the metrics' stage timer, when there are metrics."""
    from quinn.agent import Agent

    return Agent(config, llm, prompts, store, stage) if stage is not None else Agent(config, llm, prompts, store)


def scheduler(config: Config, store: MemoryStore, llm: LLM | None, prompts: PromptStore,
              clock: Clock | None = None) -> JobRunner:  # fmt: skip
    """The background jobs' runner (``[scheduler]``, ``[retention]``)."""
    from quinn.scheduler import JobRunner

    return JobRunner(store, llm, prompts, config.scheduler, clock=clock or Clock(), retention=config.retention)


@dataclass
class Parts:
    """The daemon's parts. The memory side (``db``, ``store``, ``agent``) comes with ``open_memory``, the
    mail-sending side (``delivery``) with ``connect_delivery``; ``reload`` rebuilds what a new config changes."""

    config: Config
    clock: Clock
    prompts: PromptStore
    llm: LLM
    rules: Rules
    sender: SmtpSender
    mailbox: ImapMailbox
    stage: Any = None  # the metrics' stage timer handed to the agent
    db: Database | None = None
    store: MemoryStore | None = None
    agent: Agent | None = None
    scheduler: JobRunner | None = None
    delivery: Delivery | None = None
    _delivery_io: tuple[Callable[..., Any], Callable[..., Any]] | None = field(default=None, repr=False)

    @classmethod
    def build(cls, config: Config, clock: Clock | None = None, stage: Any = None) -> Parts:
        """What needs no connection: templates (checked), model client, rules, SMTP and IMAP clients."""
        source = tokens(config)  # one for both logins: they renew the same account's token
        return cls(config, clock or Clock(), prompts(config), llm(config), rules(config), sender(config, source),
                   mailbox(config, source), stage)  # fmt: skip

    async def open_memory(self) -> None:
        """Open the database, load the embedder and build the agent on them."""
        self.db = database(self.config)
        loaded = await asyncio.to_thread(embedder, self.config.embeddings)
        self.store = store(self.db, loaded)
        self.agent = agent(self.config, self.llm, self.prompts, self.store, self.stage)

    async def start_scheduler(self) -> None:
        """Start the background jobs, when ``[scheduler] enabled``."""
        assert self.store is not None
        if self.config.scheduler.enabled:
            self.scheduler = scheduler(self.config, self.store, self.llm, self.prompts, self.clock)
            await self.scheduler.start()

    def connect_delivery(self, run_db: Callable[..., Any], run_imap: Callable[..., Any]) -> Delivery:
        """The outbox's delivery through this SMTP client and mailbox; ``run_db``/``run_imap`` put a call on the
        database's and the IMAP connection's thread. Rebuilt on reload: it holds the SMTP and IMAP settings."""
        from quinn.mailbox import Delivery, Outbox

        assert self.db is not None
        self._delivery_io = (run_db, run_imap)
        self.delivery = Delivery(self.config.smtp, self.config.imap, Outbox(self.db), self.sender, self.mailbox,
                                 run_db, run_imap)  # fmt: skip
        return self.delivery

    def reload(self, new: Config) -> ReloadPlan:
        """Apply the reloadable part of ``new``: every part holding a changed setting is rebuilt from it, and the
        templates are re-read. Raises ``QuinnError`` and changes nothing when the new templates or model settings
        do not work."""
        plan = plan_reload(self.config, new)
        c = plan.config
        fresh = prompts(c, checked=False) if plan.changed("prompts") else self.prompts
        fresh.reload()
        from quinn.agent import TEMPLATE_NAMES

        for name in TEMPLATE_NAMES:  # a broken edit fails the reload, not the next mail
            fresh.load(name)
        model = llm(c) if plan.changed("llm") else self.llm
        # Nothing is changed before this line: everything above may raise.
        self.config, self.prompts, self.llm, self.rules = c, fresh, model, rules(c)
        if plan.changed("smtp"):
            self.sender = sender(c, self.mailbox.tokens)
        if self._delivery_io is not None:  # it holds [smtp] and [imap] values: a rotated password must reach it
            self.connect_delivery(*self._delivery_io)
        if self.store is not None:  # [memory], [policy] and the model reach the agent only through a new one
            self.agent = agent(c, model, fresh, self.store, self.stage)
        if self.scheduler is not None:  # the next job run uses the new templates and model
            self.scheduler.use(model, fresh)
        return plan

    async def close(self) -> None:
        """Stop the jobs and close the database (the IMAP connection is the caller's: it owns its thread)."""
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.db is not None:
            self.db.close()
