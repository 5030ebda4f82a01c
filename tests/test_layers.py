"""The house's import rules (issue 17; the picture in docs/architecture.md), read from the source with ``ast``.

1. **Faces.** A package in ``FACED`` is entered through its ``__init__`` only: from outside it, ``from
   quinn.memory import MemoryStore`` (a name its ``__all__`` lists), never ``quinn.memory.store``. The modules
   behind a face are the package's own business, so they can be split or renamed without touching a caller.
2. **Layers.** ``LAYERS`` lists the units bottom first; a module imports its own unit and units of lower layers
   only, never a higher one and never a sibling of its own layer (``memory`` and ``mailbox`` know nothing of each
   other). ``ALLOWED`` names the exceptions, each with its reason.

Every import counts: at the top, inside a function (a lazy import for start-up time is still a dependency) and
under ``TYPE_CHECKING``. A unit is a package (``quinn/agent/``) or a top-level module (``quinn/app.py``); the small
shared modules in ``BASE`` form one unit at the bottom. The top packages (engine, commands, console, lab) have no
face: they are where the house is put together, entered by module (``cli.GROUPS`` lists command modules).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

QUINN = Path(__file__).resolve().parents[1] / "quinn"

# Small modules every layer may use: they import only each other.
BASE = {"__init__", "errors", "config", "clock", "confined", "faults", "packaged", "logs", "notify", "reload", "sdks",
        "hardening", "faces", "lab"}  # fmt: skip

LAYERS: list[set[str]] = [  # bottom first
    {"base"},
    {"db", "oauth"},  # the connection, the migrations, the DB thread; OAuth tokens for the mail logins (issue 33)
    {"users"},  # the one definition of a user, over every owner's table
    {"memory", "mailbox"},  # the stores: memory and mail, neither knowing the other
    {"documents", "metrics", "hold"},  # attached files (memory's passages, the mailbox's parser); DB totals; holds
    {"agent"},  # the reply and what it learns
    {"scheduler"},  # the periodic jobs, run by the agent's means
    {"engine"},  # the composition root and the path of one mail
    {"app"},  # the daemon's loop
    {"commands", "console"},  # the CLI's groups and the admin console
    {"lifecycle"},  # `quinn run` as a service (with the console inside it)
    {"cli"},
    {"__main__", "entry"},  # python -m quinn, and the quinn console script (importing the CLI when it runs)
]

FACED = {"db", "memory", "mailbox", "agent", "documents", "scheduler", "oauth"}

# (importing module, imported module or package): why the rule does not hold there.
ALLOWED = {
    ("quinn.console.serve", "quinn.commands.database"): "the console opens the database as every admin command does",
    ("quinn.commands.console", "quinn.console.serve"): "`quinn console` serves the console",
    ("quinn.commands.console", "quinn.console.auth"): "`quinn console hash-password` uses the console's hashing",
}


def unit_of(module: str) -> str:
    """The unit a dotted module name belongs to: ``quinn.agent.llm`` → ``agent``, ``quinn.config`` → ``base``."""
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else "__init__"
    return "base" if name in BASE else name


def rank_of(unit: str) -> int:
    for rank, units in enumerate(LAYERS):
        if unit in units:
            return rank
    raise AssertionError(f"unit {unit!r} is in no layer: add it to LAYERS in tests/test_layers.py")


def face_names(init: Path) -> set[str]:
    """The names a package's ``__init__`` exports: its literal ``__all__``, or the keys of the ``HOMES`` dict a
    lazy face builds it from (``__all__ = [*HOMES]``)."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    exported = values.get("__all__")
    if exported is None:
        return set()
    if isinstance(exported, ast.List) and all(isinstance(e, ast.Starred) for e in exported.elts):
        names: set[str] = set()
        for starred in exported.elts:
            assert isinstance(starred, ast.Starred) and isinstance(starred.value, ast.Name)
            source = values[starred.value.id]
            assert isinstance(source, ast.Dict), f"{init}: __all__ unpacks {starred.value.id}, which is no dict"
            names |= {ast.literal_eval(key) for key in source.keys if key is not None}
        return names
    return set(ast.literal_eval(exported))


FACES = {package: face_names(QUINN / package / "__init__.py") for package in sorted(FACED)}


def imports_of(module: str, source: str) -> list[tuple[int, str, str, list[str]]]:
    """(line, the import as written, the module imported, the names taken from it) for every quinn import."""
    found = []
    package = module if source and module.count(".") == 0 else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "quinn":
                    found.append((node.lineno, f"import {alias.name}", alias.name, []))
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            if target.split(".")[0] == "quinn":
                names = [alias.name for alias in node.names]
                written = f"from {'.' * node.level}{node.module or ''} import {', '.join(names)}"
                found.append((node.lineno, written, target, names))
    return found


def violations(module: str, source: str, path: str, faces: dict[str, set[str]] = FACES) -> list[str]:
    """What ``source`` (the text of ``module``, shown as ``path``) breaks of the two rules, one line each."""
    own_unit, found = unit_of(module), []
    own_package = module.split(".")[1] if "." in module else None
    for line, written, target, names in imports_of(module, source):
        where = f"{path}:{line}: `{written}`"
        target_parts = target.split(".")
        target_package = target_parts[1] if len(target_parts) > 1 else None
        allowed = ALLOWED.get((module, target)) is not None
        # rule 1: a faced package from outside, through its face and its __all__ only
        if target_package in faces and target_package != own_package and not allowed:
            if len(target_parts) > 2:
                found.append(f"{where}: {target} is behind the face of quinn.{target_package}; import from "
                             f"quinn.{target_package} (rule: faces, tests/test_layers.py)")  # fmt: skip
            else:
                hidden = [n for n in names if n not in faces[target_package]]
                if hidden:
                    found.append(f"{where}: quinn.{target_package} does not export {', '.join(hidden)} (its __all__);"
                                 " export it from the face or keep it private (rule: faces)")  # fmt: skip
        # rule 2: down the layers only
        target_unit = unit_of(target)
        if target_unit == own_unit or allowed:
            continue
        own_rank, target_rank = rank_of(own_unit), rank_of(target_unit)
        if target_rank > own_rank:
            found.append(f"{where}: {own_unit} (layer {own_rank}) imports {target_unit} (layer {target_rank}), "
                         "which sits above it (rule: layers import downwards only)")  # fmt: skip
        elif target_rank == own_rank and own_unit != "base":
            found.append(f"{where}: {own_unit} imports {target_unit}, a sibling on its own layer {own_rank} "
                         "(rule: siblings do not import each other; ALLOWED, with a reason, if one must)")  # fmt: skip
    return found


def quinn_modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(QUINN.rglob("*.py")):
        parts = list(path.relative_to(QUINN.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def test_every_import_in_quinn_keeps_to_the_faces_and_the_layers() -> None:
    broken = []
    for module, path in quinn_modules():
        shown = str(path.relative_to(QUINN.parent))
        broken += violations(module, path.read_text(encoding="utf-8"), shown)
    assert broken == [], "\n".join(broken)


def test_every_allowed_exception_is_still_needed() -> None:
    used = set()
    for module, path in quinn_modules():
        for _line, _written, target, _names in imports_of(module, path.read_text(encoding="utf-8")):
            if (module, target) in ALLOWED:
                used.add((module, target))
    assert set(ALLOWED) - used == set(), "ALLOWED names imports that no longer exist: remove them"


def test_every_unit_has_a_layer() -> None:
    units = {unit_of(module) for module, _path in quinn_modules()}
    for unit in units:
        rank_of(unit)


@pytest.mark.parametrize("package", sorted(FACED))
def test_a_face_exports_only_what_its_modules_define(package: str) -> None:
    """Every name of a face is defined where the face says, so ``from quinn.agent import X`` cannot fail late."""
    init = QUINN / package / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    homes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"quinn.{package}."):
            homes.update({a.asname or a.name: node.module for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module == f"quinn.{package}":
            homes.update({a.asname or a.name: f"quinn.{package}.{a.name}" for a in node.names})
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "HOMES" for t in node.targets):
            lazy = ast.literal_eval(node.value)
            homes.update({n: f"quinn.{package}.{m or n}" for n, m in lazy.items()})
    for name in sorted(FACES[package]):
        assert name in homes, f"quinn/{package}/__init__.py exports {name} but does not say where it lives"
        module_path = QUINN.parent / (homes[name].replace(".", "/") + ".py")
        if homes[name].rsplit(".", 1)[-1] == name and module_path.exists():
            continue  # a module exported as a namespace
        defined = defined_names(ast.parse(module_path.read_text(encoding="utf-8")))
        assert name in defined, f"quinn/{package}/__init__.py exports {name} from {homes[name]}, which has none"


def defined_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


# -- the rules can fail: synthetic modules that break them ----------------------------------------------------


def test_a_private_module_behind_a_face_is_refused() -> None:
    [message] = violations("quinn.engine.mail", "from quinn.mailbox.ledger import MailLedger\n", "quinn/engine/mail.py")
    assert message.startswith("quinn/engine/mail.py:1: `from quinn.mailbox.ledger import MailLedger`")
    assert "behind the face of quinn.mailbox" in message and "rule: faces" in message


def test_a_name_the_face_does_not_export_is_refused() -> None:
    source = "def f():\n    from quinn.memory import _internal\n"  # inside a function: still an import
    [message] = violations("quinn.agent.respond", source, "quinn/agent/respond.py")
    assert "quinn/agent/respond.py:2:" in message and "does not export _internal" in message


def test_an_import_up_the_layers_is_refused() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from quinn.agent import Agent\n"
    [message] = violations("quinn.memory.store", source, "quinn/memory/store.py")
    assert message == (
        "quinn/memory/store.py:3: `from quinn.agent import Agent`: memory (layer 3) imports agent (layer 5), "
        "which sits above it (rule: layers import downwards only)"
    )


def test_siblings_on_one_layer_do_not_import_each_other() -> None:
    [message] = violations("quinn.mailbox.ledger", "import quinn.memory\n", "quinn/mailbox/ledger.py")
    assert "mailbox imports memory, a sibling on its own layer" in message


def test_the_face_and_the_layer_below_are_fine() -> None:
    source = "from quinn.mailbox import MailLedger\nfrom quinn.db import Database\nfrom quinn.clock import iso\n"
    assert violations("quinn.engine.mail", source, "quinn/engine/mail.py") == []
    assert violations("quinn.mailbox.outbox", "from quinn.mailbox.ledger import MailKey\n", "x.py") == []  # own package
