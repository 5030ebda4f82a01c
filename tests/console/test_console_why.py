"""The "Why did Quinn say that?" page: a real lab run (Dovecot, aiosmtpd, the scripted model over HTTP, the
libSQL file, the real embedder) records what reached each reply's prompt, and the console shows it, escaped, to
both roles; a purge takes the person's traces with it."""

from __future__ import annotations

import json
import re

from starlette.testclient import TestClient

from quinn.agent import reply_trace
from quinn.agent.purge import purge
from quinn.config import ConsoleConfig
from quinn.console.app import Console
from quinn.console.auth import Admin, PasswordHash, hash_password
from quinn.console.routes import build_app
from tests.agent.test_scenarios import DAY0
from tests.console.conftest import PASSWORDS, TEST_COST, log_in
from tests.lab.brain import NOTHING, Brain
from tests.lab.llm_server import Text, ToolCall, ToolCalls


def console_over(store) -> Console:  # type: ignore[no-untyped-def]
    """The console over the in-process daemon's own store, with the test admins."""
    admins = {name: Admin(name, "admin" if name == "root" else "read-only",
                          PasswordHash.parse(hash_password(pw, **TEST_COST), owner=name))
              for name, pw in PASSWORDS.items()}  # fmt: skip
    return Console(ConsoleConfig(), store, admins=admins)  # enabled or not: the app is built directly


async def test_a_reply_records_what_reached_its_prompt_and_the_console_shows_it(make_quinn, mail_lab,
                                                                                brain: Brain) -> None:  # fmt: skip
    alice, bob = mail_lab.new_user("alice"), mail_lab.new_user("bob")
    quinn = await make_quinn()
    store = quinn.app.store
    assert store is not None
    short = store.add(alice, "Alice prefers short replies.", type="preference")  # the profile
    cello = store.add(alice, "Alice plays the cello in the <b>Lisbon</b> orchestra.", type="fact", scope="episodic")
    bobs = store.add(bob, "Bob plays the tuba.", type="fact", scope="episodic")
    brain.learn["Mr Pike"] = {**NOTHING, "new": [{"content": "Alice's landlord is Mr Pike.", "type": "fact"}]}
    first = await quinn.send(alice, "Flat", "My landlord Mr Pike wants the rent on the third of each month.",
                             date=DAY0)  # fmt: skip
    # What learning made of it sits beside its reply's trace: through the gate, one memory extracted.
    assert quinn.query("SELECT gate, learnt FROM reply_traces WHERE message_id = ?", (first,)) == [("passed", 1)]
    script = iter([
        ToolCalls([ToolCall("search_memory", {"query": "cello orchestra"}), ToolCall("forget_memory", {"id": bobs})]),
        Text("The rent is due on the third, and good luck with the cello."),
    ])  # fmt: skip
    brain.reply = lambda request: next(script)
    second = await quinn.send(alice, "Cello and rent", "When is my rent due? And how is the cello orchestra going?",
                              date=DAY0.replace(day=2))  # fmt: skip
    assert len(quinn.replies(alice, 2)) == 2

    [(trace_id, user, template, version, raw)] = quinn.query(
        "SELECT id, user_id, template, prompt_version, trace FROM reply_traces WHERE message_id = ?", (second,)
    )
    assert (user, template) == (alice, "reply") and version.startswith("reply@")
    stored = json.loads(raw)
    prompt = brain.prompt("When is my rent due")
    by_id = {m["id"]: m for m in stored["memories"]}
    assert by_id[short]["source"] == "profile" and by_id[short]["score"] is None
    assert by_id[cello]["source"] == "search" and 0 < by_id[cello]["score"] <= 1.5
    assert 0 < by_id[cello]["similarity"] <= 1
    assert bobs not in by_id  # another user's memory never reaches the prompt, nor its trace
    # Every memory the trace names was cited in the prompt the model saw, and every cited one is named.
    assert set(by_id) == {int(i) for i in re.findall(r"\[memory:(\d+)\]", prompt)}
    passages = {p["id"]: p for p in stored["passages"]}
    [(landlord, content)] = quinn.query("SELECT id, content FROM passages WHERE content LIKE '%Mr Pike%'")
    assert landlord in passages and content in prompt and passages[landlord]["score"] > 0
    search, forget = stored["tools"]
    assert search["name"] == "search_memory" and search["memory_ids"][0] == cello  # its hits, best first
    assert search["found"] == len(search["memory_ids"]) and bobs not in search["memory_ids"]
    assert forget == {"name": "forget_memory", "memory_ids": [], "found": None, "refused": True}
    assert "Mr Pike" not in raw and "cello" not in raw  # ids and scores, never the person's text
    usage_rows = quinn.query("SELECT purpose, input_tokens FROM llm_usage WHERE message_id = ?", (second,))
    assert [purpose for purpose, _n in usage_rows][:1] == ["reply"]

    console = console_over(store)
    with TestClient(build_app(console), base_url="http://127.0.0.1") as client:
        log_in(client, "viewer")  # the read-only role may look
        person = client.get(f"/people/{alice}").text
        assert f'href="/replies/{trace_id}"' in person
        # The reply is named by the subject of the mail it answers, its Message-ID only on hover (issue 34).
        assert re.search(r'<td class="subject" title="[^"]+">Cello and rent</td>', person), person
        assert f'href="/replies/{trace_id}"' in client.get("/mail").text
        page = client.get(f"/replies/{trace_id}")
        assert page.status_code == 200
        text = page.text
        assert version in text and f"[memory:{cello}]" in text and f"[memory:{short}]" in text
        assert "the <b>Lisbon</b>" not in text and "the &lt;b&gt;Lisbon&lt;/b&gt; orchestra" in text  # escaped
        assert "Mr Pike" in text and "[mail:2026-09-01]" in text  # the passage, with its citation
        assert "search_memory" in text and "refused" in text and "forget_memory" in text
        assert f"{by_id[cello]['score']:.3f}" in text
        reply_tokens = usage_rows[0][1]
        assert f"<td>{reply_tokens}</td>" in text
        assert client.get("/replies/999999").status_code == 404

    counts = await store.db.run(purge, store, alice)
    assert counts["reply_traces"] == 2
    assert quinn.query("SELECT count(*) FROM reply_traces") == [(0,)]
    assert await store.db.run(reply_trace.by_id, store.db, trace_id) is None
