"""The long-memory benchmark's real people (bench/long_memory/real_friends.py, issue 32), built from a tiny sample
in FriendsQA's shape written here (the real source is a mirror CI does not have): the person's mails in time
order with valid thread links, questions only where the answer is the person's own words (what Quinn keeps of
the mail), gold patterns that accept the answer and not an unrelated or echoing reply, and a file that the
benchmark's loader reads."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from bench.long_memory import real_friends
from bench.long_memory.data import ABSENCE
from bench.long_memory.real import load
from bench.memory_qa_data import answered
from quinn.mailbox import parse_email
from tests.lab.inprocess import build_mail

MONICA, RACHEL, ROSS = "Monica Geller", "Rachel Green", "Ross Geller"
LONG = "I spent the whole afternoon cleaning the kitchen cupboards and sorting every spice jar by size and date " * 3


def scene(title: str, lines: list[tuple[str, str]], qas: list[dict[str, Any]]) -> dict[str, Any]:
    """One scene record as FriendsQA writes it (tokenised text, the odd ``utterances:`` key)."""
    utterances = [{"uid": n, "speakers": [who], "utterance": text} for n, (who, text) in enumerate(lines)]
    return {"title": title, "paragraphs": [{"utterances:": utterances, "qas": qas}]}


def qa(qid: str, question: str, *answers: tuple[str, int], speaker: bool = False) -> dict[str, Any]:
    return {"id": qid, "question": question, "answers": [
        {"answer_text": text, "utterance_id": uid, "inner_start": 0, "inner_end": 0, "is_speaker": speaker}
        for text, uid in answers]}  # fmt: skip


SAMPLE = [
    scene("s01_e21_c01", [("#NOTE#", "[ Scene : Central Perk . ]"),
                          (MONICA, "My brother found a job at the museum in Scranton ."),
                          (RACHEL, "Which museum ?"), (MONICA, "The natural history one , he 's thrilled .")],
          [qa("s01_e21_c01_Where", "Where is the museum Ross works at ?", ("Scranton", 1)),
           qa("s01_e21_c01_What", "What does Rachel ask about ?", ("Which museum", 2))]),
    scene("s01_e22_c03", [(MONICA, LONG), (ROSS, "You and your spices ."), (MONICA, LONG),
                          (ROSS, "Anyway , the video ?"), (MONICA, "The camera adds ten pounds , everyone knows .")],
          [qa("s01_e22_c03_How", "How many pounds does the camera add according to Monica ?", ("ten pounds", 4))]),
    scene("s02_e21_c01", [(RACHEL, "When did you go skiing ?"), (MONICA, "Last February , in Vermont .")],
          [qa("s02_e21_c01_When", "When did Monica go skiing ?", ("Last February", 1), ("February", 1))]),
    scene("s02_e22_c01", [(MONICA, "I think the lasagna needs more basil ."), (ROSS, "It 's fine .")], []),
    scene("s03_e21_c01", [(MONICA, "I named the kitten Tofu ."), (RACHEL, "That 's a weird name ."),
                          (MONICA, "We could call the baby Jamie or Jordie .")],
          [qa("s03_e21_c01_What", "What is the name of Monica 's kitten ?", ("Tofu", 0)),
           qa("s03_e21_c01_Who", "Who thinks the name is weird ?", ("Rachel Green", 1), speaker=True),
           qa("s03_e21_c01_Which", "Which baby name does Monica want ?", ("the baby Jamie", 2), ("Jordie", 2))]),
    scene("s03_e22_c01", [(ROSS, "Are you coming ?"), (MONICA, "Give me a minute , I 'm ironing the curtains .")], []),
    scene("s01_e23_c01", [(RACHEL, "Monica went skiing in Vermont without us ."), (ROSS, "Typical .")],
          [qa("s01_e23_c01_Where", "Where did Monica go skiing ?", ("Vermont", 0))]),
    scene("s03_e23_c01", [(RACHEL, "I lost my turquoise umbrella at the laundromat ."), (ROSS, "Turquoise , again ?")],
          [qa("s03_e23_c01_What", "What colour is Rachel 's umbrella ?", ("turquoise", 0))]),
]  # fmt: skip


def built(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    [monica] = real_friends.build(SAMPLE, people=1, questions=4, mails=(4, 30))
    path = tmp_path / "real.json"
    path.write_text(json.dumps({"source": "sample", "people": [monica]}))
    return monica, path


def test_a_character_becomes_a_person_whose_mails_hold_the_answers_in_their_own_words(tmp_path: Path) -> None:
    monica, path = built(tmp_path)
    assert (monica["first"], monica["last"]) == ("Monica", "Geller")  # the character with the most answers
    mails = monica["mails"]
    dates = [m["date"] for m in mails]
    assert dates == sorted(dates) and len(mails) == 7
    for i, mail in enumerate(mails):  # every thread starts at its own first mail; replies follow it
        assert mail["thread"] <= i and mails[mail["thread"]]["thread"] == mail["thread"]
        assert mail["subject"].startswith("Re: ") == (mail["thread"] != i)
    [spices] = [i for i, m in enumerate(mails) if "spice jar" in m["body"]]
    own = mails[spices]["body"].split("\n\nMonica")[0]
    assert own.count("spice jar") == 6 and "your spices" not in own  # two runs in a mail, the line between left out
    assert mails[spices + 1]["thread"] == spices and "ten pounds" in mails[spices + 1]["body"]  # past 100 words
    assert "> Anyway, the video?" in mails[spices + 1]["body"]  # the line before a mail's first run, quoted
    assert "[ Scene" not in json.dumps(mails) and "Scene :" not in json.dumps(mails)  # stage directions

    asked = {q["kind"]: q for q in monica["questions"]}
    # An answer in Rachel's line, a speaker-name answer, and workers who disagree are not asked.
    assert set(asked) == {"s01_e21_c01_Where", "s01_e22_c03_How", "s02_e21_c01_When", "s03_e21_c01_What",
                          "s03_e23_c01_What"}  # fmt: skip
    assert asked["s02_e21_c01_When"]["category"] == "temporal"
    assert asked["s01_e21_c01_Where"]["category"] == "long_ago" and asked["s03_e21_c01_What"]["category"] == "single"
    absent = asked.pop("s03_e23_c01_What")  # Rachel's scene, which Monica never saw (not Vermont: she said it)
    assert absent["category"] == "absence" and tuple(absent["gold"]) == ABSENCE and not absent["evidence"]
    assert "turquoise" not in json.dumps(mails).lower()

    unrelated = ["Thanks for asking; here is my short answer.", "I went to the shop with my sister on Tuesday.",
                 "We met on 2025-03-10 at 10:45 in the morning."]  # fmt: skip
    for q in asked.values():
        assert q["text"].startswith("Something from our earlier conversations: ")
        gold = tuple(q["gold"])
        assert answered(q["answer"], gold)
        assert not answered(q["text"], gold)  # a reply that echoes the question does not score
        assert not any(answered(s, gold) for s in unrelated)
        for i in q["mails"]:  # what Quinn keeps of the mail (the person's words, no quote) holds the answer
            raw = build_mail("monica@example.test", "q@example.test", mails[i]["subject"], mails[i]["body"])[1]
            kept = parse_email(raw).text
            assert answered(kept, gold) and answered(kept, tuple(q["evidence"]))
            assert "wrote:" not in kept and not re.search(r"(?m)^>", kept)
    assert answered("The camera adds 10 pounds, she said.", tuple(asked["s01_e22_c03_How"]["gold"]))

    [person] = load(path)  # the benchmark's loader reads it
    assert person.source == "real" and len(person.mails) == 7 and len(person.questions) == 5
    assert {p.category for p in person.questions} == {"long_ago", "temporal", "single", "absence"}


def test_only_answers_in_the_persons_own_lines_that_workers_agree_on_are_candidates() -> None:
    scenes = real_friends.scenes_from(SAMPLE)
    df = real_friends.doc_freq(scenes)
    pool = {q.qid for q in real_friends.candidates(scenes, MONICA, df)}
    # not: an answer in Rachel's line, a speaker's name, two workers who disagree (Jamie / Jordie)
    assert pool == {"s01_e21_c01_Where", "s01_e22_c03_How", "s02_e21_c01_When", "s03_e21_c01_What"}
    assert {q.qid for q in real_friends.candidates(scenes, RACHEL, df)} == {"s01_e21_c01_What", "s01_e23_c01_Where",
                                                                           "s03_e23_c01_What"}  # fmt: skip


def test_gold_needs_most_of_the_answers_words_and_always_its_rarest() -> None:
    df = Counter({"high": 9, "school": 7, "reunion": 1})
    gold, evidence = real_friends.patterns(("high", "school", "reunion"), df)
    assert answered("At your high school reunions, I think.", gold) and answered("the reunion of your school", gold)
    assert not answered("Back in high school.", gold) and not answered("A reunion, maybe?", gold)
    assert answered("we went to the school reunion", evidence) and not answered("school " + "x" * 200 + " reunion",
                                                                                 evidence)  # fmt: skip


def test_without_the_fetched_source_the_converter_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"FriendsQA is not fetched.*bench/data/README\.md"):
        real_friends.main(["--mirror", str(tmp_path), "--out", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
