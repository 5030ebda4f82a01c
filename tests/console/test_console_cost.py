"""Tokens and cost this month on People, a person's page and "Why did Quinn say that?": exact figures from
seeded ``llm_usage`` rows and the prices of ``[llm]`` (per model; none configured: a dash, never a guess)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from starlette.testclient import TestClient

from quinn.agent import reply_trace, usage
from quinn.agent.llm import Usage
from quinn.agent.reply_trace import Trace
from quinn.clock import ManualClock
from quinn.config import LlmConfig, load_config
from quinn.console.app import Console
from quinn.console.auth import hash_password
from quinn.console.routes import build_app
from quinn.console.serve import usage_parts
from quinn.db import Database
from quinn.errors import ConfigError
from quinn.memory.store import MemoryStore
from tests.console.conftest import ALICE, BOB, CONFIG, PASSWORDS, TEST_COST, log_in

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
MAIN, SMALL, OLD = "ollama/llama3.2", "ollama/qwen-small", "openai/retired-model"
PRICES = """price_input_per_mtok = 0.40
price_output_per_mtok = 1.60
background_model = "ollama/qwen-small"
background_price_input_per_mtok = 0.10
background_price_output_per_mtok = 0.20
"""
LLM_END = 'base_url = "http://localhost:11434/v1"\n'


def console_for(tmp_path, prices: str) -> tuple[Console, MemoryStore]:  # type: ignore[no-untyped-def]
    env = {"Q_IMAP": "x"} | {f"Q_CONSOLE_{n.upper()}": hash_password(pw, **TEST_COST) for n, pw in PASSWORDS.items()}
    path = tmp_path / "quinn.toml"
    path.write_text(CONFIG.replace(LLM_END, LLM_END + prices), encoding="utf-8")
    config = load_config(path, env=env)
    store = MemoryStore(Database.open(config.database.url), None)
    store.add(ALICE, "Alice's sister is called Jo", type="fact")
    store.add(BOB, "Bob runs marathons", type="fact")
    db = store.db
    # Alice this month: a reply on the main model and its extraction on the background model, one mail.
    usage.record_usage(db, "reply", Usage(MAIN, 12_000, 3_000, 2), user_id=ALICE, message_id="m1@x", at=NOW)
    usage.record_usage(db, "extract", Usage(SMALL, 50_000, 5_000, 1), user_id=ALICE, message_id="m1@x", at=NOW)
    # ... and one last month, which "this month" leaves out (a second before the 1st, UTC).
    usage.record_usage(db, "reply", Usage(MAIN, 1_000_000, 0, 1), user_id=ALICE,
                       at=datetime(2026, 10, 31, 23, 59, 59, tzinfo=UTC))  # fmt: skip
    # Bob: a million each way on the main model, and tokens of a model that has no price (the one before).
    usage.record_usage(db, "reply", Usage(MAIN, 1_000_000, 1_000_000, 1), user_id=BOB, at=NOW)
    usage.record_usage(db, "reply", Usage(OLD, 2_000, 500, 1), user_id=BOB, at=datetime(2026, 11, 1, tzinfo=UTC))
    reply_trace.record(db, ALICE, "m1@x", "reply", "reply@test", Trace(), now=NOW)
    return Console(config.console, store, **usage_parts(config), clock=ManualClock(NOW)), store


@pytest.fixture
def priced(tmp_path) -> Iterator[tuple[TestClient, MemoryStore]]:  # type: ignore[no-untyped-def]
    console, store = console_for(tmp_path, PRICES)
    try:
        with TestClient(build_app(console), base_url="http://127.0.0.1") as client:
            assert log_in(client, "viewer").status_code == 303  # the read-only role sees cost too
            yield client, store
    finally:
        store.close()


def test_the_figures_are_tokens_times_the_prices_of_each_model(priced):
    _client, store = priced
    llm = LlmConfig(model=MAIN, price_input_per_mtok=0.40, price_output_per_mtok=1.60, background_model=SMALL,
                    background_price_input_per_mtok=0.10, background_price_output_per_mtok=0.20)  # fmt: skip
    prices = usage.prices_from(llm)
    assert prices == {MAIN: usage.Price(0.40, 1.60), SMALL: usage.Price(0.10, 0.20)}
    spent = usage.users_spend(store.db, [ALICE, BOB, "nobody@example.org"], usage.month_start(NOW), prices)
    assert set(spent) == {ALICE, BOB}
    alice, bob = spent[ALICE], spent[BOB]
    # 12,000 x 0.40 + 3,000 x 1.60 (main) + 50,000 x 0.10 + 5,000 x 0.20 (background), per million
    assert (alice.input_tokens, alice.output_tokens, alice.calls, alice.tokens) == (62_000, 8_000, 3, 70_000)
    assert alice.cost == pytest.approx(0.0048 + 0.0048 + 0.0050 + 0.0010, abs=1e-12) and alice.unpriced_tokens == 0
    # 1M x 0.40 + 1M x 1.60; the retired model's 2,500 tokens are counted apart, not priced
    assert bob.tokens == 2_002_500 and bob.cost == pytest.approx(2.0, abs=1e-12) and bob.unpriced_tokens == 2_500
    assert usage.users_spend(store.db, [ALICE], usage.month_start(NOW), {})[ALICE].cost is None


def test_people_shows_tokens_and_cost_this_month(priced):
    client, _store = priced
    page = client.get("/people").text
    alice_row = page.split(f">{ALICE}</a>")[1].split("</tr>")[0]
    assert '<td class="tokens">70,000</td>' in alice_row and '<td class="cost">0.0156</td>' in alice_row
    bob_row = page.split(f">{BOB}</a>")[1].split("</tr>")[0]
    assert '<td class="tokens">2,002,500</td>' in bob_row and '<td class="cost">2.0000 *</td>' in bob_row
    assert "since 1 November 2026 (UTC)" in page and "not counted in the cost" in page


def test_a_person_shows_their_month(priced):
    client, _store = priced
    page = client.get(f"/people/{ALICE}").text
    assert '<span class="tokens">70,000</span> tokens (62,000 in, 8,000 out, 3 calls)' in page
    assert '<span class="cost">0.0156</span>.' in page
    assert "2,500 tokens unpriced" in client.get(f"/people/{BOB}").text


def test_why_shows_the_cost_of_each_part_of_one_reply(priced):
    client, store = priced
    [(trace_id,)] = store.db.query("SELECT id FROM reply_traces WHERE message_id = 'm1@x'")
    page = client.get(f"/replies/{trace_id}").text
    rows = page.split('<table class="why-usage">')[1].split("</table>")[0]
    assert f'<td>reply</td><td>{MAIN}</td><td>12000</td><td>3000</td><td>2</td><td class="cost">0.0096</td>' in rows
    assert f'<td>extract</td><td>{SMALL}</td><td>50000</td><td>5000</td><td>1</td><td class="cost">0.0060' in rows
    assert '<td class="cost" id="reply-cost">0.0156</td>' in rows


def test_without_prices_cost_is_a_dash_and_a_hint(tmp_path):
    console, store = console_for(tmp_path, "")
    try:
        with TestClient(build_app(console), base_url="http://127.0.0.1") as client:
            log_in(client)
            page = client.get("/people").text
            alice_row = page.split(f">{ALICE}</a>")[1].split("</tr>")[0]
            assert '<td class="tokens">70,000</td>' in alice_row and '<td class="cost">—</td>' in alice_row
            assert "no price is configured" in page and "price_input_per_mtok" in page
            [(trace_id,)] = store.db.query("SELECT id FROM reply_traces")
            why = client.get(f"/replies/{trace_id}").text
            assert '<td class="cost" id="reply-cost">—</td>' in why and "price_input_per_mtok" in why
    finally:
        store.close()


@pytest.mark.parametrize(
    ("prices", "error"),
    [
        ("price_input_per_mtok = 0.4\n", "price_input_per_mtok and price_output_per_mtok go together: set both"),
        ("background_price_output_per_mtok = 0.2\n", "background_price_input_per_mtok and "
         "background_price_output_per_mtok go together"),
        ("background_price_input_per_mtok = 0.1\nbackground_price_output_per_mtok = 0.2\n",
         "background_price_*_per_mtok price background_model, which is not another model"),
        ("price_input_per_mtok = -1\nprice_output_per_mtok = 1\n", "llm.price_input_per_mtok"),
    ],
)  # fmt: skip
def test_price_mistakes_are_named(tmp_path, prices, error):
    path = tmp_path / "quinn.toml"
    path.write_text(CONFIG.split("[console]")[0].replace(LLM_END, LLM_END + prices), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={"Q_IMAP": "x"})
    assert error in str(caught.value)
