"""The map of personal data (issue 35): every table and file that can hold words about a person, declared once.

Each entry names the table, its owner (the module that holds its SQL and its ``purge_user``), what each of its
text and blob columns holds, and what each promise Quinn makes to a person does to it:

- ``forget``: "forget that …" (agent/memory_mail.py), and a forget by memory id (the model's forget tool, the
  console's and the CLI's forget, "forget 2" in reply to a digest: ``forgetting.forget_by_id``, the memory's own
  content as the fact);
- ``stop``: "stop remembering me" (agent/consent.py): what no longer grows;
- ``export``: "export my memory" (the JSON attachment, ``quinn memory export``);
- ``purge``: "delete everything you know about me" (agent/purge.py, ``quinn memory purge``);
- ``retention``: the ``[retention]`` windows (scheduler/retention.py, scheduler/cleanup.py);
- ``see``: "what do you know about me?" (the digest answer), the console's person page, and in short the
  periodic digest mail (``known.in_brief``: state notes, and counts of the rest).

It is data only, read by the tests and the docs: tests/agent/test_personal_data.py walks the real schema (every
migration applied on a libSQL file) and fails on a table, or a text or blob column, that is not declared here,
so the next table that can hold a person's words cannot be forgotten by a promise. deploy/SECURITY.md lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: What a column holds. ``words``: text a person wrote or that was written about them (a memory, a mail, a
#: summary); ``address``: a person's address or a canonical user id; ``ids``: ids, hashes, times, names of
#: templates or states (nothing a person said); ``bytes``: a mail's or a file's raw bytes; ``vector``: an
#: embedding of words (a person's words can be approximately recovered from it); ``index``: a full-text index's
#: postings of words.
Holds = Literal["words", "address", "ids", "bytes", "vector", "index"]


@dataclass(frozen=True)
class Holder:
    """One table that can hold something of a person, and what each promise does to it."""

    table: str
    owner: str  # the module holding its SQL and its purge_user
    columns: dict[str, Holds]  # every TEXT/BLOB column (and every column of an FTS table) and what it holds
    forget: str
    stop: str
    export: str
    purge: str
    retention: str
    see: str
    purged_by: str = ""  # the module whose purge_user deletes its rows, when not the owner

    @property
    def purger(self) -> str:
        """The module whose ``purge_user`` deletes the table's rows of a person."""
        return self.purged_by or self.owner


def _fts(table: str, owner: str, of: str) -> list[Holder]:
    """An external-content FTS5 table and its shadow tables: the postings of ``of``'s words, kept by triggers."""
    shadow: dict[str, dict[str, Holds]] = {
        "_data": {"block": "index"}, "_docsize": {"sz": "ids"}, "_config": {"k": "ids", "v": "ids"},
        "_idx": {"segid": "ids", "term": "index", "pgno": "ids"},
    }  # fmt: skip
    rule = f"follows {of} (triggers); a purge merges the index (Database.merge_text_indexes) so no posting stays"
    base: dict[str, Holds] = {"owner_key": "ids"} if table != "messages_fts" else {}
    main: dict[str, Holds] = {**{c: "index" for c in ("content", "tags", "subject", "body") if _has(table, c)}, **base}
    tables = [Holder(table, owner, main, rule, rule, "not exported (an index)", rule, rule, "not shown (an index)")]
    for suffix, columns in shadow.items():
        tables.append(Holder(f"{table}{suffix}", owner, dict(columns), rule, rule, "not exported (an index)", rule,
                             rule, "not shown (an index)"))  # fmt: skip
    return tables


def _has(table: str, column: str) -> bool:
    """Whether the FTS table ``table`` indexes ``column``."""
    return column in {
        "memories_fts": ("content", "tags"), "passages_fts": ("content",), "messages_fts": ("subject", "body"),
    }[table]  # fmt: skip


NOT_EXPORTED_IDS = "not exported: ids only"

MAP: tuple[Holder, ...] = (
    # --- memory (quinn/memory) -------------------------------------------------------------------------------
    Holder(
        "memories",
        "quinn.memory.store",
        {
            "user_id": "address",
            "scope": "ids",
            "domain": "ids",
            "type": "ids",
            "content": "words",
            "tags": "words",
            "metadata": "words",
            "created_at": "ids",
            "updated_at": "ids",
            "valid_from": "ids",
            "valid_to": "ids",
            "expires_at": "ids",
            "last_accessed_at": "ids",
            "embedding": "vector",
            "embedding_model": "ids",
            "uid": "ids",
            "content_format": "ids",
        },
        forget="every current memory that mentions the fact: one holding other facts gets a new version without it, "
        "one holding nothing else ends (active 0, kept in history); replaced versions that mention it, shown as "
        '"earlier" values beside current ones, end too; a forget by id ends that memory and reaches the rest '
        "with its content as the fact; the subject of the email a memory came from (metadata source) is "
        "rewritten without it, in place, on every row of the person",
        stop="nothing new from extraction, tools, remember, summaries (job or on request), session close, "
        "reflection or consolidation",
        # secrets (credentials, card and account numbers, government ids) are masked unless the person asked
        export="every version (records.py)",
        purge="deleted (memory.store.purge_user)",
        retention="archived by cleanup past archived_days unused",
        see="current ones in the digest answer and on the console's person page",
    ),
    Holder(
        "memory_versions",
        "quinn.memory.store",
        {
            "user_id": "address",
            "change": "ids",
            "content": "words",
            "metadata": "words",
            "reason": "words",
            "changed_at": "ids",
        },
        forget="kept as history of the memory (out of every read)",
        stop="no new rows for an opted-out person but their own forgets and edits",
        export="each memory's versions: number, change, time",
        purge="deleted",
        retention="kept with its memory",
        see="a memory's versions on the console",
    ),
    *_fts("memories_fts", "quinn.memory.store", "memories"),
    Holder("memory_vector_stamp", "quinn.memory.store", {}, "-", "-", "-", "-", "-", "-"),
    Holder("memory_text_stamp", "quinn.memory.conversations", {}, "-", "-", "-", "-", "-", "-"),
    Holder(
        "memory_retrievals",
        "quinn.memory.retrievals",
        {"session_id": "ids", "at": "ids"},
        "kept (ids)",
        "no new rows grow memory",
        NOT_EXPORTED_IDS,
        "deleted",
        "with the memory",
        "not shown",
        purged_by="quinn.memory.store",
    ),
    Holder(
        "entities",
        "quinn.memory.graph",
        {
            "user_id": "address",
            "name": "words",
            "kind": "ids",
            "embedding": "vector",
            "embedding_model": "ids",
            "created_at": "ids",
        },
        forget="an entity the fact names is deleted with its relations",
        stop="the reflect job adds none",
        export="exported (graph)",
        purge="deleted",
        retention="kept",
        see="in the digest answer and on the person page",
        purged_by="quinn.memory.store",
    ),
    Holder(
        "relationships",
        "quinn.memory.graph",
        {
            "user_id": "address",
            "relation": "words",
            "embedding": "vector",
            "embedding_model": "ids",
            "created_at": "ids",
        },
        forget="the relations of a forgotten memory, and those that name the fact, are deleted (the edge ends)",
        stop="the reflect job adds none",
        export="exported (graph)",
        purge="deleted",
        retention="kept",
        see="in the digest answer and on the person page; counted in the periodic digest",
        purged_by="quinn.memory.store",
    ),
    Holder(
        "passages",
        "quinn.memory.passages",
        {
            "user_id": "address",
            "message_id": "ids",
            "in_reply_to": "ids",
            "direction": "ids",
            "sent_at": "ids",
            "subject": "words",
            "content": "words",
            "audience": "address",
            "embedding": "vector",
            "embedding_model": "ids",
            "created_at": "ids",
            "document": "words",
            "ref": "words",
        },
        forget="a passage that mentions the fact is replaced by one without it (no vector until reembed), its file's "
        "name and heading too; the mail of a forgotten memory leaves recall (retracted_messages)",
        stop="no new passages",
        export="exported (conversation)",
        purge="deleted (memory.store.purge_user)",
        retention="deleted with their message ([retention] mail_days)",
        see="counted on the person page",
        purged_by="quinn.memory.store",
    ),
    *_fts("passages_fts", "quinn.memory.passages", "passages"),
    Holder("passage_vector_stamp", "quinn.memory.passages", {}, "-", "-", "-", "-", "-", "-"),
    # --- mailbox (quinn/mailbox) -----------------------------------------------------------------------------
    Holder(
        "sessions",
        "quinn.mailbox.threads",
        {
            "id": "ids",
            "user_id": "address",
            "subject": "words",
            "subject_key": "words",
            "created_at": "ids",
            "last_message_at": "ids",
            "merged_into": "ids",
            "status": "ids",
            "summary": "words",
        },
        forget="a rolling summary or subject that mentions the fact is rewritten without it (the subject's key "
        "with it)",
        stop="summary no longer updated (summarize job, summarize on request)",
        export="summaries exported (thread_summaries)",
        purge="deleted",
        retention="with their messages",
        see="summaries in the digest answer and on the person page; counted in the periodic digest",
    ),
    Holder(
        "session_ids",
        "quinn.mailbox.threads",
        {"message_id": "ids", "session_id": "ids"},
        "kept (ids)",
        "kept for threading",
        NOT_EXPORTED_IDS,
        "deleted",
        "with the session",
        "not shown",
    ),
    Holder(
        "messages",
        "quinn.mailbox.threads",
        {
            "session_id": "ids",
            "user_id": "address",
            "direction": "ids",
            "message_id": "ids",
            "in_reply_to": "ids",
            "subject": "words",
            "from_addr": "address",
            "to_addrs": "address",
            "sent_at": "ids",
            "body": "words",
            "full_text": "words",
            "created_at": "ids",
        },
        forget="subject, text and full text rewritten without it a paragraph at a time, with their full-text "
        "rows; its passages leave recall",
        stop="stored for threading only, never indexed",
        export="through passages (conversation)",
        purge="deleted",
        retention="deleted after [retention] mail_days",
        see="counted on the person page",
    ),
    *_fts("messages_fts", "quinn.mailbox.threads", "messages"),
    Holder(
        "mail_state",
        "quinn.mailbox.ledger",
        {
            "folder": "ids",
            "message_id": "ids",
            "state": "ids",
            "reason": "ids",
            "user_id": "address",
            "session_id": "ids",
            "next_attempt_at": "ids",
            "received_at": "ids",
            "updated_at": "ids",
            "thread_key": "ids",
            "replied_at": "ids",
            "sender_key": "address",
            "lease_holder": "ids",
            "lease_until": "ids",
        },
        forget="kept (ids)",
        stop="kept (processing state)",
        export=NOT_EXPORTED_IDS,
        purge="unlinked: no user, no Message-ID",
        retention="kept (ids)",
        see="the mail ledger on the console",
    ),
    Holder(
        "outbound_domains",
        "quinn.mailbox.ledger",
        {"domain": "ids", "sent_at": "ids"},
        forget="-",
        stop="-",
        export="-",
        purge="- (recipient domains and times for the outbound caps, no person's words; gone after a day)",
        retention="deleted after a day",
        see="-",
    ),
    Holder(
        "outbox",
        "quinn.mailbox.outbox",
        {
            "message_id": "ids",
            "in_reply_to": "ids",
            "user_id": "address",
            "session_id": "ids",
            "recipients": "address",
            "raw": "bytes",
            "state": "ids",
            "last_error": "ids",
            "template": "ids",
            "prompt_version": "ids",
            "created_at": "ids",
            "sent_at": "ids",
            "reviewed_by": "ids",
            "reviewed_at": "ids",
            "draft_removed_at": "ids",
        },
        forget="raw copies of sent replies that mention it blanked; the forget's own reply blanked once sent; "
        "replies still to send or review kept",
        stop="replies still written (the reply is the service)",
        export="not exported (the person holds the replies)",
        purge="deleted",
        retention="raw copies dropped after [retention] outbox_days",
        see="drafts on the console's Mail page",
    ),
    Holder(
        "watched_folders", "quinn.mailbox.backlog", {"folder": "ids", "watched_at": "ids"}, "-", "-", "-", "-", "-", "-"
    ),
    # --- documents (quinn/documents) -------------------------------------------------------------------------
    Holder(
        "documents",
        "quinn.documents.library",
        {"user_id": "address", "sha256": "ids", "kind": "ids", "error": "ids", "created_at": "ids"},
        forget="kept (the mail's file)",
        stop="no new files kept",
        export="listed (files)",
        purge="deleted",
        retention="deleted with their last mail",
        see="files in the digest answer and on the person page; counted in the periodic digest",
    ),
    Holder(
        "document_parts",
        "quinn.documents.library",
        {"user_id": "address", "bytes": "bytes"},
        "deleted for a file whose name or text mentions the fact (a file cannot be rewritten; its text in recall is)",
        "none new",
        "not exported",
        "deleted",
        "with its document",
        "with its document",
    ),
    Holder(
        "message_documents",
        "quinn.documents.library",
        {"user_id": "address", "session_id": "ids", "name": "words", "content_type": "ids"},
        'a name that mentions the fact becomes "attachment" with its extension',
        "none new",
        "listed (files)",
        "deleted",
        "with its mail",
        "files in the digest answer and on the person page; counted in the periodic digest",
    ),
    Holder(
        "document_domains",
        "quinn.documents.knowledge",
        {"domain": "ids"},
        "-",
        "-",
        "-",
        "- (the knowledge base: no person's)",
        "-",
        "-",
    ),
    # --- agent (quinn/agent) ---------------------------------------------------------------------------------
    Holder(
        "user_state",
        "quinn.agent.state",
        {
            "user_id": "address",
            "user_info": "words",
            "last_conversation_summary": "words",
            "recent_goal_and_status": "words",
            "important_context": "words",
            "agent_beliefs": "words",
            "agent_info": "words",
            "updated_at": "ids",
        },
        forget="a field that mentions the fact is rewritten without it",
        stop="no longer updated (session close skips the person)",
        export="exported (short_term_state)",
        purge="deleted",
        retention="kept while the person is",
        see="in the digest answer, the periodic digest (each cut to 300 characters) and on the person page",
    ),
    Holder(
        "conversation_summaries",
        "quinn.agent.state",
        {
            "session_id": "ids",
            "user_id": "address",
            "summary": "words",
            "feedback_text": "words",
            "improvement_suggestion": "words",
            "prompt_version": "ids",
            "created_at": "ids",
        },
        forget="a review text that mentions the fact is rewritten without it",
        stop="none new (no review)",
        export="exported (conversation_reviews)",
        purge="deleted",
        retention="deleted after [retention] conversations_days",
        see="in the digest answer and on the person page; counted in the periodic digest",
    ),
    Holder(
        "llm_usage",
        "quinn.agent.usage",
        {"at": "ids", "model": "ids", "purpose": "ids", "user_id": "address", "message_id": "ids"},
        "kept (tokens)",
        "kept (cost)",
        NOT_EXPORTED_IDS,
        "deleted",
        "deleted after [retention] usage_days",
        "cost on the person page",
    ),
    Holder(
        "confirmations",
        "quinn.agent.confirm",
        {
            "token_hash": "ids",
            "user_id": "address",
            "action": "ids",
            "request_message_id": "ids",
            "created_at": "ids",
            "expires_at": "ids",
            "used_at": "ids",
            "used_by": "ids",
        },
        "-",
        "-",
        NOT_EXPORTED_IDS,
        "deleted",
        "expire in 24 h",
        "not shown",
    ),
    Holder(
        "memory_consent",
        "quinn.agent.consent",
        {"user_id": "address", "opted_out_at": "ids", "message_id": "ids"},
        "-",
        "the wish itself",
        "exported (opted_out)",
        "kept: the wish outlives the purge",
        "kept",
        "in the digest answer and on the People page",
    ),
    Holder(
        "digests",
        "quinn.agent.digest",
        {"message_id": "ids", "user_id": "address", "since": "ids", "created_at": "ids", "memory_ids": "ids"},
        "-",
        "none planned",
        NOT_EXPORTED_IDS,
        "deleted",
        "kept (ids)",
        "not shown",
    ),
    Holder(
        "learning_queue",
        "quinn.agent.learning",
        {
            "message_id": "ids",
            "user_id": "address",
            "raw": "bytes",
            "internal_date": "ids",
            "state": "ids",
            "created_at": "ids",
            "holder": "ids",
            "lease_until": "ids",
            "retry_at": "ids",
            "last_error": "ids",
            "forgets": "words",
        },
        "noted on the user's waiting mail (`forgets`): learnt without the fact, and what it stores of it forgotten",
        "nothing queued",
        "not exported (waits minutes)",
        "deleted",
        "deleted once learnt",
        "not shown",
    ),
    Holder(
        "prompt_versions",
        "quinn.agent.proposals",
        {"version": "ids", "name": "ids", "source": "ids", "first_used_at": "ids"},
        "-",
        "-",
        "-",
        "- (the admin's templates)",
        "-",
        "-",
    ),
    Holder(
        "prompt_proposals",
        "quinn.agent.proposals",
        {
            "name": "ids",
            "base_version": "ids",
            "source": "words",
            "rationale": "words",
            "evidence": "ids",
            "status": "ids",
            "created_at": "ids",
            "decided_at": "ids",
        },
        forget="-",
        stop="-",
        export="not exported (an admin's draft)",
        purge="evidence keeps review ids only; a pending proposal drawn from the person's reviews is deleted, a "
        "decided one loses its rewrite and rationale",
        retention="kept",
        see="the console's Proposals page (admins)",
    ),
    Holder(
        "audit_log",
        "quinn.agent.audit_log",
        {"at": "ids", "actor": "ids", "action": "ids", "object": "ids", "user_id": "address", "detail": "words"},
        "-",
        "-",
        NOT_EXPORTED_IDS,
        "unlinked: person and detail blanked",
        "kept",
        "the console's Audit page",
    ),
    Holder(
        "reply_traces",
        "quinn.agent.reply_trace",
        {
            "at": "ids",
            "user_id": "address",
            "message_id": "ids",
            "template": "ids",
            "prompt_version": "ids",
            "trace": "ids",
            "gate": "ids",
        },
        "kept (ids)",
        "kept (ids)",
        NOT_EXPORTED_IDS,
        "deleted",
        "deleted after [retention] reply_traces_days",
        "why did Quinn say that? (console)",
    ),
    # --- scheduler (quinn/scheduler) -------------------------------------------------------------------------
    Holder(
        "job_runs",
        "quinn.scheduler.runlog",
        {"job": "ids", "started_at": "ids", "finished_at": "ids", "status": "ids", "counts": "ids", "error": "ids"},
        "-",
        "-",
        "-",
        "kept: figures and review ids only, never a review's words (migration 0023 dropped older copies)",
        "kept",
        "the console's Jobs page",
    ),
    Holder(
        "leases",
        "quinn.scheduler.runlog",
        {"name": "ids", "holder": "ids", "expires_at": "ids"},
        "-",
        "-",
        "-",
        "-",
        "-",
        "-",
    ),
    Holder("sqlite_sequence", "sqlite", {"name": "ids", "seq": "ids"}, "-", "-", "-", "-", "-", "-"),
)

#: Files outside the tables that can hold a person's words, and what a purge does to them.
FILES: tuple[tuple[str, str], ...] = (
    (
        "the database file and its WAL",
        "a purge vacuums and checkpoints the WAL, trying again while a reader holds a read transaction; "
        "if the reader outlasts the tries, the receipt, the CLI and the log say the bytes remain until "
        "`quinn database vacuum`",
    ),
    (
        "the mailbox (INBOX, processed, quarantine, sent folders)",
        "the person's mail is expunged after a purge (engine/purges.py); drafts are left to their reviewer",
    ),
    ("an export file written by `quinn memory export`", "the operator's: outside Quinn's reach"),
    ("backups (`quinn database copy`, Litestream)", "the operator's: a purge cannot reach them (deploy/SECURITY.md)"),
    ("logs (stderr / journald)", "ids and reasons only, never memory text"),
)

BY_TABLE = {holder.table: holder for holder in MAP}


def words_held(holder: Holder) -> list[str]:
    """The columns of ``holder`` that hold a person's words or bytes."""
    return [c for c, kind in holder.columns.items() if kind in ("words", "bytes")]


def markdown_table() -> str:
    """The map as deploy/SECURITY.md shows it: the tables holding a person's words, and the files."""
    lines = ["| table (owner) | words in | forget | stop | export | purge | retention | what do you know |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for h in MAP:
        held = words_held(h)
        if held and not h.table.endswith(("_data", "_idx", "_config", "_docsize")):
            cells = [f"`{h.table}` ({h.owner})", ", ".join(held), h.forget, h.stop, h.export, h.purge, h.retention,
                     h.see]  # fmt: skip
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    lines += ["", "| file | what a purge does |", "|---|---|"]
    lines += [f"| {name} | {rule} |" for name, rule in FILES]
    return "\n".join(lines)
