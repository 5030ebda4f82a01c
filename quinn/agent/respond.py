"""The agent: from an email and what Quinn remembers to the reply, and from the reply to new memories.

``Agent`` is owned by the app and holds the LLM seam, the prompt store, the memory store and the domain
detector. For one email it (1) gathers memory into ``ReplyInputs`` (on the DB thread), (2) carries out memory
commands written in the mail, (3) asks the model, which has the memory tools, and (4) after the reply, learns
from the mail (sensory gate, then the extraction call). Every memory change is reported in the reply.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from mirascope import llm as mirascope_llm

from quinn.agent import confirm, consent, digest, forgetting, known, memory_mail, proposals, reply_trace
from quinn.agent.context import (
    ReplyInputs,
    ThreadMessage,
    cut_text,
    estimate_tokens,
    others_on_thread,
    reply_variables,
    visible,
)
from quinn.agent.domains import DomainDetector
from quinn.agent.extract import ExtractionOutcome, extract_memories
from quinn.agent.gate import sensory_gate
from quinn.agent.grounding import Grounding
from quinn.agent.llm import LLM, PromptTooLong, Usage
from quinn.agent.own_words import learn_own_words
from quinn.agent.prompts import PromptStore
from quinn.agent.purge import purge
from quinn.agent.reply_trace import Trace, trace_of
from quinn.agent.state import user_state
from quinn.agent.tools import MEMORY_TOOLS, MemoryChange, MemoryDeps
from quinn.agent.usage import record_usage
from quinn.clock import utcnow
from quinn.config import Config
from quinn.documents import Extracted
from quinn.errors import RetryLater, StoreError, TemplateError
from quinn.mailbox import InboundEmail
from quinn.memory import (
    MemoryStore,
    asked_to_keep,
    earlier_versions,
    hybrid_search,
    linked_hits,
    looks_back,
    record_retrievals,
    relevant,
    search_passages,
    user_passages,
    versions_of,
    whole_history,
)

log = logging.getLogger(__name__)

RunDb = Callable[..., Awaitable[Any]]
MEMORY_CITATION = re.compile(r"\[memory:(\d+)\]")  # how context_block cites a memory in the prompt
PROFILE_ROWS = 1000  # profile memories read per reply; far more than any token budget shows
REPLY_TRIES = 3  # a reply prompt too long for the model's context is asked again, shorter, up to this many times
#: Times a named stage (``Metrics.stage``); the default times nothing.
StageTimer = Callable[[str], AbstractContextManager[Any]]


def _untimed(name: str) -> AbstractContextManager[Any]:
    return nullcontext()


@dataclass(frozen=True)
class Attachment:
    """A file attached to a reply."""

    filename: str
    content_type: str
    data: bytes


@dataclass(frozen=True)
class Answer:
    """The reply body and everything the app needs to file it."""

    body: str
    template: str
    prompt_version: str
    usage: Usage | None = None
    attachments: tuple[Attachment, ...] = ()
    changes: tuple[MemoryChange, ...] = ()
    purged: bool = False  # the user's memory is gone: store nothing more about them
    private: bool = False  # carries the user's memory wholesale (export, digest, questions): to From only, no Cc
    shown: tuple[int, ...] = ()  # the memories the reply prompt showed the model, by id (`quinn ask` lists them)
    trace: Trace | None = None  # what reached the model's prompt (agent/reply_trace.py); None: no model reply


@dataclass
class _Work:
    """Memory commands carried out before the model writes the reply."""

    actions: list[str] = field(default_factory=list)
    changes: list[MemoryChange] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)  # where else a forget took the fact out (issue 35)
    forgotten: list[Callable[[str], bool]] = field(default_factory=list)  # what it asked to forget: never resaved
    opted_out: bool = False  # the person asked not to be remembered (consent.py): read what is known, store nothing


def shown_memory_ids(variables: dict[str, Any]) -> list[int]:
    """The memories a rendered reply prompt shows (profile and retrieved block), by their ``[memory:ID]`` cites."""
    text = f"{variables.get('profile') or ''}\n{variables.get('memories') or ''}"
    return sorted({int(found) for found in MEMORY_CITATION.findall(text)})


def source_of(email: InboundEmail, session_id: str | None = None) -> dict[str, Any]:
    """The ``source`` metadata every memory learnt from ``email`` carries; ``session_id``, its thread, makes the
    memories of one conversation rank together (quinn/memory/conversations.py)."""
    source = {"message_id": email.message_id, "subject": email.subject,
              "date": email.date.isoformat() if email.date else None}  # fmt: skip
    return {"source": source | ({"session_id": session_id} if session_id else {})}


def subject_kept(email: InboundEmail, user: str, changes: Sequence[MemoryChange] = ()) -> InboundEmail:
    """``email`` with its subject as memories learnt from it keep it (``memory_mail.kept_subject``): the forget
    has run by then, and a source written after it must not bring back "Re: Edda's new job"."""
    subject = memory_mail.kept_subject(email.subject, changes, email.text, user, email.sender_name)
    return email if subject == email.subject else dataclasses.replace(email, subject=subject)


def recallable(email: InboundEmail) -> bool:
    """Whether the mail (and the model's reply to it) joins conversation recall: not a memory command or a
    confirmation, whose text names what is to be forgotten, exported or purged (the memories hold the result)."""
    return recallable_text(email.subject, email.text, email.full_text)


def recallable_text(subject: str, text: str, full_text: str | None = None) -> bool:
    """``recallable`` on stored text (``messages``: subject and clean body), for mail indexed after the fact."""
    return not memory_mail.parse_requests(text) and not confirm.codes_in(f"{subject}\n{full_text or text}")


class Agent:
    """Reply and learn for one mailbox; built once the store is open."""

    def __init__(
        self, config: Config, llm: LLM, prompts: PromptStore, store: MemoryStore, stage: StageTimer = _untimed
    ) -> None:
        """``stage`` times the reply's parts (retrieve, render, llm): the app passes ``Metrics.stage``."""
        self.config = config
        self.stage = stage
        self.llm = llm
        self.prompts = prompts
        self.store = store
        self.domains = DomainDetector(config.domains, store.embedder, config.memory.domain_min_similarity)
        self._kept: set[str] = set()  # reply template versions already recorded in prompt_versions

    async def _db(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return await self.store.db.run(fn, *args, **kwargs)

    # -- 1. what the model sees ------------------------------------------------------------------------

    def reply_inputs(
        self, email: InboundEmail, user: str, use_memory: bool, thread: Sequence[ThreadMessage] = (),
        summary: str | None = None, actions: Sequence[str] = (), *, touch: bool = True,
        session_id: str | None = None, documents: Sequence[Extracted] = (), authenticated: bool | None = None,
    ) -> ReplyInputs:  # fmt: skip
        """Persona, profile, domains and retrieved memories for ``email`` (runs on the DB thread), with its
        attachments as read (``documents``).

        ``touch`` counts the retrieval as an access (strengthening the memories); a preview passes False.
        ``authenticated``: whether the sender is trusted, which picks the ``[budget]`` the mail's text and its
        attachment list are cut to (None: as ``use_memory``).
        """
        store = self.store
        c = self.config
        persona, profile, hits, domains, passages = [], [], [], [], []
        state: dict[str, str] = {}
        earlier, history, token_budget = {}, None, c.memory_tokens()
        if use_memory:
            state = user_state(store.db, user)  # what the last conversation left open: "recent context"
            persona = store.get_all(None, scope="global", type="persona")
            # Every profile memory: the budget keeps the most important (context.profile_order), not the newest.
            profile = store.get_all(user, scope="profile", limit=PROFILE_ROWS)
            query = f"{email.subject}\n{email.text or email.full_text}"
            matches = self.domains.detect(query)
            domains = [m.name for m in matches]
            if matches:
                log.info("mail %s: domains %s", email.message_id, ", ".join(f"{m.name} ({m.reason})" for m in matches))
            # Twice k: memories of other domains are dropped after search, in context assembly.
            hits = hybrid_search(store, user, query, k=c.memory.search_k * 2, include_global=True, touch=False)
            hits = [h for h in hits if relevant(h.worded, h.vector_similarity, c.memory.recall_min_similarity)]
            hits = linked_hits(store, user, query, hits)  # memories tied to entities the mail names
            # Past conversation (issue 14): not this mail, not what the thread buffer shows verbatim, and with
            # others on the mail only what each of them saw; the knowledge base's (`quinn kb`) for everyone.
            buffered = [email.message_id, *(m.message_id for m in thread if m.message_id)]
            others = others_on_thread(email, user, c.smtp.from_address)
            passages = search_passages(store, user, query, k=c.memory.search_k, exclude_message_ids=buffered,
                                       others=others, domains=domains)  # fmt: skip
            passages = [p for p in passages if relevant(p.worded, p.similarity, c.memory.recall_min_similarity)]
            # Issue 32: the version each memory replaced ("earlier: X (until DATE)") when the email looks back in
            # time (beside the new value, a small model answers the old one as current), and the person's whole
            # past mail when it may fit the budget (context.recall_blocks decides; about four characters a token).
            if looks_back(query, utcnow().date()):
                earlier = earlier_versions(store.db, [*profile, *(h.memory for h in hits)])
            history = whole_history(store.db, user, token_budget * 4, exclude_message_ids=buffered, others=others,
                                    domains=domains)  # fmt: skip
        inputs = ReplyInputs(
            email=email, user_id=user, assistant_name=c.smtp.from_name, assistant_address=c.smtp.from_address,
            today=utcnow().date().isoformat(), memory_enabled=use_memory, persona=persona, profile=profile,
            hits=hits, passages=passages, thread=list(thread), thread_summary=summary,
            token_budget=token_budget, domains=domains, now=utcnow(), actions=list(actions), state=state,
            documents=list(documents), document_tokens=c.documents.prompt_tokens,
            mail_tokens=self.budget(use_memory if authenticated is None else authenticated)[0],
            attachments_listed=self.budget(use_memory if authenticated is None else authenticated)[1],
            earlier=earlier, history=history or (), tools=c.llm.max_tool_rounds > 0,
        )  # fmt: skip
        if use_memory and touch:
            # Use is what reached the prompt: the profile shown and the hits that survived the domain, privacy
            # and budget filters; not every search candidate. It strengthens memory (stability) and, per session,
            # feeds the decay job's spacing effect.
            shown = shown_memory_ids(reply_variables(inputs))
            store.record_access(shown, utcnow())
            if session_id is not None:
                record_retrievals(store.db, session_id, shown, utcnow())
        return inputs

    def budget(self, authenticated: bool) -> tuple[int, int, int]:
        """(mail tokens, attachments listed, request tokens) of ``[budget]`` for a sender of this trust."""
        b = self.config.budget
        if authenticated:
            return b.mail_tokens, b.attachments_listed, b.request_tokens
        return b.mail_tokens_unauthenticated, b.attachments_listed_unauthenticated, b.request_tokens_unauthenticated

    # -- 2 and 3. the answer ---------------------------------------------------------------------------

    async def answer(
        self, email: InboundEmail, user: str, use_memory: bool, *, thread: Sequence[ThreadMessage] = (),
        summary: str | None = None, session_id: str | None = None, withheld: str | None = None,
        documents: Sequence[Extracted] = (), authenticated: bool | None = None,
    ) -> Answer:  # fmt: skip
        """The reply to ``email``: memory commands first, then the model (with memory tools when memory is on).
        ``documents``: the mail's attachments as read (quinn/documents), shown to the model with the mail.
        ``authenticated``: the sender is trusted (None: as ``use_memory``); it picks the prompt's ``[budget]``.

        Without memory (``use_memory`` false: the sender is not trusted, or the reply goes to someone else),
        memory commands are refused and the reply says why (``withheld``), without a model call for them.
        A template that cannot render is the admin's to fix, and a store error is not the mail's fault: the mail
        waits (``RetryLater``) with the reason, as for a model that is down.
        """
        try:
            trusted = use_memory if authenticated is None else authenticated
            if not use_memory:
                return await self._without_memory(email, user, thread, summary, withheld, trusted)
            return await self._answer(email, user, thread, summary, session_id, documents)
        except TemplateError as exc:
            raise RetryLater(f"prompt template cannot render: {exc.message}", exc.hint) from exc
        except StoreError as exc:  # the memory store refused a command's change: retried, then quarantined
            raise RetryLater(f"memory store: {exc.message}", exc.hint) from exc

    async def _without_memory(
        self, email: InboundEmail, user: str, thread: Sequence[ThreadMessage], summary: str | None,
        withheld: str | None, authenticated: bool = False,
    ) -> Answer:  # fmt: skip
        why = withheld or "This email may not use your memory."
        if memory_mail.parse_requests(email.text) or confirm.codes_in(f"{email.subject}\n{email.full_text}"):
            log.info("mail %s: memory command refused: %s", email.message_id, why)
            return Answer(memory_mail.refused(why), memory_mail.REFUSED_TEMPLATE, "", private=True)
        with self.stage("retrieve"):
            inputs = await self._db(self.reply_inputs, email, user, False, thread, summary,
                                    authenticated=authenticated)  # fmt: skip
        answer = await self._model_reply(inputs, None, _Work(), self.budget(authenticated)[2])
        note = f"\n\n---\n{withheld}" if withheld else ""
        return Answer(answer.body + note, answer.template, answer.prompt_version, answer.usage, trace=answer.trace)

    async def _answer(
        self, email: InboundEmail, user: str, thread: Sequence[ThreadMessage], summary: str | None,
        session_id: str | None = None, documents: Sequence[Extracted] = (),
    ) -> Answer:  # fmt: skip
        private_ok = not others_on_thread(email, user, self.config.smtp.from_address)
        codes = confirm.codes_in(f"{email.subject}\n{email.full_text}")
        if codes and memory_mail.confirms(email.text):
            return await self._confirmed(email, user, codes)
        requests = memory_mail.parse_requests(email.text)
        # A reply to the user's own digest may correct it by number ("forget 2", "the third one is wrong").
        listed = await self._db(digest.numbered, self.store.db, email.in_reply_to, user)
        wrong = digest.corrections(email.text) if listed else []
        if wrong:  # "forget 2" names a digest item, not a memory about "2"
            requests = [r for r in requests if not (r.kind == "forget" and digest.corrections(f"forget {r.argument}"))]
        kinds = {r.kind for r in requests}
        if "purge" in kinds:
            log.info("mail %s: %s asks for a purge; asking for confirmation", email.message_id, user)
            code = await self._db(confirm.issue, self.store.db, user, "purge", email.message_id, utcnow())
            return Answer(memory_mail.purge_question(user, code), memory_mail.PURGE_CONFIRM_TEMPLATE, "",
                          private=True)  # fmt: skip
        work = await self._db(self._carry_out, email, user, requests, private_ok)
        if wrong:
            assert listed is not None
            await self._db(self._correct_digest, user, listed, wrong, private_ok, work)
        if "export" in kinds:
            log.info("mail %s: %s asks for an export; asking for confirmation", email.message_id, user)
            code = await self._db(confirm.issue, self.store.db, user, "export", email.message_id, utcnow())
            body = memory_mail.export_question(user, code) + memory_mail.changes_footer(work.changes, work.elsewhere)
            return Answer(body, memory_mail.EXPORT_CONFIRM_TEMPLATE, "", changes=tuple(work.changes), private=True)
        if "digest" in kinds:
            return await self._digest(email, user, private_ok, work)
        with self.stage("retrieve"):
            inputs = await self._db(self.reply_inputs, email, user, True, thread, summary, work.actions,
                                    session_id=session_id, documents=documents)  # fmt: skip
        deps = MemoryDeps(
            store=self.store, user_id=user, run_db=self.store.db.run, private_ok=private_ok,
            others=tuple(others_on_thread(email, user, self.config.smtp.from_address)),
            domains=tuple(inputs.domains), known_domains=tuple(self.domains.names),
            source=source_of(subject_kept(email, user, work.changes), session_id),
            valid_from=email.date, changes=work.changes, read_only=work.opted_out,
            keep_secrets=asked_to_keep(email.text), forgotten=tuple(work.forgotten),
            # What they sent, without their memory commands: "forget that I have a dog" is not their word for a
            # memory of the dog (the 1.5B pilot saved the forgotten fact again from the request's own words).
            grounding=Grounding.of([memory_mail.learnable_text(email.text),
                                    *(d.text for d in documents if not d.error)],
                                   [user, email.from_.name if email.from_ else ""]),
        )  # fmt: skip
        return await self._model_reply(inputs, deps, work, self.budget(True)[2])

    def _carry_out(
        self, email: InboundEmail, user: str, requests: Sequence[memory_mail.MemoryRequest], private_ok: bool
    ) -> _Work:
        """Consent, remember and forget (DB thread); each change becomes an action line and a footer line."""
        work = _Work()
        name = (email.sender_name or user).split()[0]
        kinds = {r.kind for r in requests}
        if "resume" in kinds:
            back = consent.opt_in(self.store.db, user)
            work.actions.append("Remembering them again, as asked: what they write from now on may be kept." if back
                                else "They asked to be remembered again, but had never asked you to stop.")  # fmt: skip
        elif "stop" in kinds:
            consent.opt_out(self.store.db, user, utcnow(), email.message_id)
            work.actions.append('Stopped remembering them, as asked: nothing new from their emails is stored until '
                                'they write "you may remember me again"; what is already stored stays until they ask '
                                "you to forget it or to delete everything.")  # fmt: skip
        work.opted_out = consent.opted_out(self.store.db, user)
        for request in requests:
            if request.kind == "remember" and work.opted_out:
                work.actions.append(f'Asked to remember "{request.argument}", but they asked you not to '
                                    'remember them: nothing was saved (they can write "you may remember me '
                                    'again").')  # fmt: skip
            elif request.kind == "remember":
                change = memory_mail.remember(self.store, user, name, request.argument, source_of(email), email.date)
                work.changes.append(change)
                work.actions.append(f"Saved, as asked: {change.content} [memory:{change.memory_id}]")
            elif request.kind == "forget":
                fact = forgetting.Forgetting.of(request.argument).besides_person(user, name)
                work.forgotten.append(fact.mentions)
                forgot = memory_mail.forget(self.store, user, request.argument, private_ok)
                if forgot is None:
                    work.actions.append(f'Asked to forget "{request.argument}", but no memory clearly matches it: '
                                        "nothing was forgotten; ask which memory they mean.")  # fmt: skip
                    continue
                work.changes += forgot.changes
                if not forgot.changes:
                    work.actions.append(f'Asked to forget "{request.argument}": no current memory held it, but '
                                        "what had been written from it is gone now (next line).")  # fmt: skip
                for change in forgot.changes:
                    if change.action == "forgotten":
                        work.actions.append(f"Forgotten, as asked: {change.content} [memory:{change.memory_id}]")
                    else:
                        work.actions.append(f"Rewritten without it, the rest kept: {change.content} "
                                            f"[memory:{change.memory_id}]")  # fmt: skip
                if forgot.elsewhere:
                    where = forgetting.described(forgot.elsewhere)
                    work.actions.append(f"Also taken out of: {where}.")
                    work.elsewhere.append(where)
        return work

    def _correct_digest(
        self, user: str, listed: Sequence[int], wrong: Sequence[int], private_ok: bool, work: _Work
    ) -> None:
        """Forget the digest items the user marked wrong (DB thread); each becomes an action and a footer line.
        A private memory is not touched, nor named, with others on the mail (as ``memory_mail.forget``)."""
        for number in wrong:
            if number > len(listed):
                work.actions.append(f"They marked item {number} of your digest wrong, but it listed only "
                                    f"{len(listed)}: nothing was forgotten; ask which one they mean.")  # fmt: skip
                continue
            memory = digest.current_version(self.store, listed[number - 1], user)
            if memory is None:
                work.actions.append(f"Item {number} of your digest was already forgotten or replaced.")
                continue
            if memory.private and not private_ok:
                work.actions.append(f"Item {number} of your digest is private and others are on this email: it "
                                    "was not forgotten; ask them to write to you alone about it.")  # fmt: skip
                continue
            reason = f"marked wrong in reply to the digest (item {number})"
            elsewhere = forgetting.forget_by_id(self.store, memory.id, user_id=user, reason=reason)
            work.changes.append(MemoryChange("forgotten", memory.id, memory.content))
            also = f" (also taken out of: {forgetting.described(elsewhere)})" if elsewhere else ""
            work.actions.append(f"Forgotten, as they said item {number} of your digest is wrong: {memory.content} "
                                f"[memory:{memory.id}]{also}")  # fmt: skip

    async def _confirmed(self, email: InboundEmail, user: str, codes: list[str]) -> Answer:
        """A "yes" carrying a confirmation code: purge or export, if the code is the user's and still good."""
        action = await self._db(confirm.redeem, self.store.db, user, codes, email.message_id, utcnow())
        if action == "purge":
            return await self._purge(email, user)
        if action == "export":
            every = await self._db(self.store.get_all, user)
            others = others_on_thread(email, user, self.config.smtp.from_address)
            memories = visible(every, not others)
            held = await self._db(user_passages, self.store.db, user)
            seen = [p for p in held if p.seen_by(others)]  # as in prompts: only what those on the mail saw
            # Everything else that shapes replies (issue 35), with no one else on the mail: it is not sorted private.
            found = {} if others else await self._db(known.shaping, self.store, user)
            versions = await self._db(versions_of, self.store.db, user)
            data = memory_mail.export_json(user, memories, len(every) - len(memories), seen, len(held) - len(seen),
                                           shaping=found, versions=versions)  # fmt: skip
            files = (Attachment(f"quinn-memory-{utcnow().date().isoformat()}.json", "application/json", data),)
            log.info("mail %s: export confirmed: %d memories", email.message_id, len(memories))
            return Answer(memory_mail.export_sent(len(memories)), memory_mail.EXPORT_DONE_TEMPLATE, "",
                          attachments=files, private=True)  # fmt: skip
        log.info("mail %s: a confirmation code that is not valid (expired, used or another user's)", email.message_id)
        return Answer(memory_mail.CONFIRM_FAILED, memory_mail.CONFIRM_FAILED_TEMPLATE, "", private=True)

    async def _model_reply(self, inputs: ReplyInputs, deps: MemoryDeps | None, work: _Work,
                           request_tokens: int) -> Answer:  # fmt: skip
        """The model's reply. A prompt too long for the model's context (``PromptTooLong``), or over the
        ``request_tokens`` of the sender's ``[budget]`` (then it is not sent at all), is asked again with the
        thread, the memory budget and the files' share cut to fit, up to ``REPLY_TRIES`` times in all; not once a
        tool ran (its change is made: the mail waits instead, as for any ``RetryLater``). The mail's own text was
        cut to the budget's ``mail_tokens`` already: a request that still does not fit is never sent, and the mail
        waits and, past its tries, is quarantined with the reason."""
        for attempt in range(1, REPLY_TRIES + 1):
            try:
                return await self._model_reply_once(inputs, deps, work, request_tokens)
            except PromptTooLong as exc:
                if attempt == REPLY_TRIES or (deps is not None and deps.calls):
                    raise
                share = exc.keep_share()
                inputs = dataclasses.replace(
                    inputs, thread=list(inputs.thread)[len(inputs.thread) - int(len(inputs.thread) * share) :],
                    token_budget=max(1, int(inputs.token_budget * share)),
                    document_tokens=max(1, int(inputs.document_tokens * share)),
                )  # fmt: skip
                log.info("mail %s: the reply prompt is too long for the model (%s tokens of %s); asking again with "
                         "%d thread messages, %d tokens of memory and %d of files", inputs.email.message_id,
                         exc.requested or "?", exc.limit or "?", len(inputs.thread), inputs.token_budget,
                         inputs.document_tokens)  # fmt: skip
        raise AssertionError("unreachable: the last try returns or raises")

    async def _model_reply_once(self, inputs: ReplyInputs, deps: MemoryDeps | None, work: _Work,
                                request_tokens: int) -> Answer:  # fmt: skip
        with self.stage("render"):
            variables = reply_variables(inputs)
            rendered = self.prompts.render("reply", variables)
            # What a reply must not merely send back: the new email and the template's words around it, rendered
            # without the thread, summary, memories, passages and attached files, which a reply may rightly repeat.
            bare = self.prompts.render("reply", reply_variables(dataclasses.replace(
                inputs, persona=(), profile=(), hits=(), passages=(), state={}, thread=(), thread_summary=None,
                domains=(), actions=(), documents=())))  # fmt: skip
        needed = estimate_tokens(f"{rendered.system}\n{rendered.user}")
        if needed > request_tokens:  # never sent: a stranger's mail must not buy a big model bill (issue 30)
            raise PromptTooLong(f"the reply prompt needs about {needed} tokens, more than the {request_tokens} "
                                "of [budget] request_tokens for this sender: not sent", request_tokens,
                                needed)  # fmt: skip
        await self._keep_version(rendered.version)
        with self.stage("llm"):  # the model call with its tool rounds (a tool's memory search included)
            echo_of = (bare.user,) if self.config.llm.hold_copies else None
            recalled = [m.content for m in (*inputs.profile, *inputs.persona, *(h.memory for h in inputs.hits))]
            # The person's past mails, not Quinn's own replies: answering the same question as last time may
            # rightly say the same thing again.
            recalled += [h.passage.content for h in inputs.passages if h.passage.direction == "in"]
            # Whose facts a reply must not guess: the sender's, by their names (grounding.guessed).
            sender = inputs.email.from_.name if inputs.email.from_ else ""
            guesses = Grounding.of([], [inputs.user_id, sender]).names if self.config.llm.check_guesses else None
            if deps is None:
                result = await self.llm.text(rendered.system, rendered.user, echo_of=echo_of, recalled=recalled,
                                             guesses=guesses)  # fmt: skip
            else:
                ctx = mirascope_llm.Context(deps=deps)
                result = await self.llm.text(rendered.system, rendered.user, tools=MEMORY_TOOLS, ctx=ctx,
                                             echo_of=echo_of, recalled=recalled, guesses=guesses)  # fmt: skip
        changes = tuple(deps.changes) if deps is not None else tuple(work.changes)
        body = (
            result.text
            + memory_mail.changes_footer(changes, work.elsewhere)
            + (consent.FOOTER if work.opted_out else "")
        )
        prompt = f"{rendered.system}\n{rendered.user}"
        shown = tuple(int(i) for i in MEMORY_CITATION.findall(prompt))
        trace = trace_of(inputs, variables, prompt, deps.calls if deps is not None else ())
        return Answer(body, "reply", rendered.version, result.usage, tuple(work.attachments), changes, shown=shown,
                      trace=trace)  # fmt: skip

    async def _keep_version(self, version: str) -> None:
        """Record the text of the reply template version in use, once per version (agent/proposals.py)."""
        if version in self._kept:
            return
        current, text = self.prompts.text_of("reply")
        if current == version:  # else the file changed between the render and now: the next reply records it
            await self._db(proposals.keep_version, self.store.db, version, "reply", text, utcnow())
            self._kept.add(version)

    async def _digest(self, email: InboundEmail, user: str, private_ok: bool, work: _Work) -> Answer:
        """What Quinn knows about the user, to the user's own address only; private memories stay out when others
        are on the mail (the rule every prompt follows: tests/proof/test_isolation.py)."""
        memories = visible(await self._db(self.store.get_all, user), private_ok, utcnow())
        groups = memory_mail.digest_groups(memories)
        rendered = self.prompts.render("digest", {"user": {"address": user}, "groups": groups,
                                                  "others_on_thread": not private_ok})  # fmt: skip
        # What else shapes replies (issue 35), with no one else on the mail (it is not sorted private).
        shaping = known.described(await self._db(known.shaping, self.store, user)) if private_ok else ""
        also = f"\n\nAlso shaping my replies:\n{shaping}" if shaping else ""
        if not groups:
            body = "I don't remember anything about you yet." + also
            body += memory_mail.changes_footer(work.changes, work.elsewhere)
            return Answer(body, "digest", rendered.version, None, tuple(work.attachments), tuple(work.changes),
                          private=True)  # fmt: skip
        result = await self.llm.text(rendered.system, rendered.user, purpose="digest")
        body = result.text + also + memory_mail.changes_footer(work.changes, work.elsewhere)
        return Answer(body, "digest", rendered.version, result.usage, tuple(work.attachments), tuple(work.changes),
                      private=True)  # fmt: skip

    async def _purge(self, email: InboundEmail, user: str) -> Answer:
        counts = await self._db(purge, self.store, user)
        log.info("mail %s: purge confirmed by %s: %s", email.message_id, user, counts)
        return Answer(memory_mail.purge_report(counts), memory_mail.PURGE_DONE_TEMPLATE, "", purged=True,
                      private=True)  # fmt: skip

    # -- 4. learning -----------------------------------------------------------------------------------

    async def learn(self, user: str, email: InboundEmail) -> ExtractionOutcome | None:
        """Extract memories from an answered mail of the authenticated user, unless the gate says it is trivial.

        A mail with memory commands is learnt from too, without the commands (`memory_mail.learnable_text`): "forget
        X, and by the way I started at Acme" still teaches the new job, and "remember that I moved to Porto" lets
        the extraction supersede "lives in Lisbon". A purge request teaches nothing.
        """
        if await self._db(consent.opted_out, self.store.db, user):
            log.info("mail %s: no extraction, %s asked not to be remembered", email.message_id, user)
            await self._learnt(email, reply_trace.OPTED_OUT)
            return None
        text = memory_mail.learnable_text(email.text)
        if not text and text != email.text.strip():
            log.info("mail %s: no extraction, the mail was only memory commands", email.message_id)
            await self._learnt(email, reply_trace.COMMANDS_ONLY)
            return None
        # What the person asked to forget while this mail waited to be learnt from (a retry after the model timed
        # out, or a forget answered during this extraction) is not learnt now: out of the text the model sees,
        # and out of what it stored (``_forget_learnt``), since a model may offer what it was not shown.
        forgets = await self._db(forgetting.noted, self.store.db, email.message_id)
        # The subject goes with each memory as its source: without what this mail, or a later one, forgot.
        email = subject_kept(email, user)
        if forgets and (subject := forgetting.without_all(email.subject, forgets)) != email.subject:
            email = dataclasses.replace(email, subject=subject)
        text = forgetting.without_in_mail(text, forgets).strip()
        if text != email.text.strip():
            if not text:
                log.info("mail %s: no extraction, all it said was asked to be forgotten", email.message_id)
                await self._learnt(email, reply_trace.FORGOTTEN)
                return None
            email = dataclasses.replace(email, text=text)
        # What reaches the extraction prompt is cut as the reply's is ([budget] mail_tokens: learning is for
        # authenticated senders only); the memories are grounded in what the model saw.
        email = dataclasses.replace(email, text=cut_text(email.text, self.config.budget.mail_tokens))
        decision = sensory_gate(email.text)
        log.info("mail %s: sensory gate: %s", email.message_id, decision)
        if not decision.passed:
            await self._learnt(email, reply_trace.REJECTED)
            return None
        if self.config.memory.learn == "own_words":  # their statements, verbatim: no model call (agent/own_words.py)
            outcome = await self._db(learn_own_words, self.store, user, email)
        else:
            outcome = await extract_memories(self.llm, self.prompts, self.store, user, email, self._db, self.domains)
        if outcome.usage is not None:
            await self.record("extract", outcome.usage, user, email.message_id)
        outcome = await self._db(self._forget_learnt, user, email.message_id, outcome)
        await self._learnt(email, reply_trace.PASSED, len(outcome.created) + len(outcome.updated))
        return outcome

    def _forget_learnt(self, user: str, message_id: str, outcome: ExtractionOutcome) -> ExtractionOutcome:
        """What this extraction stored that mentions a fact asked to be forgotten since its mail was queued (read
        again: a forget may have been answered while the model worked) is forgotten, as a forget by id would
        (runs on the DB thread, so no forget is answered between this read and these writes)."""
        forgets = forgetting.noted(self.store.db, message_id)
        if not forgets:
            return outcome
        gone: set[int] = set()
        for memory_id in (*outcome.created, *outcome.updated):
            memory = self.store.get(memory_id, user_id=user)
            if memory is not None and memory.active and any(f.mentions(memory.content) for f in forgets):
                forgetting.forget_by_id(self.store, memory_id, user_id=user,
                                        reason="asked to forget before this mail was learnt from")  # fmt: skip
                gone.add(memory_id)
        if gone:
            log.info("mail %s: %d memories learnt from it were asked to be forgotten", message_id, len(gone))
        return dataclasses.replace(outcome, created=[i for i in outcome.created if i not in gone],
                                   updated=[i for i in outcome.updated if i not in gone])  # fmt: skip

    async def _learnt(self, email: InboundEmail, gate: str, learnt: int | None = None) -> None:
        """What learning made of the mail, beside its reply's trace (the console's memory-health figures)."""
        await self._db(reply_trace.learnt, self.store.db, email.message_id, gate, learnt)

    async def record(self, purpose: str, usage: Usage | None, user: str | None, message_id: str | None) -> None:
        """Record a call chain's token usage (per user, per email, per job)."""
        if usage is not None:
            await self._db(record_usage, self.store.db, purpose, usage, user_id=user, message_id=message_id)
