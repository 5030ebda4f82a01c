"""``quinn kb …``: the knowledge base, files every user's replies may draw on (issue 18; quinn/documents/knowledge.py).

add (files or directories; a changed file replaces the one of its name, an unchanged one is skipped; --domain
scopes them to the users of mail domains), list, remove, search and reindex, against the configured database. A
file that cannot be read is reported with its reason and the others are still added; the exit code is then 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from quinn.commands.database import DATABASE_ONLY
from quinn.commands.memory import open_store
from quinn.commands.output import answer, print_json, progress_bar, shorten, table
from quinn.config import Config
from quinn.documents import display_name, knowledge
from quinn.errors import StoreError
from quinn.memory import KNOWLEDGE_OWNER, reembed, search_passages

Handler = Callable[[argparse.Namespace, Config], int]


def register(sub: Any, with_config: Callable[[argparse.ArgumentParser], argparse.ArgumentParser]) -> None:
    """Add ``quinn kb`` and its subcommands to the CLI."""
    group = sub.add_parser("kb", help="the knowledge base: files every user's replies may draw on")
    cmds = group.add_subparsers(dest="kb_command", metavar="SUBCOMMAND", required=True)

    def command(name: str, handler: Handler, help: str, *, embeds: bool = False) -> argparse.ArgumentParser:
        parser = with_config(cmds.add_parser(name, help=help, description=help))
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.set_defaults(handler=handler, secrets_of=(*DATABASE_ONLY, "embeddings") if embeds else DATABASE_ONLY)
        return parser

    p = command("add", add, "add files (or every file under directories); a changed file replaces its old version",
                embeds=True)  # fmt: skip
    p.add_argument("paths", nargs="+", type=Path, help="files or directories")
    p.add_argument("--domain", action="append", default=[], type=mail_domain, metavar="DOMAIN",
                   help="reach only the users of this mail domain (repeat for more; none: everyone)")  # fmt: skip
    command("list", list_files, "the knowledge base's files")
    p = command("remove", remove, "take a file out of the knowledge base")
    p.add_argument("name", help="the file's name, as `quinn kb list` shows it")
    p = command("search", search, "search the knowledge base as a reply does", embeds=True)
    p.add_argument("query", help="the text to search for")
    p.add_argument("-k", type=int, default=10, help="number of hits (default 10)")
    p = command("reindex", reindex, "embed every passage of the knowledge base again (after a model change)",
                embeds=True)  # fmt: skip
    p.add_argument("--batch-size", type=int, default=64, help="passages per embedding call (default 64)")


def mail_domain(text: str) -> str:
    """``--domain``'s value as stored (lower-case, no leading @); an argparse error when it is not a domain."""
    domain = knowledge.normalise_domain(text)
    if not domain:
        raise argparse.ArgumentTypeError(f"{text!r} is not a mail domain (like example.org)")
    return domain


def add(args: argparse.Namespace, config: Config) -> int:
    """``quinn kb add PATH…``."""
    files = knowledge.files_under(list(args.paths))
    results: list[knowledge.Added] = []
    with open_store(config, embed=True) as store, progress_bar("adding") as progress:
        named: dict[str, Path] = {}  # a file is known by its name: two of one name in a run would replace each other
        for done, path in enumerate(files, 1):
            name = display_name(path.name)
            if name in named:
                reason = f"{named[name]} has the same name; rename one of them"
                results.append(knowledge.Added(str(path), name, "failed", reason=reason))
            else:
                named[name] = path
                results.append(knowledge.add_file(store, path, config.documents, args.domain))
            progress(done, len(files))
    rows = [{"path": r.path, "name": r.name, "status": r.status, "passages": r.passages, "reason": r.reason}
            for r in results]  # fmt: skip
    if not files:
        rows.append({"path": " ".join(map(str, args.paths)), "name": "", "status": "failed", "passages": 0,
                     "reason": "no files there"})  # fmt: skip
    answer(args, rows, lambda out: out.print(table("knowledge base", ("name", "status", "passages", "reason"), rows)))
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def list_files(args: argparse.Namespace, config: Config) -> int:
    """``quinn kb list``."""
    with open_store(config) as store:
        rows = knowledge.entries(store.db)
    shown = [{**r, "size": f"{r['size']} B" if r["size"] < 1024 else f"{r['size'] / 1024:.1f} kB",
              "reaches": ", ".join(r["domains"]) or "everyone"} for r in rows]  # fmt: skip
    columns = ("name", "size", "kind", "pages", "sections", "passages", "reaches", "added")
    return answer(args, rows, lambda out: out.print(table("knowledge base", columns, shown, empty="no files")))


def remove(args: argparse.Namespace, config: Config) -> int:
    """``quinn kb remove NAME``."""
    with open_store(config) as store:
        if not knowledge.remove(store.db, args.name):
            raise StoreError(f"no file {args.name!r} in the knowledge base", "see quinn kb list")
    return answer(args, {"removed": args.name}, lambda out: out.print(f"removed {args.name}"))


def search(args: argparse.Namespace, config: Config) -> int:
    """``quinn kb search QUERY``: the knowledge base's passages only."""
    with open_store(config, embed=True) as store:
        hits = search_passages(store, KNOWLEDGE_OWNER, args.query, k=args.k, documents_only=True)
    rows = [{"citation": h.passage.citation, "score": round(h.score, 3), "content": h.passage.content} for h in hits]
    shown = [{**r, "content": shorten(str(r["content"]))} for r in rows]
    return answer(args, rows, lambda out: out.print(table(args.query, ("citation", "score", "content"), shown,
                                                          empty="nothing found")))  # fmt: skip


def reindex(args: argparse.Namespace, config: Config) -> int:
    """``quinn kb reindex``: every knowledge-base passage embedded again with the configured model."""
    with open_store(config, embed=True) as store:
        if store.embedder is None:
            raise StoreError("reindex needs an embedder", "set [embeddings] backend to local or openai")
        with progress_bar("re-embedding") as progress:
            done = reembed(store, batch_size=args.batch_size, progress=progress, owner=KNOWLEDGE_OWNER, every=True)
    if args.json:
        print_json({"reembedded": done})
    else:
        print(f"{done} knowledge-base passages embedded with {config.embeddings.model}")
    return 0
