"""Retrying a failed or quarantined mail: ``quinn mail status --retry KEY`` and the console's Mail page.

Its ledger row becomes ``retried`` (with a fresh count of attempts) so the daemon does not take it for a
duplicate, and the message is moved from the quarantine folder back to the watched folder, where the daemon picks
it up as new mail under a new UID and carries the ledger row on to it. Its reply, already in the outbox, is sent
again rather than written anew. A mail still in the watched folder (not moved yet) is simply handled again. Mail
quarantined before it was read (too large, unparseable) has no Message-ID to find it by: it is moved by hand.
"""

from __future__ import annotations

from typing import Any

from quinn.clock import iso, utcnow
from quinn.config import Config
from quinn.db import Database
from quinn.engine import parts
from quinn.errors import QuinnError
from quinn.mailbox import MailKey, MailLedger, Outbox

RETRIABLE = frozenset({"failed", "quarantined"})  # engine/states.py: the final states that may become "retried"


def key_text(folder: str, uidvalidity: int, uid: int) -> str:
    """The printed form of a ledger key."""
    return f"{folder}:{uidvalidity}:{uid}"


def retry(config: Config, db: Database, key: MailKey) -> dict[str, Any]:
    """Send a failed or quarantined mail round again (see the module docstring); returns what was done."""
    ledger = MailLedger(db)
    record = ledger.get(key)
    name = key_text(key.folder, key.uidvalidity, key.uid)
    if record is None:
        raise QuinnError(f"no mail {name} in the ledger", "copy a key from `quinn mail status`")
    if record.state not in RETRIABLE:
        raise QuinnError(f"mail {name} is {record.state}, not failed or quarantined",
                         "only failed or quarantined mail can be retried")  # fmt: skip
    if record.moved and not record.message_id:  # quarantined before it was read: nothing to find it by
        where = f"move it from {config.imap.quarantine_folder} back to {config.imap.folder} by hand"
        raise QuinnError(f"mail {name} was quarantined before its Message-ID was read ({record.reason})", where)
    ledger.retry(key, f"retry requested by the operator at {iso(utcnow())} (was: {record.reason})")
    # Its reply, refused for good last time, goes back to pending so the delivery tries it again.
    Outbox(db).retry_failed(record.message_id)
    if not record.moved:  # still in the watched folder: the daemon handles it again on its next pass
        return {"key": name, "state": "retried", "moved": 0}
    mailbox = parts.mailbox(config)
    try:
        mailbox.connect()
        moved = mailbox.restore(record.message_id, config.imap.quarantine_folder)
    except Exception:
        ledger.set(key, "failed", record.reason)  # nothing changed on the server: undo
        raise
    finally:
        mailbox.close()
    if moved == 0:
        ledger.set(key, "failed", record.reason)
        raise QuinnError(
            f"mail {name} ({record.message_id}) is not in {config.imap.quarantine_folder}",
            "move it back to the watched folder by hand, or look for it in your mail client",
        )
    return {"key": name, "state": "retried", "moved": moved, "to": config.imap.folder}
