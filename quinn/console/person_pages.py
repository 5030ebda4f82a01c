"""The console's changes to one memory beyond edit and forget (pin, mark private) and to one person (export,
purge), each the same store call as the command line's and audited with the admin's name (issue 20).

Pin is ``MemoryStore.pin`` (``quinn memory pin``/``unpin``: in place, the change log says ``pinned``); private is
``MemoryStore.update`` with ``metadata.private`` (a new version, as an edit); export is ``export_document`` (``quinn
memory export``); purge is ``quinn.agent.purge.purge`` (``quinn memory purge USER --yes``), then the mailbox's
part when the console has the IMAP settings (``Console.purge_mailbox``), else the page says how to finish it.
All are POSTs behind ``guarded(..., changes=True)``: CSRF and the admin role, export included (a copy of
everything kept about a person leaving the console is an act to answer for, not a look).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from starlette.requests import Request
from starlette.responses import Response

from quinn.agent import audit_log, purge
from quinn.console.app import SECURITY_HEADERS, Console, Endpoint, FormError, audit, form_of
from quinn.console.pages import change_reason, memory_changed, with_why
from quinn.memory import dump_document, export_document, normalise_user

log = logging.getLogger(__name__)
FORMATS = {"json": "application/json", "yaml": "application/yaml"}


def pin(console: Console) -> Endpoint:
    """POST /memories/{id}/pin (``pinned`` = 1 or 0): mark the memory immutable or take the mark off."""

    async def pin_memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = form_of(request)
        pinned = _flag(form, "pinned")
        admin = console.admin_of(request)
        store = console.store
        before = await store.db.run(store.get, memory_id)
        verb = "pinned" if pinned else "unpinned"
        await store.db.run(store.pin, memory_id, pinned, reason=change_reason(admin.name, verb, form))
        action = "pin memory" if pinned else "unpin memory"
        return await memory_changed(console, admin.name, action, memory_id, before, with_why(verb, form))

    return pin_memory


def private(console: Console) -> Endpoint:
    """POST /memories/{id}/private (``private`` = 1 or 0): a new version with ``metadata.private`` set or cleared."""

    async def mark_private(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        form = form_of(request)
        flag = _flag(form, "private")
        admin = console.admin_of(request)
        store = console.store
        before = await store.db.run(store.get, memory_id)
        if before is None:
            raise FormError(f"memory {memory_id} not found")
        verb = "marked private" if flag else "marked not private"
        new_id = await store.db.run(store.update, memory_id, before.content, metadata={"private": flag},
                                    reason=change_reason(admin.name, verb, form))  # fmt: skip
        action = "mark memory private" if flag else "mark memory not private"
        return await memory_changed(console, admin.name, action, memory_id, before,
                                    with_why(f"new version: memory {new_id}", form), shown=new_id)  # fmt: skip

    return mark_private


def export(console: Console) -> Endpoint:
    """POST /people/{user}/export (``format`` json or yaml): the person's memories, every version, as ``quinn
    memory export`` writes them, as a download."""

    async def export_memories(request: Request) -> Response:
        user = normalise_user(request.path_params["user"]) or ""
        fmt = form_of(request).get("format") or "json"
        if fmt not in FORMATS:
            raise FormError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}", "use the person page's button")
        store = console.store
        document = await store.db.run(export_document, store, user)
        admin = console.admin_of(request)
        count = len(document["memories"])
        await store.db.run(audit_log.record, store.db, admin.name, "export memories", f"user {user}", user_id=user,
                           detail=f"{count} memory rows as {fmt}")  # fmt: skip
        audit.info("console: %s exported the memories of %s", admin.name, user)
        name = "".join(c if c.isalnum() or c in "@.-_" else "_" for c in user) or "user"
        headers = {**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="memories-{name}.{fmt}"'}
        return Response(dump_document(document, fmt), media_type=FORMATS[fmt], headers=headers)

    return export_memories


def purge_person(console: Console) -> Endpoint:
    """POST /people/{user}/purge (``confirm``: the address typed again): every trace of the person, as ``quinn
    memory purge USER --yes``, then their mail in Quinn's folders when the console can reach IMAP."""

    async def purge_user(request: Request) -> Response:
        user = normalise_user(request.path_params["user"]) or ""
        form = form_of(request)
        if normalise_user(form.get("confirm", "")) != user or not user:
            raise FormError("purge not done: the address typed does not match",
                            f"type {user} exactly in the confirmation field: the purge cannot be undone")  # fmt: skip
        store = console.store
        counts = await store.db.run(purge.purge, store, user)
        mailbox_done: int | None = None
        mailbox_error = "this console has no IMAP settings" if console.purge_mailbox is None else ""
        if console.purge_mailbox is not None:
            try:  # IMAP is slow and may be down: off the event loop and the database's thread
                mailbox_done = await asyncio.to_thread(console.purge_mailbox, user)
            except Exception as exc:  # the database part is done either way; the page says what is left
                log.warning("console purge of a user: the mailbox part failed: %s: %s", type(exc).__name__, exc)
                mailbox_error = f"{type(exc).__name__}: {exc}"
        admin = console.admin_of(request)
        mailbox = f"{mailbox_done} mails from the mailbox" if mailbox_done is not None else "mailbox not purged"
        # No address and no user link: the purge keeps none (audit_log.purge_user). The hash lets an admin who
        # knows the address check that it was purged, and by whom.
        await store.db.run(audit_log.record, store.db, admin.name, "purge user", pseudonym(user),
                           detail=f"{sum(counts.values())} rows; {mailbox}")  # fmt: skip
        audit.info("console: %s purged %s", admin.name, pseudonym(user))
        return console.render(request, "purged.html", user=user, counts=sorted(counts.items()),
                              mailbox_done=mailbox_done, mailbox_error=mailbox_error)  # fmt: skip

    return purge_user


def pseudonym(user: str) -> str:
    """How the audit log names a purged user: a hash of the address, not the address."""
    return "user sha256:" + hashlib.sha256(user.encode()).hexdigest()[:16]


def _flag(form: dict[str, str], name: str) -> bool:
    value = form.get(name, "")
    if value not in ("0", "1"):
        raise FormError(f"{name}: {value!r} is not 1 or 0", "use the memory page's button")
    return value == "1"
