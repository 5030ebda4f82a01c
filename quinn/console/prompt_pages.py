"""The console's Prompts pages: each template with its variables, an editor checked like ``quinn prompts check``,
a preview with a person's real memory (like ``quinn prompts render --user``), versions, diffs and rollback; and
the improvement proposals (``quinn prompts proposals|proposal|accept|reject``).

Everything goes through ``quinn.agent.proposals`` (``save``: the sandbox, the sample render, both blocks, then an
atomic write into ``[prompts] dir`` that the daemon picks up on its next render; ``restore_default``; the kept
versions) and ``PromptStore`` (which file is in use, its version). A refused edit writes nothing and shows why.
Template text typed here is rendered only by ``Console.trials``: in a child process with limits, at most two at a
time; a third gets 503 at once (``TrialsBusy``), so previews cannot take the threads a login or a page needs.
The preview's memory text is attacker-controlled: it is only ever shown autoescaped, in a ``<pre>``.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quinn.agent import SUFFIX, TEMPLATE_NAMES, PromptStore, audit_log, packaged_dir, proposals, sample_variables
from quinn.clock import utcnow
from quinn.console.app import SECURITY_HEADERS, Console, Endpoint, FormError, audit, form_of
from quinn.console.pages import with_why
from quinn.errors import TemplateError
from quinn.memory import normalise_user

MAX_TEMPLATE_CHARS = 40_000
DEFAULT = "default"  # the packaged default, as a version to diff or roll back to
CURRENT = "current"
PREVIEW_TEXT = "What do you remember about me?"


@cache
def variables_doc(name: str) -> str:
    """What prompts/README.md says of ``name``'s variables, as plain text (its own section's first block, or its
    item in the jobs' list)."""
    path = packaged_dir() / "README.md"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    found: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith(f"## {name}{SUFFIX}:"):
            rest = lines[i + 1 :]
            while rest and not rest[0].strip():
                rest = rest[1:]
            for entry in rest:
                if not entry.strip():
                    break
                found.append(entry)
            break
        if re.match(rf"- {re.escape(name)}\b", line):
            found.append(line[2:])
            for entry in lines[i + 1 :]:
                if not entry.startswith("  "):
                    break
                found[-1] += " " + entry.strip()
            break
    text = []
    for line in found:
        if re.fullmatch(r"\|[-| ]+\|", line):
            continue
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            line = f"{cells[0]}: {' | '.join(cells[1:])}"
        text.append(line.replace("`", "").replace("\\|", "|"))
    return "\n".join(text) or "See prompts/README.md."


def _name(request: Request) -> str:
    name = request.path_params["name"]
    if name not in TEMPLATE_NAMES:
        raise FormError(f"there is no template {name!r}", f"one of {', '.join(TEMPLATE_NAMES)}")
    return name


def _state(prompts: PromptStore, name: str) -> dict[str, Any]:
    """The template in use: version, text, and whether it is the admin's copy or the packaged default. A file
    that never compiled (edited by hand, broken, before this process loaded it) comes with its error and its
    text, so it can be fixed here. Runs on the DB thread: every use of the console's ``PromptStore`` does,
    so two requests never race in it."""
    source = prompts.source_of(name)
    admin_copy = prompts.admin_dir is not None and source.parent == prompts.admin_dir
    try:
        version, text = prompts.text_of(name)
        error = None
    except TemplateError as exc:
        version, text, error = "", source.read_text(encoding="utf-8"), str(exc)
    return {"name": name, "version": version, "text": text, "admin_copy": admin_copy, "path": str(source),
            "error": error}  # fmt: skip


def listing(console: Console) -> Endpoint:
    """GET /prompts: every template, its version, whose it is, and its variables."""

    async def list_prompts(request: Request) -> Response:
        db = console.store.db
        states = await db.run(lambda: [_state(console.prompts, name) for name in TEMPLATE_NAMES])
        templates = [{**state, "doc": variables_doc(state["name"])} for state in states]
        return console.render(request, "prompts.html", templates=templates,
                              admin_dir=console.prompts.admin_dir)  # fmt: skip

    return list_prompts


async def _editor(console: Console, request: Request, name: str, status_code: int = 200, **values: Any) -> Response:
    """The template's page: the editor (with ``values``' text, else the one in use), versions, preview."""
    db = console.store.db
    state = await db.run(_state, console.prompts, name)
    if state["error"] and not values.get("error"):
        values["error"] = f"The file in use does not compile: {state['error']}"
    kept = await db.run(proposals.versions, db, name)
    values.setdefault("source", state["text"])
    defaults = {"preview": None, "preview_user": "", "preview_text": PREVIEW_TEXT, "message": None}
    return console.render(request, "prompt.html", status_code, t=state, doc=variables_doc(name), versions=kept,
                          admin_dir=console.prompts.admin_dir, **{**defaults, **values})  # fmt: skip


def page(console: Console) -> Endpoint:
    """GET /prompts/{name}: the editor, the variables, the versions."""

    async def show_prompt(request: Request) -> Response:
        return await _editor(console, request, _name(request))

    return show_prompt


def _source_of(form: dict[str, str]) -> str:
    source = form.get("source", "").replace("\r\n", "\n")
    if not source.strip():
        raise FormError("source: the template is empty", "write the template, or roll back to a version")
    if len(source) > MAX_TEMPLATE_CHARS:
        raise FormError(f"source: {len(source)} characters; at most {MAX_TEMPLATE_CHARS}", "shorten it")
    return source


def preview(console: Console) -> Endpoint:
    """POST /prompts/{name}/preview: check the editor's text as a save would, then render it with the chosen
    person's real memory (or the sample variables), both in a child process with limits (``TemplateTrials``).
    Changes nothing, yet runs text the admin typed: the admin role only (docs/console.md)."""

    async def preview_prompt(request: Request) -> Response:
        name = _name(request)
        form = form_of(request)
        source = _source_of(form)
        user = normalise_user(form.get("user", "")) or ""
        text = " ".join(form.get("text", "").split())[:2000] or PREVIEW_TEXT
        if user and "@" not in user:  # the editor again, with the admin's text kept
            return await _editor(
                console,
                request,
                name,
                400,
                source=source,
                preview_user=user,
                error=f"{user!r} is not an email address: give the address the person writes from",
            )
        if user and console.preview is not None:
            db = console.store.db
            variables = await db.run(console.preview, name, user, text, "Preview")
        else:
            variables = sample_variables()[name]
        try:
            rendered = await console.trials.preview_async(name, source, variables)
        except TemplateError as exc:
            return await _editor(console, request, name, 400, source=source, preview_user=user, error=str(exc))
        return await _editor(console, request, name, source=source, preview=rendered, preview_user=user,
                             preview_text=text, message="The template passes the checks.")  # fmt: skip

    return preview_prompt


def save(console: Console) -> Endpoint:
    """POST /prompts/{name}/save: a new version, if it passes the checks (admin role). The checks run in a child
    process (``TemplateTrials``); the DB thread only writes what passed."""

    async def save_prompt(request: Request) -> Response:
        name = _name(request)
        form = form_of(request)
        source = _source_of(form)
        admin = console.admin_of(request)
        db = console.store.db
        before = (await db.run(_state, console.prompts, name))["version"] or "a broken file"
        try:
            passed = await console.trials.check_async(name, source)
            version = await db.run(proposals.save, db, console.prompts, passed, utcnow())
        except TemplateError as exc:
            return await _editor(console, request, name, 400, source=source, error=f"Not saved: {exc.message}")
        await db.run(audit_log.record, db, admin.name, "save template", f"template {name}",
                     detail=with_why(f"{before} -> {version}", form))  # fmt: skip
        audit.info("console: %s saved template %s as %s", admin.name, name, version)
        return RedirectResponse(f"/prompts/{name}", status_code=303, headers=SECURITY_HEADERS)

    return save_prompt


def _text_of_version(name: str, version: str, kept: list[tuple[str, str, str]], current: str) -> str:
    if version == CURRENT:
        return current
    if version == DEFAULT:
        return (packaged_dir() / f"{name}{SUFFIX}").read_text(encoding="utf-8")
    for kept_version, _at, text in kept:
        if kept_version == version:
            return text
    raise FormError(f"{name} has no version {version!r}", "pick one from the template's page")


def diff(console: Console) -> Endpoint:
    """GET /prompts/{name}/diff?from=&to=: a unified diff of two versions (``default``, ``current`` or kept)."""

    async def show_diff(request: Request) -> Response:
        name = _name(request)
        db = console.store.db
        kept = await db.run(proposals.versions, db, name)
        current = (await db.run(_state, console.prompts, name))["text"]
        old = request.query_params.get("from") or DEFAULT
        new = request.query_params.get("to") or CURRENT
        text = proposals.text_diff(_text_of_version(name, old, kept, current),
                                   _text_of_version(name, new, kept, current), old, new)  # fmt: skip
        return console.render(request, "prompt_diff.html", name=name, old=old, new=new, diff=text)

    return show_diff


def rollback(console: Console) -> Endpoint:
    """POST /prompts/{name}/rollback: a kept version back in use (saved again, checked again), or ``default``: the
    admin's copy removed (admin role)."""

    async def roll_back(request: Request) -> Response:
        name = _name(request)
        version = form_of(request).get("version", "")
        admin = console.admin_of(request)
        db = console.store.db
        kept = await db.run(proposals.versions, db, name)
        state = await db.run(_state, console.prompts, name)
        before = state["version"] or "a broken file"
        text = _text_of_version(name, version, kept, state["text"])
        if version == DEFAULT:
            await db.run(proposals.restore_default, console.prompts, name)
            now_version = (await db.run(_state, console.prompts, name))["version"]
        else:
            try:
                passed = await console.trials.check_async(name, text)
                now_version = await db.run(proposals.save, db, console.prompts, passed, utcnow())
            except TemplateError as exc:  # a version that passed then, but not today's checks
                return await _editor(console, request, name, 400, error=f"Not rolled back: {exc.message}")
        await db.run(audit_log.record, db, admin.name, "roll back template", f"template {name}",
                     detail=f"{before} -> {now_version} (back to {version})")  # fmt: skip
        audit.info("console: %s rolled template %s back to %s", admin.name, name, version)
        return RedirectResponse(f"/prompts/{name}", status_code=303, headers=SECURITY_HEADERS)

    return roll_back


def proposal_list(console: Console) -> Endpoint:
    """GET /proposals?all=1: the improvement job's rewrites waiting for a decision (all of them with all=1)."""

    async def list_proposals(request: Request) -> Response:
        everything = request.query_params.get("all") == "1"
        db = console.store.db
        found = await db.run(proposals.listing, db, None if everything else "pending")
        return console.render(request, "proposals.html", proposals=found, everything=everything)

    return list_proposals


def _proposal_id(request: Request) -> int:
    return int(request.path_params["proposal_id"])


def proposal_page(console: Console) -> Endpoint:
    """GET /proposals/{id}: the evidence, the rationale and the diff against the version it rewrites. The text
    comes from reviews of people's mail: untrusted, shown escaped."""

    async def show_proposal(request: Request) -> Response:
        db = console.store.db
        proposal = await db.run(proposals.get, db, _proposal_id(request))
        text = await db.run(proposals.diff, db, proposal)
        return console.render(request, "proposal.html", p=proposal, diff=text, admin_dir=console.prompts.admin_dir)

    return show_proposal


def decide(console: Console, verb: str) -> Endpoint:
    """POST /proposals/{id}/accept|reject (admin role): ``proposals.accept`` (checked again in a child process,
    refused when the template changed since) or ``proposals.decide``; audited."""

    async def decide_proposal(request: Request) -> Response:
        proposal_id = _proposal_id(request)
        admin = console.admin_of(request)
        db = console.store.db
        if verb == "accept":
            proposal = await db.run(proposals.get, db, proposal_id)
            # The model wrote it: checked in a child process with limits, never on the DB thread.
            problem = await console.trials.problem_async(proposal.name, proposal.source) \
                if proposal.status == "pending" else None  # fmt: skip
            passed = proposals.passed_checks(proposal, problem)
            await db.run(proposals.accept, db, console.prompts, proposal_id, passed, utcnow())
        else:
            await db.run(proposals.decide, db, proposal_id, "rejected", utcnow())
        proposal = await db.run(proposals.get, db, proposal_id)
        detail = with_why(f"template {proposal.name}, rewrites {proposal.base_version}", form_of(request))
        await db.run(audit_log.record, db, admin.name, f"{verb} proposal", f"proposal {proposal_id}", detail=detail)
        audit.info("console: %s %sed proposal %s", admin.name, verb.rstrip("e"), proposal_id)
        return RedirectResponse(f"/proposals/{proposal_id}", status_code=303, headers=SECURITY_HEADERS)

    return decide_proposal
