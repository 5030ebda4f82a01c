"""Sensitive data by shape (quinn/memory/sensitive.py): the detector, and the store marking what it writes."""

from __future__ import annotations

import pytest

from quinn.memory import MemoryStore, NewMemory
from quinn.memory.sensitive import detect, iban_ok, luhn_ok


@pytest.mark.parametrize(("text", "kinds"), [
    ("My IBAN is GB82 WEST 1234 5698 7654 32, for the rent.", ("iban",)),
    ("Pay into DE89370400440532013000 please", ("iban",)),
    ("Card 4111 1111 1111 1111, expiry next May", ("card",)),
    ("the Amex is 3782-822463-10005", ("card",)),
    ("SSN 123-45-6789", ("national_id",)),
    ("NINO: AB123456C", ("national_id",)),
    ("Alice's passport number for the trip is X1234567", ("national_id",)),
    ("The wifi password is hunter2", ("credential",)),
    ("The password for the wifi is hunter22.", ("credential",)),  # what it is for, between the word and its value
    ("door code 4411#", ("credential",)),
    ("Alice was diagnosed with diabetes last year", ("health",)),
    ("Alice is allergic to shellfish", ("health",)),
    ("Bob's card 4111111111111111 and his IBAN GB82WEST12345698765432", ("card", "iban")),
])  # fmt: skip
def test_shapes_that_must_never_reach_a_shared_thread_are_found(text: str, kinds: tuple[str, ...]) -> None:
    assert detect(text) == tuple(sorted(kinds))


@pytest.mark.parametrize("text", [
    "Alice lives in Lisbon and has a cat named Miso.",
    "Order number 4111 1111 1111 1112 was shipped",  # 16 digits, but the Luhn check fails
    "IBAN-like GB82 WEST 1234 5698 7654 33",  # one digit off: mod 97 fails
    "Meeting at 10:30 on 2026-03-04 in room 12, call +351 912 345 678",
    "I changed my password yesterday and pinned the note",
    "I forgot the password for the wifi again.",
    "Alice works as a nurse at the city hospital",
    "0000 0000 0000 0000",
])  # fmt: skip
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert detect(text) == ()


def test_the_checksums() -> None:
    assert luhn_ok("79927398713") and not luhn_ok("79927398710")
    assert iban_ok("GB82 WEST 1234 5698 7654 32") and not iban_ok("GB82 WEST 1234 5698 7654 23")


def test_the_store_marks_what_it_writes_and_an_update_never_unmarks(store: MemoryStore) -> None:
    user = "alice@example.test"
    iban, plain = store.add_many([
        NewMemory(user, "Alice's rent goes to GB82 WEST 1234 5698 7654 32.", type="fact", scope="episodic"),
        NewMemory(user, "Alice likes long walks.", type="preference", scope="profile"),
    ])  # fmt: skip
    stored = store.get(iban)
    assert stored is not None and stored.private and stored.metadata["sensitive"] == ["iban"]
    kept = store.get(plain)
    assert kept is not None and not kept.private and "sensitive" not in kept.metadata
    # A new wording without the number is still the private fact it was.
    newer = store.update(iban, "Alice pays her rent by bank transfer.", user_id=user)
    again = store.get(newer)
    assert again is not None and again.private
    # Any writer goes through the same check: a single add too.
    pin = store.add(user, "Alice's bike lock PIN 7391.", scope="episodic", type="fact")
    found = store.get(pin)
    assert found is not None and found.private and found.metadata["sensitive"] == ["credential"]
