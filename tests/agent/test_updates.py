"""Updates decided in code (issue 32): which new memory replaces which current one, by its ``about`` key."""

from __future__ import annotations

from dataclasses import replace

from quinn.agent.extract import ExtractedMemory, Extraction, keyed_updates, metadata_for
from quinn.agent.samples import sample_memory
from quinn.agent.updates import clean_about, normalise_about, same_attribute, superseded


def test_keys_are_compared_without_case_fillers_and_punctuation() -> None:
    assert normalise_about("My Home-City") == normalise_about("home city") == "home city"
    assert normalise_about("the employer") == "employer"
    assert normalise_about("  Info ") == "" and normalise_about(None) == "" and normalise_about("other") == ""
    assert clean_about("  Home   City " + "x" * 100) == ("home city " + "x" * 100)[:60].strip()


def test_single_valued_kinds_supersede_on_the_same_attribute() -> None:
    assert same_attribute("fact", "home city", "fact", "my home city")
    assert same_attribute("context", "home city", "personal", "Home city")  # one attribute, filed as two kinds
    assert not same_attribute("fact", "home city", "fact", "employer")
    assert not same_attribute("fact", "info", "fact", "info")  # a vague key names nothing
    assert not same_attribute("fact", None, "fact", None)


def test_list_like_kinds_only_on_exactly_the_same_key_and_type() -> None:
    assert same_attribute("preference", "answer language", "preference", "answer language")
    assert not same_attribute("preference", "the answer language", "preference", "answer language")
    assert not same_attribute("preference", "diet", "fact", "diet")  # a preference never replaces a fact
    assert not same_attribute("goal", "trip", "preference", "trip")


def test_each_current_memory_is_replaced_once_newest_first_and_never_one_already_changed() -> None:
    current = [(9, "fact", "home city"), (4, "fact", "home city"), (5, "fact", "employer")]
    new = [("fact", "home city"), ("fact", "Home City"), ("fact", "employer"), ("goal", "home city")]
    assert superseded(new, current) == [9, 4, 5, None]
    assert superseded([("fact", "employer")], current, taken=[5]) == [None]


def test_a_new_memory_about_a_current_attribute_becomes_its_next_version() -> None:
    lisbon = replace(sample_memory(7, "Alice lives in Lisbon."), metadata={"about": "home city"})
    pinned = replace(sample_memory(8, "Alice works at Acme."), metadata={"about": "employer"}, immutable=True)
    extraction = Extraction(new=[
        ExtractedMemory(content="Alice lives in Porto.", type="fact", about="Home city"),
        ExtractedMemory(content="Alice works at Initech.", type="fact", about="employer"),
        ExtractedMemory(content="Alice has a cat.", type="personal", about="pet"),
    ])  # fmt: skip
    keyed = keyed_updates(extraction, [lisbon, pinned])
    assert [(c.id, c.content) for c in keyed.updated] == [(7, "Alice lives in Porto.")]
    # An operator's pinned memory is never replaced: the new value is kept as a new memory, nothing is lost.
    assert [m.content for m in keyed.new] == ["Alice works at Initech.", "Alice has a cat."]
    assert metadata_for(keyed.updated[0], {})["about"] == "home city"
    assert keyed_updates(extraction, []) == extraction


def test_a_key_shared_with_a_memory_not_near_in_meaning_replaces_nothing() -> None:
    current = [(9, "context", "location"), (4, "fact", "location")]
    near = [lambda mid: False, lambda mid: mid == 4]  # the play is near neither; the move is near 4 only
    assert superseded([("context", "location"), ("fact", "location")], current, near=near) == [None, 4]
