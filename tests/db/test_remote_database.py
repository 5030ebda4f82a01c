"""The daemon on a libSQL server: one connection for the mailbox, the memory store and the scheduler.

Two libSQL connections in one process deadlock when one waits for the other's write lock (the driver holds the
GIL meanwhile; FACTS.md). So the daemon opens one ``Database`` and every part shares it; this test handles mail
while a job writes, on the real sqld, and counts the connections.
"""

from __future__ import annotations

import asyncio

from quinn.db import Database
from tests.lab.inprocess import LabQuinn
from tests.lab.mails import plain_model
from tests.lab.sqld import Sqld

QUIET = '[embeddings]\nbackend = "none"\n[scheduler]\nstartup_delay_s = 3600\n'  # jobs only when the test says


async def test_mail_and_jobs_share_one_connection_to_sqld(sqld: Sqld, lab_config, mail_lab, llm_server) -> None:
    llm_server.responder = plain_model
    alice = mail_lab.new_user("alice")
    already = Database.connections_to(sqld.url)
    quinn = LabQuinn(lab_config(extra=QUIET, db_path=sqld.url), mail_lab)
    await quinn.start()
    try:
        app = quinn.app
        assert app.scheduler is not None and app.store is not None
        assert Database.connections_to(sqld.url) == already + 1
        assert app.scheduler.store.db is app.db and app.store.db is app.db
        # Mail (ledger, sessions, outbox, extraction) and two writing jobs at once, through the one connection.
        await quinn.send(alice, "Hello", "I moved to Lisbon in May and I prefer short answers.", process=False)
        handled, *jobs = await asyncio.wait_for(asyncio.gather(
            quinn.process(), app.scheduler.run_job("decay", force=True), app.scheduler.run_job("cleanup", force=True),
        ), timeout=90)  # fmt: skip
        assert handled == 1 and [j.status for j in jobs] == ["ok", "ok"]
        quinn.replies(alice, 1)
        assert quinn.query("SELECT state FROM mail_state WHERE user_id = ?", (alice,)) == [("replied",)]
        assert Database.connections_to(sqld.url) == already + 1
    finally:
        await quinn.close()
    assert Database.connections_to(sqld.url) == already
