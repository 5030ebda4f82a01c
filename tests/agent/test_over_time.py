"""Memory over time in the reply prompt (issue 32), on plain data: earlier values with their end date, absence,
dates, the whole history when it fits, and a memory budget that follows the model's context."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from quinn.agent.context import ReplyInputs, context_block, reply_variables
from quinn.agent.prompts import PromptStore
from quinn.agent.samples import SAMPLE_USER, sample_email, sample_memory
from quinn.config import MEMORY_CONTEXT_SHARE, load_config
from quinn.mailbox.message import Address
from quinn.memory.models import SearchHit
from quinn.memory.passages import Passage, PassageHit
from tests.test_config import MINIMAL

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def inputs(**kwargs) -> ReplyInputs:
    base = {"email": sample_email(), "user_id": SAMPLE_USER, "assistant_name": "Quinn",
            "assistant_address": "quinn@example.org", "today": "2026-11-22", "now": NOW}  # fmt: skip
    return ReplyInputs(**{**base, **kwargs})


def moved() -> tuple:
    """Lisbon (version 1, closed on 2026-05-01) and Porto (version 2, current)."""
    lisbon = replace(sample_memory(1, "Alice lives in Lisbon."), valid_to="2026-05-01T08:00:00+00:00",
                     superseded_by=2)  # fmt: skip
    porto = replace(sample_memory(2, "Alice lives in Porto."), version=2, root_id=1,
                    valid_from="2026-05-01T08:00:00+00:00")  # fmt: skip
    return lisbon, porto


def mail(pid: int, text: str, day: str, audience: tuple[str, ...] = (SAMPLE_USER,), **kw) -> Passage:
    return Passage(pid, SAMPLE_USER, f"<m{pid}@x>", "in", f"{day}T09:00:00+00:00", "News", 0, text,
                   frozenset(audience), **kw)  # fmt: skip


def test_a_memory_shows_the_value_it_replaced_with_its_end_date_and_the_old_one_is_never_current() -> None:
    lisbon, porto = moved()
    variables = reply_variables(inputs(hits=[SearchHit(porto, 1.0), SearchHit(lisbon, 0.9)], earlier={2: lisbon}))
    [line] = variables["memories"].splitlines()
    assert line == ("- [memory:2] (fact, since 2026-05-01) Alice lives in Porto. | earlier: Alice lives in Lisbon. "
                    "(until 2026-05-01)")  # fmt: skip
    assert "[memory:1]" not in variables["memories"] + variables["profile"]
    # In the profile too; and a restatement ("Lisbon" -> "Lisbon, Portugal") is no earlier value.
    restated = replace(porto, content="Alice lives in Lisbon, Portugal.")
    assert "earlier" not in reply_variables(inputs(profile=[restated], earlier={2: lisbon}))["profile"]
    assert "earlier: Alice lives in Lisbon." in reply_variables(inputs(profile=[porto], earlier={2: lisbon}))["profile"]


def test_a_private_earlier_value_stays_out_with_others_on_the_mail_and_the_line_fits_the_budget() -> None:
    lisbon, porto = moved()
    private = replace(lisbon, metadata={"private": True})
    cc = replace(sample_email(), cc=(Address("Bob", "bob@example.org"),))
    shared = reply_variables(inputs(email=cc, hits=[SearchHit(porto, 1.0)], earlier={2: private}))
    assert "Alice lives in Porto." in shared["memories"] and "Lisbon" not in str(shared)
    # The earlier value counts in the budget: with room for the current value only, that is what is shown.
    assert context_block([SearchHit(porto, 1.0)], 20, {2: lisbon}).endswith("Alice lives in Porto.")
    assert "earlier" in context_block([SearchHit(porto, 1.0)], 40, {2: lisbon})


def test_nothing_recalled_is_said_and_anything_recalled_is_not() -> None:
    assert reply_variables(inputs())["recalled_nothing"] is True
    profile_only = reply_variables(inputs(profile=[sample_memory(1, "Alice prefers short answers.", "preference")]))
    assert profile_only["recalled_nothing"] is True  # the profile is always there: it is not a recall
    hit = SearchHit(sample_memory(3, "Alice leads Project Alpha."), 1.0)
    assert reply_variables(inputs(hits=[hit]))["recalled_nothing"] is False
    # A hit already shown in the profile still counts as recalled.
    assert reply_variables(inputs(profile=[hit.memory], hits=[hit]))["recalled_nothing"] is False
    passage = PassageHit(mail(5, "The kickoff is in Lisbon.", "2026-03-14"), 1.0)
    assert reply_variables(inputs(passages=[passage]))["recalled_nothing"] is False
    assert reply_variables(inputs(memory_enabled=False))["recalled_nothing"] is False  # it says why already


def test_the_whole_history_replaces_fragments_when_it_fits_and_retrieval_takes_over_when_not() -> None:
    history = [mail(1, "I started at Acme today.", "2026-01-05"), mail(2, "We adopted a cat, Miso.", "2026-02-10")]
    fragment = PassageHit(mail(2, "We adopted a cat, Miso.", "2026-02-10"), 1.0)
    kb = PassageHit(replace(mail(9, "Expenses: file within 30 days.", "2026-01-01"), document="policy.pdf",
                            ref="p.2"), 0.8)  # fmt: skip
    whole = reply_variables(inputs(history=history, passages=[fragment, kb], token_budget=1200))
    lines = whole["conversations"].splitlines()
    assert whole["conversations_whole"] is True
    assert lines[:2] == ['- [mail:2026-01-05] (they wrote, "News") I started at Acme today.',
                         '- [mail:2026-02-10] (they wrote, "News") We adopted a cat, Miso.']  # fmt: skip
    assert lines[2].startswith("- [doc:policy.pdf p.2]") and len(lines) == 3  # files are still retrieved
    long = [mail(i, "A long mail " + "with many words " * 30, f"2026-01-{i:02d}") for i in range(1, 20)]
    fragments = reply_variables(inputs(history=long, passages=[fragment], token_budget=1200))
    assert fragments["conversations_whole"] is False
    assert fragments["conversations"] == '- [mail:2026-02-10] (they wrote, "News") We adopted a cat, Miso.'
    cc = replace(sample_email(), cc=(Address("Bob", "bob@example.org"),))
    assert "Acme" not in reply_variables(inputs(email=cc, history=history))["conversations"]


def test_the_reply_prompt_dates_the_email_asks_not_to_guess_and_puts_recall_in_the_user_turn() -> None:
    store = PromptStore()
    empty = store.render("reply", reply_variables(inputs()))
    assert "The new email was written on 2026-11-22T09:00:00+00:00" in empty.system
    assert "tell them you do not know" in empty.system
    hit = SearchHit(sample_memory(3, "Alice leads Project Alpha."), 1.0)
    recalled = store.render("reply", reply_variables(inputs(hits=[hit])))
    assert "tell them you do not know" not in recalled.system
    # What was recalled is data, in the user's turn just before the new email (the 1.5B read it there better:
    # docs/architecture.md), never in the system prompt's instructions.
    assert "[memory:3]" in recalled.user and "[memory:3]" not in recalled.system
    assert recalled.user.index("[memory:3]") < recalled.user.index("New email from")
    whole = store.render("reply", reply_variables(inputs(history=[mail(1, "I started at Acme.", "2026-01-05")])))
    assert "Everything this person wrote to you before, oldest first" in whole.user


def test_the_memory_budget_follows_the_models_context_unless_the_operator_set_it(tmp_path: Path) -> None:
    def budget(llm: str, more: str = "") -> int:
        path = tmp_path / "quinn.toml"
        path.write_text(MINIMAL.replace("[llm]\n", f"[llm]\n{llm}") + more, encoding="utf-8")
        return load_config(path, env={"Q_IMAP": "pw"}).memory_tokens()

    assert budget("") == 1200  # nothing known: the default
    assert budget("context_tokens = 4096\n") == int(4096 * MEMORY_CONTEXT_SHARE)
    # A 128k model within the default request budget (24,000), and with a larger one.
    assert budget("context_tokens = 131072\n") == int(24000 * MEMORY_CONTEXT_SHARE)
    assert budget("context_tokens = 131072\n", "[budget]\nrequest_tokens = 100000\n") == int(
        100000 * MEMORY_CONTEXT_SHARE
    )
    assert budget("context_tokens = 4096\n", "[memory]\ntoken_budget = 500\n") == 500
