"""What a SIGHUP may change: the reloadable part of a new config, and the keys that need a restart.

Reloadable: who gets an answer (``[policy]``), how much memory goes in a prompt (``[memory]``), the limits on
attached files (``[documents]``: read per mail), what one prompt may carry (``[budget]``), the prompt directory, the
model settings (``[llm]``), how replies go out (``[smtp]``), the log level, and the IMAP poll interval and size
limit. Everything that owns a connection or a loaded model (the IMAP account and folders, the database, the
embedder, the metrics endpoint, the scheduler) keeps its old value until a restart, and the reload says which
changed keys were left alone. A section added later is restart-only until it is listed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quinn.config import Config, Section

RELOADABLE_SECTIONS = ("policy", "memory", "documents", "budget", "prompts", "llm", "smtp")
RELOADABLE_KEYS = {"log_level", "imap.poll_interval_s", "imap.max_message_kb"}


@dataclass
class ReloadPlan:
    """The config to use from now on, and what changed."""

    config: Config
    applied: list[str] = field(default_factory=list)  # dotted keys now in effect
    needs_restart: list[str] = field(default_factory=list)  # dotted keys changed in the file but not applied

    def changed(self, section: str) -> bool:
        """True when a key of ``section`` (or the top-level key of that name) changed and is applied."""
        return any(key == section or key.startswith(section + ".") for key in self.applied)


def changed_keys(old: Config, new: Config) -> list[str]:
    """Dotted keys whose value differs between two configs, resolved secrets included (as ``*_env`` keys)."""
    keys: list[str] = []
    for name in type(old).model_fields:
        a, b = getattr(old, name), getattr(new, name)
        if isinstance(a, Section) and isinstance(b, Section):  # a section (the secrets are its own)
            for key in type(a).model_fields:
                if getattr(a, key) != getattr(b, key):
                    keys.append(f"{name}.{key}")
            for secret in sorted(set(a._secrets) | set(b._secrets)):
                if a.secret(secret) != b.secret(secret) and f"{name}.{secret}_env" not in keys:
                    keys.append(f"{name}.{secret}_env")  # same variable, new value (a rotated password)
        elif a != b:
            keys.append(name)
    return keys


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """Merge ``new`` into ``old`` where a reload may: the result keeps every restart-only value of ``old``."""
    changed = changed_keys(old, new)
    applied = [k for k in changed if k.split(".")[0] in RELOADABLE_SECTIONS or k in RELOADABLE_KEYS]
    needs_restart = [k for k in changed if k not in applied]
    update: dict[str, Any] = {}
    for name in type(old).model_fields:
        if name in RELOADABLE_SECTIONS or name in RELOADABLE_KEYS:
            update[name] = getattr(new, name)
        else:
            update[name] = getattr(old, name)
    imap_keys = {k.split(".", 1)[1] for k in RELOADABLE_KEYS if k.startswith("imap.")}
    imap = old.imap.model_copy(update={k: getattr(new.imap, k) for k in imap_keys})
    imap._secrets = dict(old.imap._secrets)
    update["imap"] = imap
    merged = old.model_copy(update=update)
    return ReloadPlan(merged, applied, needs_restart)
