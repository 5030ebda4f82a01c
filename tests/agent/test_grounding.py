"""What extraction may store as the person's (agent/grounding.py): the memories a 0.5B model wrote in the memory
QA runs, against the mails they came from. Pure functions: no model, no store."""

from __future__ import annotations

import pytest

from quinn.agent.grounding import GUESSES_SHOWN, Grounding, grounded, guessed

pytestmark = pytest.mark.unit

PARTY = (
    "Hi Quinn,\n\nWe spent Sunday repainting the hallway, which took twice as long as planned. My brother Anouk has "
    "just started a new job as a beekeeper. My desk is on the second floor, next to the kitchen. My next dentist "
    "appointment is on the 14th of March.\n\nCan you recommend how to organise a small birthday party at home?"
    "\n\nBest,\nMaren"
)
MAREN = Grounding.of([PARTY], ["maren-7b793a53@example.test", "Maren Holt"])


@pytest.mark.parametrize(
    "memory",
    [
        "Maren's brother Anouk works as a beekeeper.",  # her name and a verb of the extractor's own
        "Maren Holt's desk is on the 2nd floor.",  # "second" written as a number
        "Maren's dentist appointment is on 2027-03-14.",  # a date normalised, year and all
        "The user spent Sunday repainting the hallway.",
        "We spent Sunday repainting the hallway, which took twice as long as planned.",  # her own sentence
    ],
)
def test_what_the_person_said_is_kept_as_written(memory: str) -> None:
    assert grounded(memory, MAREN) == memory


@pytest.mark.parametrize(
    "memory",
    [
        # The mail's request answered, stored as her preference (QA run, 0.5B).
        "Organize a small birthday party at home by planning the seating arrangement, setting up decorations, "
        "and arranging food items.",
        "To organize a small birthday party at home, you can start by planning the seating arrangement.",
        "I'm sorry, but I can't assist with that.",  # the model's refusal as a personal fact
        "Can you recommend how to organise a small birthday party at home?",  # her question copied
        "Maren's brother Anouk works as a beekeeper in Tromso.",  # a place she never named
        "Maren's desk is on floor 12.",  # a number she never wrote
        "I hope this helps you feel better.",  # talk to the reader, naming nobody
        "2026-11-24T14:14:17+00:00",
    ],
)
def test_what_she_did_not_say_is_dropped(memory: str) -> None:
    assert grounded(memory, MAREN) == ""


def test_a_memory_keeps_only_its_sentences_she_said() -> None:
    memory = "I'm sorry, but I can't assist with that. Maren's brother Anouk is a beekeeper. Use colourful lights."
    assert grounded(memory, MAREN) == "Maren's brother Anouk is a beekeeper."


def test_an_update_may_stand_on_the_wording_it_replaces() -> None:
    moved = Grounding.of(["They moved my locker from the gym to the pool."], ["maren@example.test"])
    update = "Maren's locker, number 616, is at the pool now."
    assert grounded(update, moved) == ""  # 616: not in this mail
    assert grounded(update, moved, also="Maren has locker 616 at the gym.") == update


def test_a_memory_naming_the_person_may_say_it_in_other_words() -> None:
    thesis = Grounding.of(["I'm in Lisbon until Friday; still working on my thesis."], ["alice@example.org"])
    assert grounded("Alice wants to finish her thesis draft.", thesis) == "Alice wants to finish her thesis draft."
    assert grounded("Finish the thesis draft with a clear outline and daily goals.", thesis) == ""  # advice
    assert grounded("Alice likes chickpea curry.", thesis) == ""  # nothing of hers


def test_invented_answers_to_her_own_questions_are_dropped() -> None:
    """Seen: "What brand is the car I bought to replace the old one?" became "... is a BMW"."""
    asked = Grounding.of(["What brand is the car I bought to replace the old one? Please keep it short."], [])
    assert grounded("The car I bought to replace the old one is a BMW.", asked) == ""
    assert grounded("The locker number is 616.", Grounding.of(["Which locker number is mine?"], [])) == ""


def test_a_memory_may_call_the_person_by_their_address() -> None:
    """The digits of an address are no number the memory invented (seen: "bob-4d2f@example.test grows ...")."""
    tomatoes = Grounding.of(["My tomatoes, named Rosso, are ripening."], ["bob-bd4388f6@example.test"])
    assert grounded("bob-bd4388f6@example.test grows tomatoes named Rosso.", tomatoes) != ""
    assert grounded("bob-bd4388f6@example.test grows 12 tomatoes.", tomatoes) == ""


def test_a_review_of_the_mail_it_came_from_keeps_nothing_that_is_quinns() -> None:
    """A session review's memories in the QA run at 9b5cc9a, against that session's mails: Quinn's suggestion, a
    list's lead-in and Quinn as the one asking, though most of their words are the person's."""
    maren = Grounding.of(["What are some good habits for saving a little money each month? I could set a "
                          "budget.", "Could you help me write a polite note asking a neighbour to trim their hedge?"],
                         ["maren-9e0cbecc@example.test"])  # fmt: skip
    for memory in ("To save a little money each month, consider the following habits:",
                   "The assistant suggested setting a budget for saving a little money each month.",
                   "Quinn is asking a neighbour to trim their hedge."):  # fmt: skip
        assert grounded(memory, maren) == "", memory
    assert grounded("Maren wants to save a little money each month.", maren) != ""


def test_an_answer_to_her_question_is_not_hers_though_it_repeats_most_of_its_words() -> None:
    """The 1.5B pilot of bench/long_memory stored the answer to the mail's question as her fact, after every mail
    that asked it: half its words are the question's, the rest (what to pack) the model's."""
    hiking = Grounding.of(["I finally finished the novel everyone kept recommending. Please always answer me in "
                           "bullet points.\n\nWhat should I pack for a weekend of hiking in changeable weather?"],
                          ["mia@example.test"])  # fmt: skip
    answer = "I should pack a rain jacket, a hat, and hiking boots for the weekend of hiking in changeable weather."
    assert grounded(answer, hiking) == ""
    # The pilot again after the first fix, two words of its own: still its answer.
    assert (
        grounded("I should pack a raincoat and a jacket for the weekend of hiking in changeable weather.", hiking) == ""
    )
    assert grounded("Mia is going hiking for a weekend.", hiking) != ""  # what the question tells of her
    assert grounded("Mia finished the novel everyone kept recommending.", hiking) != ""


PROMPT = (
    "You are Quinn, an email assistant.\n\nMemories that may be relevant to this email:\n"
    "- [memory:4] (stated, since 2026-03-02) I drive a dark green Mazda and bank with the credit union.\n"
    '- [mail:2027-04-09] (they wrote, "Boiler") The boiler service is on 2027-04-09 at 10:30.\n\n'
    "New email from Ingrid Berg <ingrid@example.org> on 2026-11-29:\nWho is my dentist? And when is the boiler "
    "service? Ross's crush, too."
)


@pytest.mark.parametrize(
    ("reply", "names"),
    [
        ("Hi Ingrid,\n\nYour dentist is Dr. Smith.", ["Dr. Smith"]),
        ("I have my savings account with Bank of America.", ["Bank of America"]),
        ("The car you bought is a Toyota Camry, 2019 model, for 14,500.", ["Toyota Camry", "14", "500"]),
        ("Hi Ingrid,\n\nYour car is a dark green Mazda; you bank with the credit union.", []),
        ("The boiler service is on April 9, 2027 at 10:30.", []),  # the date written another way
        ("Ross's crush was on Rachel.", ["Rachel"]),  # the possessive is the prompt's word
        ("Hi Anouk, your dentist is Dr. Smith.", ["Anouk", "Dr. Smith"]),  # "Hi" opens the line: no name's part
        ("Tips:\n1. Sleep early: Try to rest.\n- Avoid screens. Some people read.", []),  # openers, not names
        ("I'm sorry, I don't know who your dentist is.\n\nBest,\nQuinn", []),
    ],
    ids=[
        "title",
        "bank",
        "car-and-numbers",
        "restated",
        "date-reworded",
        "possessive",
        "greeting",
        "list-openers",
        "abstains",
    ],
)
def test_what_a_reply_names_that_its_prompt_does_not(reply: str, names: list[str]) -> None:
    assert guessed(reply, PROMPT, ["ingrid", "berg", "ross"]) == names


@pytest.mark.parametrize(
    "reply",
    [
        "The capital of Australia is Canberra.",
        "Pride and Prejudice was written by Jane Austen.",
        "Rachel's crush was on Ross.",
        "You could see Sunflowers at the Van Gogh Museum.",
        "I recommend the Oslo Fjord trail for your weekend.",
    ],
    ids=["capital", "author", "someone-not-on-the-mail", "suggestion", "recommendation"],
)
def test_a_sentence_about_no_one_on_the_mail_or_a_suggestion_guesses_nothing(reply: str) -> None:
    """Told of the names in these, the 1.5B took back even the capital of Australia, and a museum it suggested."""
    assert guessed(reply, PROMPT, ["ingrid", "berg"]) == []


def test_the_names_a_reply_brings_are_listed_once_and_bounded() -> None:
    reply = " ".join(f"I met Alpha{n} and Alpha{n} again." for n in range(20))
    found = guessed(reply, PROMPT, ["ingrid"])
    assert len(found) == GUESSES_SHOWN and len(set(found)) == GUESSES_SHOWN
