"""``quinn memory …``: the operator's view of users' memories.

list, show, search, history, edit, forget, pin, unpin, purge, export, import and reembed, each against the configured
database. Tables are for people; ``--json`` prints plain JSON for scripts. Errors are ``QuinnError``s, which
``quinn.cli.main`` turns into one line with a hint. Operator searches do not count as retrievals (they would
strengthen memories nobody used), and only ``search``, ``edit``, ``import`` and ``reembed`` load the embedder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from quinn.agent import forgetting
from quinn.commands.database import DATABASE_ONLY
from quinn.commands.output import progress_bar
from quinn.config import Config, resolve_secrets
from quinn.engine import parts
from quinn.errors import StoreError
from quinn.memory import LINES, NOT_WIPED, Memory, MemoryStore, backfill, dump_document, export_document, normalise_user
from quinn.memory import reembed as reembed_passages

Handler = Callable[[argparse.Namespace, Config], int]
CONTENT_WIDTH = 70  # characters of content shown per table row; `show` prints it whole


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn memory`` and its subcommands to the CLI."""
    group = sub.add_parser("memory", help="inspect and manage users' memories")
    cmds = group.add_subparsers(dest="memory_command", metavar="SUBCOMMAND", required=True)

    def command(name: str, handler: Handler, help: str, *, json_flag: bool = True,
                embeds: bool = False) -> argparse.ArgumentParser:  # fmt: skip
        """``embeds``: the command loads the embedder, so it may need the embeddings key; none needs the IMAP
        password or the model's API key (``quinn memory purge --mailbox`` asks for the IMAP one itself)."""
        parser = with_config(cmds.add_parser(name, help=help, description=help))
        if json_flag:
            parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        secrets = (*DATABASE_ONLY, "embeddings") if embeds else DATABASE_ONLY
        parser.set_defaults(handler=handler, secrets_of=secrets)
        return parser

    p = command("list", list_memories, "a user's memories (current ones unless filters say otherwise)")
    p.add_argument("user", help="the user's address")
    _filter_arguments(p)
    p.add_argument("--limit", type=int, default=100, help="at most this many, newest first (default 100)")

    p = command("show", show_memory, "one memory row, every field")
    p.add_argument("id", type=int, help="the memory's id")

    p = command("search", search_memories, "search a user's memories as Quinn does (without counting it)", embeds=True)
    p.add_argument("user", help="the user's address")
    p.add_argument("query", help="the text to search for")
    p.add_argument("-k", type=int, default=10, help="number of hits (default 10)")
    _filter_arguments(p)

    p = command("history", show_history, "every version of a memory and its audit log")
    p.add_argument("id", type=int, help="the id of any version of the memory")

    p = command("edit", edit_memory, "write a new version of a memory (the old one stays in history)", embeds=True)
    p.add_argument("id", type=int, help="the id of the current version")
    p.add_argument("content", help="the new text")
    p.add_argument("--reason", default="edited by an operator", help="why, for the audit log")
    p.add_argument("--importance", type=float, help="new importance, 0 to 1")
    p.add_argument("--valid-from", help="since when the new version holds (ISO 8601; default now)")
    p.add_argument("--allow-immutable", action="store_true", help="also edit a memory marked immutable")

    p = command("forget", forget_memory, "take a memory out of retrieval (kept in history until a purge)")
    p.add_argument("id", type=int, help="the id of the current version")
    p.add_argument("--reason", default="forgotten by an operator", help="why, for the audit log")
    p.add_argument("--allow-immutable", action="store_true", help="also forget a memory marked immutable")

    for verb, pinned in (("pin", True), ("unpin", False)):
        p = command(verb, pin_memory, "mark a memory immutable: decay and consolidation leave it alone" if pinned
                    else "take the immutable mark off a memory")  # fmt: skip
        p.add_argument("id", type=int, help="the id of the current version")
        p.add_argument("--reason", default=f"{verb}ned by an operator", help="why, for the audit log")
        p.set_defaults(pinned=pinned)

    p = command("persona", persona, "show Quinn's persona (read into every reply prompt), or write it", embeds=True)
    p.add_argument("content", nargs="?", help="the new persona text (a new version; the old one stays in history)")
    p.add_argument("--reason", default="persona written by an operator", help="why, for the audit log")

    p = command("purge", purge_user, "delete every trace of a user (memories, history, messages); no undo")
    p.add_argument("user", help="the user's address")
    p.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")
    p.add_argument("--mailbox", action="store_true",
                   help="also delete their mail from Quinn's IMAP folders (needs the IMAP password)")  # fmt: skip

    p = command("export", export_memories, "write a user's memories, all versions, as JSON or YAML", json_flag=False)
    p.add_argument("user", help="the user's address")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.add_argument("--format", choices=("json", "yaml"), help="default: from the file's extension, else json")

    p = command(
        "import", import_memories, "read memories exported by `quinn memory export` (all or nothing)", embeds=True
    )
    p.add_argument("file", help="the JSON or YAML file, or - for standard input")
    p.add_argument("--user", help="import every record for this user instead of the one in the file")
    p.add_argument("--format", choices=("json", "yaml"), help="default: detected")

    p = command(
        "reembed", reembed_memories, "embed again every memory and conversation passage whose vector is not of the "
        "configured model, and index stored mail that conversation recall has not seen yet", embeds=True,
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, default=64, help="rows per batch and commit (default 64)")


def _filter_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scope", choices=("profile", "domain", "episodic", "global"))
    p.add_argument("--domain")
    p.add_argument("--type", help="fact, preference, goal, …")
    p.add_argument("--tag", action="append", dest="tags", help="has this tag (repeat for several: any of them)")
    p.add_argument("--all-tags", action="store_true", help="with several --tag: has all of them")
    p.add_argument("--since", help="valid from this moment on (ISO 8601)")
    p.add_argument("--until", help="valid from before this moment (ISO 8601)")
    p.add_argument("--min-importance", type=float)
    p.add_argument("--include-inactive", action="store_true", help="also superseded, forgotten and expired rows")
    p.add_argument("--as-of", help="what was valid at this past moment (ISO 8601)")


def _filters(args: argparse.Namespace) -> dict[str, Any]:
    filters = {
        "scope": args.scope, "domain": args.domain, "type": args.type, "tags": args.tags,
        "tags_mode": "all" if args.all_tags else "any", "since": args.since, "until": args.until,
        "min_importance": args.min_importance, "include_inactive": args.include_inactive, "as_of": args.as_of,
    }  # fmt: skip
    return {key: value for key, value in filters.items() if value not in (None, False)}


@contextmanager
def open_store(config: Config, *, embed: bool = False) -> Iterator[MemoryStore]:
    """The configured store; with ``embed`` also the configured embedder (loading a local model takes seconds)."""
    db = parts.database(config)
    try:
        embedder = None
        if embed:
            embedder = parts.embedder(config.embeddings)
        store = parts.store(db, embedder)
        try:
            yield store
        finally:
            store.flush_access()
    finally:
        db.close()


# -- commands ----------------------------------------------------------------------------------------------


def list_memories(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory list USER``."""
    with open_store(config) as store:
        memories = store.get_all(args.user, limit=args.limit, **_filters(args))
    if args.json:
        return _print_json([m.to_record() for m in memories])
    _table(f"memories of {normalise_user(args.user)} ({len(memories)})", ["id", "type", "scope", "since", "imp.",
           "content"], [_memory_row(m) for m in memories])  # fmt: skip
    return 0


def show_memory(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory show ID``."""
    with open_store(config) as store:
        memory = _required(store.get(args.id), args.id)
    record = memory.to_record()
    if args.json:
        return _print_json(record)
    rows = [[key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)]
            for key, value in record.items()]  # fmt: skip
    _table(f"memory {memory.id}", ["field", "value"], rows)
    return 0


def search_memories(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory search USER QUERY``."""
    with open_store(config, embed=True) as store:
        # LINES: what the words and meaning of each memory match, as a search box should (not its conversation).
        hits = store.search(args.user, args.query, k=args.k, touch=False, recipe=LINES, **_filters(args))
    if args.json:
        return _print_json([hit.to_dict() for hit in hits])
    rows = [[f"{h.score:.3f}", "" if h.vector_similarity is None else f"{h.vector_similarity:.2f}",
             "" if h.bm25_rank is None else str(h.bm25_rank), *_memory_row(h.memory)] for h in hits]  # fmt: skip
    _table(f"hits for {args.query!r} ({len(hits)})", ["score", "cos", "bm25", "id", "type", "scope", "since", "imp.",
           "content"], rows)  # fmt: skip
    return 0


def show_history(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory history ID``."""
    with open_store(config) as store:
        versions = store.history(args.id)
        changes = store.changes(args.id)
    if not versions:
        _required(None, args.id)
    if args.json:
        return _print_json({"versions": [m.to_record() for m in versions], "changes": [c.to_dict() for c in changes]})
    _table(f"versions of memory {versions[0].root_id}", ["version", "id", "valid from", "valid to", "state",
           "content"], [[str(m.version), str(m.id), _when(m.valid_from), _when(m.valid_to), _state(m),
                         _short(m.content)] for m in versions])  # fmt: skip
    log_rows = [[_when(c.changed_at), c.change, str(c.memory_id), str(c.version), c.reason or ""] for c in changes]
    _table("changes", ["when", "change", "id", "version", "reason"], log_rows)
    return 0


def _audit(store: MemoryStore, action: str, memory: Memory, detail: str) -> None:
    """One row of the audit log (agent/audit_log.py), as the console writes for the same change: one change log
    whichever tool made it; the actor is ``cli:<login name>``."""
    from quinn.agent import audit_log

    audit_log.record(store.db, audit_log.cli_actor(), action, f"memory {memory.id}", user_id=memory.user_id,
                     detail=f"{detail}; from the command line")  # fmt: skip


def edit_memory(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory edit ID CONTENT``."""
    with open_store(config, embed=True) as store:
        old = _required(store.get(args.id), args.id)
        new_id = store.update(args.id, args.content, reason=args.reason, importance=args.importance,
                              valid_from=args.valid_from, allow_immutable=args.allow_immutable)  # fmt: skip
        new = _required(store.get(new_id), new_id)
        _audit(store, "edit memory", old, f"new version: memory {new_id}; {args.reason}")
    if args.json:
        return _print_json({"previous": old.id, "id": new.id, "version": new.version})
    print(f"memory {old.id} is superseded by memory {new.id} (version {new.version})")
    return 0


def persona(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory persona [CONTENT]`` (issue 35): the persona memory every reply prompt reads (a global
    memory of type ``persona``), shown, or written as a new version of the current one (or a first one)."""
    with open_store(config, embed=bool(args.content)) as store:
        current = store.get_all(None, scope="global", type="persona")
        if args.content:
            if current:
                new_id = store.update(current[0].id, args.content, reason=args.reason, allow_immutable=True)
            else:
                new_id = store.add(None, args.content, scope="global", type="persona", importance=1.0)
            new = _required(store.get(new_id), new_id)
            _audit(store, "write persona", new, args.reason)
            current = [new]
    if args.json:
        return _print_json({"persona": [{"id": m.id, "version": m.version, "content": m.content} for m in current]})
    if not current:
        print('no persona yet: `quinn memory persona "You are Quinn, …"` writes one')
    for memory in current:
        print(f"memory {memory.id} (version {memory.version}): {memory.content}")
    return 0


def forget_memory(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory forget ID``."""
    with open_store(config) as store:
        old = _required(store.get(args.id), args.id)
        elsewhere = forgetting.forget_by_id(store, args.id, reason=args.reason, allow_immutable=args.allow_immutable)
        _audit(store, "forget memory", old, args.reason)
    if args.json:
        return _print_json({"id": args.id, "forgotten": True, "elsewhere": elsewhere})
    print(f"memory {args.id} is forgotten (out of retrieval, kept in history until a purge)")
    if elsewhere:
        print(f"also taken out of: {forgetting.described(elsewhere)}")
    return 0


def pin_memory(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory pin ID`` and ``quinn memory unpin ID``."""
    with open_store(config) as store:
        old = _required(store.get(args.id), args.id)
        store.pin(args.id, args.pinned, reason=args.reason)
        _audit(store, "pin memory" if args.pinned else "unpin memory", old, args.reason)
    if args.json:
        return _print_json({"id": args.id, "immutable": args.pinned})
    print(f"memory {args.id} is {'pinned (immutable)' if args.pinned else 'no longer pinned'}")
    return 0


def purge_user(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory purge USER --yes``."""
    if not args.yes:
        raise StoreError(f"purge deletes every trace of {args.user} and cannot be undone", "add --yes to confirm")
    user = normalise_user(args.user) or ""
    if args.mailbox:  # checked first: a missing password must fail before anything is deleted
        resolve_secrets(config, os.environ, ("imap",))
    from quinn.agent import purge  # the agent's modules own tables too; a fast `quinn --help` without them

    with open_store(config) as store:
        counts = purge.purge(store, user)
    if args.mailbox:
        mailbox = parts.mailbox(config)
        try:
            mailbox.connect()
            counts["mailbox"] = mailbox.purge_address(user, config.smtp.from_address)
        finally:
            mailbox.close()
    if args.json:
        return _print_json({"user": user, "removed": counts})
    _table(f"purged {user}", ["table", "rows"], [[t, str(n)] for t, n in counts.items()])
    if counts.get(NOT_WIPED):  # said to the operator, not only logged (issue 35)
        print("warning: another process holds a read transaction on the database file, so the deleted rows' "
              "bytes are still in it; end it and run `quinn database vacuum`", file=sys.stderr)  # fmt: skip
    return 0


def export_memories(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory export USER [-o FILE]``."""
    fmt = args.format or ("yaml" if args.output and Path(args.output).suffix in (".yaml", ".yml") else "json")
    with open_store(config) as store:
        document = export_document(store, args.user)
    text = dump_document(document, fmt)
    if not args.output:
        sys.stdout.write(text)
        return 0
    _write_atomically(Path(args.output), text)
    print(f"exported {len(document['memories'])} memories of {document['user_id']} to {args.output}",
          file=sys.stderr)  # fmt: skip
    return 0


def import_memories(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory import FILE``."""
    if args.file == "-":
        data = sys.stdin.read()
    else:
        path = Path(args.file)
        try:
            data = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise StoreError(f"import file {path} not found", "check the path") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise StoreError(f"import file {path} cannot be read: {exc}") from None
    with open_store(config, embed=True) as store, progress_bar("importing") as progress:
        counts = store.import_(data, user_id=args.user, format=args.format, progress=progress)
    if args.json:
        return _print_json(counts)
    print(f"imported {counts['imported']} memories, skipped {counts['skipped']} already present")
    return 0


def reembed_memories(args: argparse.Namespace, config: Config) -> int:
    """``quinn memory reembed``: memories, then conversation recall's passages (vectors of another model), then
    mail stored before recall existed (an upgrade from a version without migration 0008) or while the embedder
    was down."""
    from quinn.agent import recallable_text

    with open_store(config, embed=True) as store:
        if store.embedder is None:
            raise StoreError("reembed needs an embedder", "set [embeddings] backend to local or openai")
        with progress_bar("re-embedding memories") as progress:
            done = store.reembed(batch_size=args.batch_size, progress=progress)
        with progress_bar("re-embedding passages") as progress:
            passages = reembed_passages(store, batch_size=args.batch_size, progress=progress)
        with progress_bar("indexing earlier mail") as progress:
            indexed = backfill(store, lambda subject, body: recallable_text(subject, body), progress=progress)
        model = store.embedder.model_id
    if args.json:
        return _print_json({"reembedded": done, "passages_reembedded": passages, "passages_indexed": indexed,
                            "model": model})  # fmt: skip
    print(f"re-embedded {done} memories and {passages} conversation passages with {model}; indexed {indexed} "
          "passages of mail not yet in conversation recall")  # fmt: skip
    return 0


# -- output --------------------------------------------------------------------------------------------------


def _required(memory: Memory | None, memory_id: int) -> Memory:
    if memory is None:
        raise StoreError(f"memory {memory_id} not found", "find ids with: quinn memory list USER")
    return memory


def _state(memory: Memory) -> str:
    if not memory.active:
        return "forgotten"
    return "current" if memory.current else "superseded"


def _when(moment: str | None) -> str:
    """A stored UTC time, to the minute, for a table."""
    return moment[:16].replace("T", " ") if moment else ""


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= CONTENT_WIDTH else flat[: CONTENT_WIDTH - 1] + "…"


def _memory_row(memory: Memory) -> list[str]:
    kind = memory.type if not memory.domain else f"{memory.type}/{memory.domain}"
    return [str(memory.id), kind, memory.scope, memory.valid_from[:10], f"{memory.importance:.2f}",
            _short(memory.content) + ("" if memory.current else f" [{_state(memory)}]")]  # fmt: skip


def _print_json(data: Any) -> int:
    print(json.dumps(data, indent=2, ensure_ascii=False))
    return 0


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=sys.stdout, soft_wrap=False).print(table)


def _write_atomically(path: Path, text: str) -> None:
    """Write to a temp file beside ``path`` and rename it over: a failed export never leaves half a file."""
    if not path.parent.exists():
        raise StoreError(f"export folder {path.parent} does not exist", "create it or choose another -o path")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
