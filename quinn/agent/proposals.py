"""Template versions and improvement proposals: conversation reviews turned into a rewrite an admin decides on.

Every reply records the text of the template version that wrote it (``prompt_versions``). The improvement job
reads the reviews of finished conversations (reward, suggestions) per version; when a version in use has
``MIN_SUGGESTIONS`` suggestions and no proposal yet, the model rewrites that version's text to answer them. A
rewrite is kept only if it compiles in the sandbox and renders the sample variables, light and heavy, with both
blocks, in a child process with limits (``agent/trials.py``: the same checks as a hand edit); it is stored as a
*pending proposal* and never applied by Quinn. An admin reads it with its diff and evidence (``quinn prompts
proposals``, ``… show ID``) and accepts it (checked again; written to the admin's template directory, picked up
by the daemon without a restart; refused when the file changed since) or rejects it.

The suggestions come from reviews of mail people wrote, so a proposal is untrusted text: it is shown as a diff, it
can only be a Jinja template in the sandbox, it is rendered only in a child process with limits, and nothing
changes until a person accepts it.

A hand edit in the console goes through ``save`` (the same checks, the same atomic write, its text kept as a
version) and ``restore_default``. ``save`` and ``accept`` write only a ``CheckedTemplate``: text that passed
``TemplateTrials.check`` first, off the DB thread. This module owns ``prompt_versions`` and ``prompt_proposals``
(migration 0011). DB functions run on the DB thread.
"""

from __future__ import annotations

import difflib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from quinn.agent.prompts import SUFFIX, TEMPLATE_NAMES, PromptStore
from quinn.agent.trials import CheckedTemplate
from quinn.clock import iso
from quinn.db import Database, Transaction
from quinn.errors import ConfigError

MIN_SUGGESTIONS = 3  # reviews with a suggestion before a version gets a proposal


class TemplateRewrite(BaseModel):
    """The model's rewrite of a template."""

    source: str = Field(description="The whole new template text, Jinja2, with the same blocks and variables.")
    rationale: str = Field(description="Two or three sentences: what changed and which suggestions it answers.")


@dataclass(frozen=True)
class Proposal:
    """One proposal as stored."""

    id: int
    name: str
    base_version: str
    source: str
    rationale: str
    evidence: dict[str, Any]
    status: str
    created_at: str
    decided_at: str | None


def keep_version(db: Database, version: str, name: str, text: str, now: datetime) -> None:
    """Record a template version's text the first time it writes a reply (idempotent)."""
    db.execute("INSERT OR IGNORE INTO prompt_versions (version, name, source, first_used_at) VALUES (?, ?, ?, ?)",
               (version, name, text, iso(now)))  # fmt: skip


def version_text(db: Database, version: str) -> str | None:
    """The text of a recorded version, if it ever wrote a reply."""
    value = db.query_value("SELECT source FROM prompt_versions WHERE version = ?", (version,))
    return None if value is None else str(value)


def has_proposal(db: Database, base_version: str) -> bool:
    """Whether ``base_version`` already has a proposal (pending or decided): one per version."""
    return db.query_value("SELECT 1 FROM prompt_proposals WHERE base_version = ?", (base_version,)) is not None


def add(db: Database, name: str, base_version: str, source: str, rationale: str, evidence: dict[str, Any],
        now: datetime) -> int:  # fmt: skip
    """Store a pending proposal; returns its id."""
    return db.execute(
        "INSERT INTO prompt_proposals (name, base_version, source, rationale, evidence, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        (name, base_version, source, rationale, json.dumps(evidence, ensure_ascii=False), iso(now)),
    )


def listing(db: Database, status: str | None = None) -> list[Proposal]:
    """Proposals, newest first (``status`` narrows them). The evidence keeps the reviews by id; their suggestions
    are read from ``conversation_summaries`` while the reviews exist (a purge or retention removes them)."""
    where, params = ("WHERE status = ?", (status,)) if status else ("", ())
    rows = db.query("SELECT id, name, base_version, source, rationale, evidence, status, created_at, decided_at"
                    f" FROM prompt_proposals {where} ORDER BY id DESC", params)  # fmt: skip
    found = [Proposal(int(r[0]), r[1], r[2], r[3], r[4], json.loads(r[5] or "{}"), r[6], r[7], r[8]) for r in rows]
    for proposal in found:
        reviews = [int(i) for i in proposal.evidence.get("reviews", [])]
        if reviews and "suggestions" not in proposal.evidence:
            marks = ", ".join("?" * len(reviews))
            sql = f"SELECT id, improvement_suggestion FROM conversation_summaries WHERE id IN ({marks})"
            kept: dict[int, str] = dict(db.query(sql, reviews))
            proposal.evidence["suggestions"] = [kept[i] for i in reviews if i in kept]
    return found


def get(db: Database, proposal_id: int) -> Proposal:
    """One proposal, or a ConfigError naming the id (a CLI argument)."""
    found = [p for p in listing(db) if p.id == proposal_id]
    if not found:
        raise ConfigError(f"no proposal {proposal_id}", "`quinn prompts proposals` lists them")
    return found[0]


def diff(db: Database, proposal: Proposal) -> str:
    """The proposal as a unified diff against the version it rewrites."""
    base = version_text(db, proposal.base_version) or ""
    return text_diff(base, proposal.source, proposal.base_version, f"proposal {proposal.id}")


def decide(db: Database, proposal_id: int, status: str, now: datetime) -> Proposal:
    """Mark a pending proposal accepted or rejected; a decided one is refused."""
    proposal = get(db, proposal_id)
    if proposal.status != "pending":
        raise ConfigError(f"proposal {proposal_id} was already {proposal.status}")
    db.execute("UPDATE prompt_proposals SET status = ?, decided_at = ? WHERE id = ?", (status, iso(now), proposal_id))
    return get(db, proposal_id)


def accept(db: Database, prompts: PromptStore, proposal_id: int, passed: CheckedTemplate, now: datetime) -> Path:
    """Write the proposal to the admin's template directory and mark it accepted; returns the file written.

    Refused without ``[prompts] dir`` (the packaged defaults are never edited), when the template in use is no
    longer the version the proposal rewrote (someone edited it since: review again), or unless ``passed`` is the
    proposal's text as it passed the checks a hand edit must pass (``TemplateTrials.check``, in a child process:
    the model wrote it; this runs on the DB thread, which never renders it).
    """
    proposal = get(db, proposal_id)
    if (passed.name, passed.source) != (proposal.name, proposal.source):
        raise ConfigError(f"proposal {proposal_id} was not the text checked", "check it again, then accept it")
    if proposal.status != "pending":
        raise ConfigError(f"proposal {proposal_id} was already {proposal.status}")
    if prompts.admin_dir is None:
        raise ConfigError("accepting a proposal needs an admin template directory",
                          "set [prompts] dir = \"/etc/quinn/prompts\" (copy the defaults there first)")  # fmt: skip
    current, _text = prompts.text_of(proposal.name)
    if current != proposal.base_version:
        raise ConfigError(f"{proposal.name}{SUFFIX} changed since proposal {proposal_id} was made (it is {current} "
                          f"now, the proposal rewrites {proposal.base_version})",
                          "reject it; the next review round proposes against the new text")  # fmt: skip
    path = write_template(prompts, proposal.name, proposal.source)
    version, text = prompts.text_of(proposal.name)
    keep_version(db, version, proposal.name, text, now)  # a version to diff with and roll back to
    decide(db, proposal_id, "accepted", now)
    return path


def passed_checks(proposal: Proposal, problem: str | None) -> CheckedTemplate:
    """``proposal``'s text as a ``CheckedTemplate``, given what ``TemplateTrials.problem`` said of it; a
    ``ConfigError`` when it fails the checks."""
    if problem is not None:
        raise ConfigError(f"proposal {proposal.id} no longer passes the template checks: {problem}", "reject it")
    return CheckedTemplate(proposal.name, proposal.source)


def write_template(prompts: PromptStore, name: str, source: str) -> Path:
    """Replace ``name`` in the admin's template directory atomically (the daemon never reads half a file; it
    sees the new mtime and compiles it on its next render, no restart)."""
    assert prompts.admin_dir is not None
    path = prompts.admin_dir / f"{name}{SUFFIX}"
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=prompts.admin_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(source)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise unwritable(path, exc) from None
    return path


def unwritable(path: Path, exc: OSError) -> ConfigError:
    """A template file this process may not change (the unit's ProtectSystem=strict makes /etc read-only)."""
    return ConfigError(f"cannot change {path}: {exc.strerror or exc}",
                       "let the service write [prompts] dir: `systemctl edit quinn`, add [Service] ReadWritePaths="
                       f"{path.parent}, and restart; or move the directory under /var/lib/quinn")  # fmt: skip


NO_ADMIN_DIR = ConfigError("changing a template needs an admin template directory",
                           "set [prompts] dir = \"/etc/quinn/prompts\" in quinn.toml and restart")  # fmt: skip


def save(db: Database, prompts: PromptStore, passed: CheckedTemplate, now: datetime) -> str:
    """A hand edit (the console's), as it passed the checks (``TemplateTrials.check``, in a child process: a
    refused edit never gets here, nothing is written): written to the admin's directory and its text kept in
    ``prompt_versions``, so it can be diffed and rolled back to. Returns the new version."""
    name, source = passed.name, passed.source
    if name not in TEMPLATE_NAMES:
        raise ConfigError(f"there is no template {name!r}", f"one of {', '.join(TEMPLATE_NAMES)}")
    if prompts.admin_dir is None:
        raise NO_ADMIN_DIR
    write_template(prompts, name, source)
    version, text = prompts.text_of(name)
    keep_version(db, version, name, text, now)
    return version


def restore_default(prompts: PromptStore, name: str) -> bool:
    """Remove the admin's copy of ``name``, so the packaged default is used again; False when there was none."""
    if prompts.admin_dir is None:
        raise NO_ADMIN_DIR
    path = prompts.admin_dir / f"{name}{SUFFIX}"
    if name not in TEMPLATE_NAMES or not path.exists():
        return False
    try:
        path.unlink()
    except OSError as exc:
        raise unwritable(path, exc) from None
    return True


def versions(db: Database, name: str) -> list[tuple[str, str, str]]:
    """(version, recorded at, text) of every kept version of ``name``, newest first."""
    rows = db.query("SELECT version, first_used_at, source FROM prompt_versions WHERE name = ?"
                    " ORDER BY first_used_at DESC, rowid DESC", (name,))  # fmt: skip
    return [(str(r[0]), str(r[1]), str(r[2])) for r in rows]


def text_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    """A unified diff of two template texts."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=old_name, tofile=new_name)  # fmt: skip
    return "".join(lines)


def purge_user(tx: Transaction, user: str) -> dict[str, int]:
    """A purge's part of the proposals (issue 35): a proposal drawn from the person's conversation reviews (by
    review id, or for proposals written before ids were kept, by a suggestion's text) loses what came of their
    words. A pending one is deleted; a decided one keeps its decision and loses its rewrite and rationale (an
    accepted text lives on as the admin's template, ``prompt_versions``). Runs before ``state.purge_user``
    deletes the reviews."""
    rows = tx.query("SELECT id, improvement_suggestion FROM conversation_summaries WHERE user_id = ?", (user,))
    ids, words = {int(r[0]) for r in rows}, {str(r[1]) for r in rows if r[1]}
    if not ids:
        return {"prompt_proposals": 0}
    changed = 0
    for proposal_id, status, evidence_text in tx.query("SELECT id, status, evidence FROM prompt_proposals"):
        evidence = json.loads(evidence_text or "{}")
        drawn = ids & {int(i) for i in evidence.get("reviews", [])} or words & set(evidence.get("suggestions", []))
        if not drawn:
            continue
        changed += 1
        if status == "pending":
            tx.execute("DELETE FROM prompt_proposals WHERE id = ?", (proposal_id,))
            continue
        evidence["reviews"] = [i for i in evidence.get("reviews", []) if int(i) not in ids]
        evidence.pop("suggestions", None)
        tx.execute("UPDATE prompt_proposals SET source = '', rationale = '', evidence = ? WHERE id = ?",
                   (json.dumps(evidence), proposal_id))  # fmt: skip
    return {"prompt_proposals": changed}
