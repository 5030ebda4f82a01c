"""What "forget that …" reaches and what it keeps, and one fact per memory (issue 35): the pure text rules of
agent/forgetting.py and agent/facts.py, on the sentences the issue reproduced."""

from __future__ import annotations

import pytest

from quinn.agent.facts import facts
from quinn.agent.forgetting import Forgetting

MERGED = "Alice lives in Lisbon, has a dog called Biscuit and is allergic to peanuts."


@pytest.mark.parametrize(("request_", "text", "left"), [
    ("that I have a dog", MERGED, "Alice lives in Lisbon and is allergic to peanuts."),
    ("that I have a dog", "Alice has a dog called Biscuit, lives in Lisbon and is allergic to peanuts.",
     "Alice lives in Lisbon and is allergic to peanuts."),
    ("that I live in Berlin", "Alice prefers a weekend trip by train in Berlin and works as a pharmacist.",
     "Alice works as a pharmacist."),
    ("that I live in Berlin", 'Summary of the email thread "Weekend": Alice lives in Berlin and wants a lake.',
     'Summary of the email thread "Weekend": Alice wants a lake.'),
    ("that I live in Berlin", "Alice lives in Berlin.", ""),
    ("that I live in Berlin", "Alice is a pharmacist. She lives in Berlin.", "Alice is a pharmacist."),
])  # fmt: skip
def test_a_text_loses_the_fact_and_keeps_the_rest(request_: str, text: str, left: str) -> None:
    fact = Forgetting.of(request_)
    assert fact.mentions(text) and fact.without(text) == left


def test_a_text_that_does_not_mention_the_fact_is_left_alone() -> None:
    assert Forgetting.of("that I live in Berlin").rewrite("Alice likes lakes.") is None
    old_address = Forgetting.of("my old address")
    assert not old_address.mentions("Alice's email address is alice@example.org")  # "old" is missing
    assert old_address.mentions("Alice's old address was Rua 5")


@pytest.mark.parametrize(("merged", "split"), [
    (MERGED, ["Alice lives in Lisbon.", "Alice has a dog called Biscuit.", "Alice is allergic to peanuts."]),
    ("Alice lives in Lisbon and Bob lives in Porto.", ["Alice lives in Lisbon.", "Bob lives in Porto."]),
    ("Alice likes tea and coffee.", ["Alice likes tea and coffee."]),
    ("Alice works at Acme, a startup in Berlin.", ["Alice works at Acme, a startup in Berlin."]),
    ("Alice has two kids, Tom and Mia.", ["Alice has two kids, Tom and Mia."]),
    ("The meeting is on Monday, and the room is 4B.", ["The meeting is on Monday, and the room is 4B."]),
])  # fmt: skip
def test_one_fact_per_memory_splits_only_the_clear_case(merged: str, split: list[str]) -> None:
    assert facts(merged) == split


def test_the_persons_own_name_is_not_what_a_forget_is_about() -> None:
    memories = ["Alice lives in Berlin.", "Alice is a pharmacist.", "Alice likes lakes."]
    fact = Forgetting.of("that Alice lives in Berlin").beside(memories)
    assert fact.names == {"berlin"} and [m for m in memories if fact.mentions(m)] == ["Alice lives in Berlin."]
