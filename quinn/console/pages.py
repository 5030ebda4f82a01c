"""The console's pages: People, a person's memory (view, search, history, edit, forget; pin, private, export and
purge are ``person_pages``) and the mail ledger (with the drafts awaiting review of ``draft_pages``).

Each reads and writes only through the store and the ledger (on the database's thread, ``Database.run``). An edit
is ``MemoryStore.update`` (a new version; the old one stays in history) and a forget ``MemoryStore.forget``, with
the admin's name in the change log's reason and one entry each in the audit log (``quinn.agent.audit``), which
the Audit page shows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quinn.agent import audit_log, forgetting, known, opted_out_among, reply_trace, usage
from quinn.console import draft_pages
from quinn.console.app import SECURITY_HEADERS, Console, Endpoint, FormError, audit, form_of
from quinn.db import Database
from quinn.documents import library
from quinn.engine.retry import RETRIABLE
from quinn.mailbox import MailKey, Sessions
from quinn.memory import LINES, list_users, normalise_user, passage_counts

PEOPLE_LIMIT = 100  # people per page, most recently seen first
MEMORIES_LIMIT = 500
SEARCH_HITS = 50
MAIL_LIMIT = 200
MAX_MEMORY_CHARS = 10_000
AUDIT_LIMIT = 500
REPLIES_LIMIT = 20  # a person's latest replies, each linked to why Quinn said it


def home(console: Console) -> Endpoint:
    """GET /: the people."""

    async def to_people(request: Request) -> Response:
        return RedirectResponse("/people", status_code=303, headers=SECURITY_HEADERS)

    return to_people


def people(console: Console) -> Endpoint:
    """GET /people?q=&page=: every user with counts (a page of them), or those whose address contains q."""

    async def list_people(request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        page = max(_int(request.query_params.get("page"), 1), 1)
        since = usage.month_start(console.clock.now())

        def read(db: Database) -> tuple[list[dict[str, Any]], bool]:
            # One more than a page: whether there is a next one. Each figure beyond list_users' (spend, passages,
            # files, consent) in one grouped query for the page's users, never one a row (bench/console_speed.py).
            rows = list_users(db, query or None, limit=PEOPLE_LIMIT + 1, offset=(page - 1) * PEOPLE_LIMIT)
            shown = rows[:PEOPLE_LIMIT]
            users = [row["user"] for row in shown]
            spent = usage.users_spend(db, users, since, console.prices)
            nothing = usage.spend_of([], console.prices)
            passages = passage_counts(db, users)
            files = library.document_counts(db, users)
            out = opted_out_among(db, users)
            return [{**row, "spend": spent.get(row["user"], nothing), "documents": files.get(row["user"], 0),
                     "passages": passages.get(row["user"], {"conversation": 0, "document": 0}),
                     "opted_out": row["user"] in out} for row in shown], len(rows) > PEOPLE_LIMIT  # fmt: skip

        shown, more = await console.store.db.run(read, console.store.db)
        return console.render(request, "people.html", people=shown, month=since, priced=bool(console.prices),
                              q=query, limit=PEOPLE_LIMIT, page=page, more=more)  # fmt: skip

    return list_people


def _int(text: str | None, default: int) -> int:
    """A query parameter as a number, or ``default`` when it is missing or not one."""
    try:
        return int(text or default)
    except ValueError:
        return default


def person(console: Console) -> Endpoint:
    """GET /people/{user}?q=&domain=&type=&all=: a person's memories, grouped by domain and type, or searched."""

    async def show_person(request: Request) -> Response:
        user = normalise_user(request.path_params["user"]) or ""
        params = request.query_params
        query = params.get("q", "").strip()
        filters = {key: params.get(key) or None for key in ("domain", "type")}
        include_inactive = params.get("all") == "1"
        store = console.store
        if query:
            # touch=False: an operator's look is not a retrieval (it would strengthen memories nobody used).
            # LINES: a search box finds memories by their own words and meaning, without their conversation.
            hits = await store.db.run(store.search, user, query, k=SEARCH_HITS, touch=False, recipe=LINES,
                                      include_inactive=include_inactive, **filters)  # fmt: skip
            memories = [hit.memory for hit in hits]
        else:
            memories = await store.db.run(store.get_all, user, limit=MEMORIES_LIMIT,
                                          include_inactive=include_inactive, **filters)  # fmt: skip
            memories.sort(key=lambda m: (m.domain or "", m.type, not m.current, m.id))
        current = await store.db.run(store.get_all, user, limit=MEMORIES_LIMIT)
        kinds = Counter((m.domain or "", m.type) for m in current)
        replies = await store.db.run(reply_trace.for_user, store.db, user, REPLIES_LIMIT)
        subjects = await store.db.run(Sessions(store.db).subjects, user, [r.message_id for r in replies])
        since = usage.month_start(console.clock.now())
        spent = await store.db.run(usage.users_spend, store.db, [user], since, console.prices)
        out = await store.db.run(opted_out_among, store.db, [user])
        shaping = await store.db.run(known.shaping, store, user)  # what else reaches their prompts (issue 35)
        return console.render(request, "person.html", user=user, shaping=shaping, memories=memories, q=query,
                              filters=filters,
                              include_inactive=include_inactive, kinds=sorted(kinds.items()),
                              domains=sorted({d for d, _t in kinds}), types=sorted({t for _d, t in kinds}),
                              searched=bool(query), replies=replies, subjects=subjects, month=since,
                              priced=bool(console.prices),
                              spend=spent.get(user, usage.spend_of([], console.prices)),
                              opted_out=user in out)  # fmt: skip

    return show_person


def memory(console: Console) -> Endpoint:
    """GET /memories/{id}: one memory, every version, its change log, and the edit and forget forms."""

    async def show_memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        store = console.store
        found = await store.db.run(store.get, memory_id)
        if found is None:
            return console.render(request, "error.html", 404, message=f"There is no memory {memory_id}.")
        versions = await store.db.run(store.history, memory_id)
        changes = await store.db.run(store.changes, memory_id)
        current = next((v for v in versions if v.current), None)
        return console.render(request, "memory.html", memory=found, versions=versions, changes=changes,
                              current=current)  # fmt: skip

    return show_memory


def edit(console: Console) -> Endpoint:
    """POST /memories/{id}/edit: a new version with the form's text (admin role)."""

    async def edit_memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = form_of(request)
        content = form.get("content", "").strip()
        if not content:
            raise FormError("content: the new text is empty", "write the memory's new text, or forget it instead")
        if len(content) > MAX_MEMORY_CHARS:
            raise FormError(f"content: {len(content)} characters; at most {MAX_MEMORY_CHARS}", "shorten it")
        admin = console.admin_of(request)
        reason = change_reason(admin.name, "edited", form)
        store = console.store
        before = await store.db.run(store.get, memory_id)
        new_id = await store.db.run(store.update, memory_id, content, reason=reason)
        return await memory_changed(console, admin.name, "edit memory", memory_id, before,
                                    with_why(f"new version: memory {new_id}", form), shown=new_id)  # fmt: skip

    return edit_memory


def forget(console: Console) -> Endpoint:
    """POST /memories/{id}/forget: out of retrieval, kept in history (admin role)."""

    async def forget_memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        admin = console.admin_of(request)
        reason = change_reason(admin.name, "forgotten", form_of(request))
        store = console.store
        before = await store.db.run(store.get, memory_id)
        elsewhere = await store.db.run(forgetting.forget_by_id, store, memory_id, reason=reason)
        also = f"also out of: {forgetting.described(elsewhere)}" if elsewhere else ""
        detail = "; ".join(d for d in (why_of(form_of(request)), also) if d)
        return await memory_changed(console, admin.name, "forget memory", memory_id, before, detail)

    return forget_memory


async def memory_changed(
    console: Console, admin: str, action: str, memory_id: int, before: Any, detail: str, shown: int | None = None
) -> Response:
    """After ``admin`` changed memory ``memory_id`` (``before``: as it was, or None): the audit row and line, and
    the way to the memory to show (``shown``: the new version, default the same memory)."""
    store = console.store
    await store.db.run(audit_log.record, store.db, admin, action, f"memory {memory_id}",
                       user_id=before.user_id if before else None, detail=detail)  # fmt: skip
    audit.info("console: %s: %s %s%s", admin, action, memory_id, f" -> {shown}" if shown else "")
    return RedirectResponse(f"/memories/{shown or memory_id}", status_code=303, headers=SECURITY_HEADERS)


def change_reason(admin: str, verb: str, form: dict[str, str]) -> str:
    """The change log's reason: which admin, through the console, and why if they said."""
    why = why_of(form)
    return f"{verb} in the console by {admin}" + (f": {why}" if why else "")


def why_of(form: dict[str, str]) -> str:
    """The reason the admin typed, on one line and at most 500 characters."""
    return " ".join(form.get("reason", "").split())[:500]


def with_why(detail: str, form: dict[str, str]) -> str:
    """An audit detail and, when the admin gave one, their reason."""
    why = why_of(form)
    return f"{detail}; {why}" if why else detail


def mail(console: Console) -> Endpoint:
    """GET /mail?state=&user=: the ledger, newest first, with counts per state and each mail's reason."""

    async def show_mail(request: Request) -> Response:
        state = request.query_params.get("state") or None
        user = normalise_user(request.query_params.get("user"))
        ledger = console.ledger
        counts = await console.store.db.run(ledger.counts)
        entries = await console.store.db.run(ledger.listing, state=state, user_id=user, limit=MAIL_LIMIT)
        traces = await console.store.db.run(reply_trace.for_messages, console.store.db,
                                            [e.record.message_id for e in entries])  # fmt: skip
        drafts = await console.store.db.run(draft_pages.listing, console.store.db)
        return console.render(request, "mail.html", entries=entries, counts=sorted(counts.items()), state=state,
                              user=user, limit=MAIL_LIMIT, traces=traces, retriable=RETRIABLE,
                              can_retry=console.retry_mail is not None,
                              retried=request.query_params.get("retried"), drafts=drafts,
                              show_drafts=console.reply_mode == "draft" or bool(drafts),
                              reviewed=request.query_params.get("reviewed"))  # fmt: skip

    return show_mail


def retry(console: Console) -> Endpoint:
    """POST /mail/retry: a failed or quarantined mail goes round again (admin role), audited."""

    async def retry_mail(request: Request) -> Response:
        form = form_of(request)
        try:
            key = MailKey(form.get("folder", ""), int(form.get("uidvalidity", "")), int(form.get("uid", "")))
        except ValueError:
            raise FormError("the mail's key is not FOLDER, UIDVALIDITY and UID", "use the Mail page's button") from None
        if console.retry_mail is None:
            raise FormError("this console cannot retry mail", "serve it with `quinn console` or `quinn run`")
        db = console.store.db
        record = await db.run(console.ledger.get, key)
        done = await db.run(console.retry_mail, key)
        admin = console.admin_of(request)
        name = f"mail {key.folder}:{key.uidvalidity}:{key.uid}"
        moved = f"moved back to {done['to']}" if done.get("moved") else "still in the watched folder"
        await db.run(audit_log.record, db, admin.name, "retry mail", name, user_id=record.user_id if record else None,
                     detail=with_why(f"was {record.state if record else '?'}; {moved}", form))  # fmt: skip
        audit.info("console: %s retried %s", admin.name, name)
        return RedirectResponse(f"/mail?retried={quote(name)}", status_code=303, headers=SECURITY_HEADERS)

    return retry_mail


def audit_page(console: Console) -> Endpoint:
    """GET /audit?actor=: the audit log, newest first (every role may read it)."""

    async def show_audit(request: Request) -> Response:
        actor = (request.query_params.get("actor") or "").strip() or None
        db = console.store.db
        entries = await db.run(audit_log.listing, db, actor=actor, limit=AUDIT_LIMIT)
        return console.render(request, "audit.html", entries=entries, actor=actor, limit=AUDIT_LIMIT)

    return show_audit
