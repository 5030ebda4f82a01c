"""The long-memory benchmark (bench/long_memory, issue 32): its generated people have the shape the issue asks
for, the real-people hook reads its format and refuses what is not, and ``--fast`` runs the whole harness through
the lab on the scripted model: history imported with `quinn import`, a forget request sent live, every question
asked under the four conditions, a report written, parts merged.

Nothing here asserts a model's quality (the scripted reply never holds an answer); what is asserted are properties
of the harness and of Quinn: the import stored the history, a stateless prompt holds no answer, the recent
history is cut to the context, BM25 finds passages, and what Quinn stored reaches Quinn's own prompt.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench.long_memory import __main__ as long_memory
from bench.long_memory.data import KINDS, build, said_in
from bench.long_memory.real import RealPeopleError, load
from bench.long_memory.run import bm25_top
from quinn.agent.context import ThreadMessage
from tests.lab.llm_server import ScriptedLLM, Text


def test_generated_people_have_long_histories_and_every_kind_of_question() -> None:
    people = build()
    assert len(people) == 3
    for person in people:
        dates = [m.date for m in person.mails]
        assert len(person.mails) >= 100 and dates == sorted(dates) and (dates[-1] - dates[0]).days >= 730
        assert len({m.thread for m in person.mails}) < len(person.mails)  # some threads have replies
        assert any(m.attachments for m in person.mails)
        assert {q.category for q in person.questions} == set(KINDS)
        for q in person.questions:
            if q.category in ("absence", "preference", "forgotten") or q.kind == "move_when":
                continue  # never said / a wish / forgotten / the move mail's date
            assert said_in(person, q), (person.first, q.kind)
            if q.category in ("updated", "knock_on"):  # the old value was said too, earlier
                assert q.stale and said_in(person, type(q)(**{**q.__dict__, "gold": q.stale}))
        forgotten = [q for q in person.questions if q.category == "forgotten"]
        assert len(forgotten) == 1 and person.live and "forget that" in person.live[0]
    assert [m.body for p in build() for m in p.mails] == [m.body for p in people for m in p.mails]  # deterministic


def test_real_people_are_read_from_their_file_and_a_bad_file_is_named(tmp_path: Path) -> None:
    good = {"people": [{"first": "Dana", "mails": [
        {"date": "2023-04-01T09:00:00+00:00", "subject": "Hi", "body": "I live in Porto.", "thread": 0},
        {"date": "2023-04-02T09:00:00+00:00", "subject": "Re: Hi", "body": "And I like tea.", "thread": 0}],
        "questions": [{"category": "single", "text": "Where do I live?", "gold": ["\\bporto\\b"]}]}]}  # fmt: skip
    path = tmp_path / "real.json"
    path.write_text(json.dumps(good))
    [dana] = load(path)
    assert dana.source == "real" and len(dana.mails) == 2 and dana.questions[0].evidence == ("\\bporto\\b",)
    good["people"][0]["questions"][0]["category"] = "gossip"
    path.write_text(json.dumps(good))
    with pytest.raises(RealPeopleError, match=r"people\[0\].*'gossip' is not one of"):
        load(path)
    path.write_text("{}")
    with pytest.raises(RealPeopleError, match='no "people" list'):
        load(path)


def test_the_parts_of_a_full_run_are_each_one_person_in_order_and_none_is_missed(tmp_path: Path) -> None:
    from bench.long_memory.run import people_of

    real = {"people": [{"first": name, "mails": [
        {"date": "2023-04-01T09:00:00+00:00", "subject": "Hi", "body": f"I am {name}.", "thread": 0}],
        "questions": [{"category": "single", "text": "Who am I?", "gold": [name]}]}
        for name in ("Phoebe", "Monica", "Ross")]}  # fmt: skip
    path = tmp_path / "real.json"
    path.write_text(json.dumps(real))
    p = long_memory.parser()

    def person(part: int) -> str:
        args = p.parse_args(["--part", str(part), "--mails", "30", "--real", str(path)])
        long_memory.apply_part(p, args)
        [one] = people_of(args)
        return one.first

    everyone = [person.first for person in build(mails=30)] + ["Phoebe", "Monica", "Ross"]
    assert [person(n) for n in range(1, long_memory.PARTS + 1)] == everyone
    with pytest.raises(SystemExit):  # a real person's part without the real people's file
        long_memory.apply_part(p, p.parse_args(["--part", "4"]))
    with pytest.raises(SystemExit):
        p.parse_args(["--part", str(long_memory.PARTS + 1)])
    with pytest.raises(SystemExit):  # --part with what it sets itself: refused, not overridden
        long_memory.apply_part(p, p.parse_args(["--part", "2", "--skip", "3"]))


def test_bm25_ranks_the_passage_that_shares_the_question_words() -> None:
    history = [ThreadMessage("a", f"2024-01-0{n}", text) for n, text in enumerate(
        ["We spent Sunday repainting the hallway.", "My pottery class is on Tuesday evenings.",
         "The weather has been all over the place."], start=1)]  # fmt: skip
    [top] = bm25_top("Which evening is my pottery class now?", history, 1)
    assert "pottery" in top.body and top.date == "2024-01-02"


def test_the_fast_mode_runs_the_whole_harness_through_the_lab(tmp_path: Path, dovecot) -> None:
    result = long_memory.main(["--fast", "--out", str(tmp_path), "--name", "fast", "--n-ctx", "2048"])
    assert (tmp_path / "fast.md").read_text().startswith("# Long memory")
    assert (tmp_path / "fast.png").read_bytes().startswith(b"\x89PNG")
    rows = result["per_question"]
    asked = len({r["question"] for r in rows})
    assert Counter(r["condition"] for r in rows) == {c: asked for c in ("quinn", "no_memory", "recent_history",
                                                                        "bm25")}  # fmt: skip
    assert {r["category"] for r in rows} == set(KINDS)
    [imported] = result["history"]["imports"]
    assert imported["mails"] == 36 and imported["outcomes"] == {"imported": 36}  # the history went through import
    # Quinn learns the person's own words by default here (--learn own_words): memories with no extraction call.
    assert result["model"]["learn"] == "own_words" and result["model"]["max_tool_rounds"] == 0
    assert imported["extraction_calls"] == 0 and imported["memories_new"] > 0
    assert result["history"]["memories_per_person"][0] > 0
    s = result["summary"]
    assert s["no_memory"]["overall"]["recall_in_prompt"] == 0  # a stateless prompt holds no answer
    assert s["recent_history"]["overall"]["tokens_in"] <= 2048  # the recent history is cut to the context
    assert s["quinn"]["overall"]["recall_in_prompt"] > 0  # what Quinn stored reaches its prompt
    assert s["bm25"]["overall"]["recall_in_prompt"] > 0
    assert all(r["tokens_in"] > 0 for r in rows)
    for figure in ("accuracy", "stale_rate", "forget_leaks", "forget_leaks_in_prompt", "seconds"):
        assert figure in s["quinn"]["overall"]

    # Parts of a run merge into one result; a person in two parts, or a file that is no result, is refused.
    merged = long_memory.main(["--merge", str(tmp_path / "fast.json"), "--out", str(tmp_path), "--name", "all",
                               "--no-plot"])  # fmt: skip
    assert merged["data"]["people"] == 1 and merged["summary"] == result["summary"]
    with pytest.raises(SystemExit, match="more than one part"):
        long_memory.main(["--merge", str(tmp_path / "fast.json"), str(tmp_path / "fast.json"), "--out",
                          str(tmp_path), "--name", "twice", "--no-plot"])  # fmt: skip
    with pytest.raises(SystemExit):
        long_memory.main(["--merge", str(tmp_path / "fast.md"), "--out", str(tmp_path), "--name", "bad"])


def test_a_multi_session_chat_becomes_threads_of_the_persons_own_mails() -> None:
    from bench.long_memory.real import person_from_sessions
    from quinn.mailbox import parse_email
    from tests.lab.inprocess import build_mail

    sessions = [
        {"date": "2023-05-01T18:00:00+00:00", "turns": [
            {"speaker": "Dana", "text": "I just moved to Porto!"}, {"speaker": "Sam", "text": "Wow, how is it?"},
            {"speaker": "Dana", "text": "Rainy."}, {"speaker": "Dana", "text": "But I love the tram."}]},
        {"date": "2023-06-11T09:00:00+00:00", "turns": [
            {"speaker": "Sam", "text": "Did you find a job?"}, {"speaker": "Dana", "text": "Yes, at a bakery."}]},
    ]  # fmt: skip
    dana = person_from_sessions("Dana", "Reyes", "Dana", sessions, [])
    assert [m.thread for m in dana.mails] == [0, 0, 2] and dana.source == "real"
    assert dana.mails[1].subject.startswith("Re: ") and dana.mails[1].date > dana.mails[0].date
    # What Quinn keeps of a mail is the person's own words: the other side's quoted turn is not theirs.
    raw = build_mail("dana@example.test", "q@example.test", dana.mails[1].subject, dana.mails[1].body)[1]
    text = parse_email(raw).text
    assert "Rainy. But I love the tram." in text and "how is it" not in text


def test_the_replay_moves_only_the_recalled_lines_and_refuses_a_prompt_with_none_in_its_system_message() -> None:
    from bench.long_memory.replay import ReplayError, moved

    system = (
        "You are Quinn.\nWhen the email asks about something the person told you and nothing below says it, say "
        "that you do not know.\n\n\n\nMemories that may be relevant to this email, oldest first:\n- [memory:4] "
        "(they wrote on 2025-03-19) We moved to Lund.\n\n\n\nFrom your past emails with this person, oldest first:\n"
        '- [mail:2025-03-19] (they wrote, "News") We moved to Lund.\n\n\n\nRecent context with this person:\n'
        "last conversation summary: a move."
    )
    user = 'New email from Ingrid on 2026-11-28, subject "Q":\n\nWhere do I live?'
    new_system, new_user = moved(system, user)
    assert "[memory:4]" not in new_system and "[mail:2025-03-19]" not in new_system
    assert new_system.startswith("You are Quinn.") and new_system.endswith("last conversation summary: a move.")
    assert new_user.startswith("Memories that may be relevant") and new_user.endswith(user)
    assert new_user.index("[memory:4]") < new_user.index("[mail:2025-03-19]") < new_user.index("New email from")
    with pytest.raises(ReplayError, match="nothing to move"):
        moved(new_system, new_user)


def test_the_other_ablations_drop_one_thing_each_wherever_the_template_put_the_recall() -> None:
    from bench.long_memory.replay import ABSTAIN_LINE, ReplayError, without_abstain_line, without_memories

    system = f"You are Quinn.{ABSTAIN_LINE}\n\nRecent context with this person:\nlast conversation summary: a move."
    user = (
        "What you know about ingrid@example.test (their profile and preferences):\n- [memory:1] (identity) Ingrid\n\n"
        "Memories that may be relevant to this email, oldest first:\n- [memory:4] (they wrote on 2025-03-19) We "
        "moved to Lund.\n\nFrom your past emails with this person, oldest first:\n- [mail:2025-03-19] We moved to "
        'Lund.\n\nNew email from Ingrid on 2026-11-28, subject "Q":\n\nWhere do I live?'
    )
    same_system, short_user = without_memories(system, user)
    assert same_system == system and "[memory:4]" not in short_user and "Memories that" not in short_user
    assert short_user == user.replace(user[user.index("\n\nMemories") : user.index("\n\nFrom your")], "")
    # At the end of the recall the section stops at the email itself.
    last = user.replace(user[user.index("\n\nFrom your") : user.index("\n\nNew email")], "")
    assert without_memories(system, last)[1].endswith("(identity) Ingrid\n\nNew email from Ingrid on 2026-11-28, "
                                                      'subject "Q":\n\nWhere do I live?')  # fmt: skip
    assert without_memories(system, short_user) == (system, short_user)  # a prompt with none stays as it was
    # The template strips the blank lines before the first section: a user message may open with the memories.
    opening = user[user.index("Memories that") :]
    assert without_memories(system, opening)[1] == opening[opening.index("From your past") :]
    plain, same_user = without_abstain_line(system, user)
    assert same_user == user and "do not know" not in plain and plain.endswith("summary: a move.")
    with pytest.raises(ReplayError, match="nothing to drop"):
        without_abstain_line(plain, user)


def test_the_layout_ablations_change_only_the_past_mail_or_the_memories_it_repeats() -> None:
    from bench.long_memory.replay import passages_as_blocks, without_repeated_memories, writer_named

    system = "You are Quinn."
    user = (
        "Memories that may be relevant to this email, oldest first:\n- [memory:4] (they wrote on 2025-03-19) We "
        "moved to Lund.\n- [memory:5] (they wrote on 2025-04-02) The tram is slow. | earlier: The bus is slow. "
        "(until 2025-04-02)\n\nFrom your past emails with this person, oldest first:\n"
        '- [mail:2025-03-19] (they wrote, "News (big)") Hi! We moved to Lund. Rainy.\n'
        '- [doc:plan.pdf p.2] (a file they sent on 2025-03-20, "Plan") Rent: 900 EUR.\n\n'
        'New email from Ingrid on 2026-11-28, subject "Q":\n\n- [mail:2020-01-01] (not a passage) where?'
    )
    blocks = passages_as_blocks(system, user)[1]
    assert '[mail:2025-03-19] (they wrote, "News (big)"):\nHi! We moved to Lund. Rainy.\n\n' in blocks
    assert '[doc:plan.pdf p.2] (a file they sent on 2025-03-20, "Plan"):\nRent: 900 EUR.\n' in blocks
    assert blocks[: blocks.index("From your")] == user[: user.index("From your")]  # the memories as they were
    assert blocks.endswith(user[user.index("\n\nNew email") :].lstrip("\n"))  # the email too
    # Memory 4 is in the passage word for word: dropped; memory 5 (and its earlier value) is not: kept.
    kept = without_repeated_memories(system, user)[1]
    assert "[memory:4]" not in kept and "- [memory:5] (they wrote on 2025-04-02) The tram is slow. | earlier:" in kept
    assert kept.replace(kept[kept.index("- [memory:5]") :], "") == user[: user.index("- [memory:4]")]
    # Every memory repeated: the list goes, heading and all.
    repeated = user.replace("The tram is slow. | earlier: The bus is slow. (until 2025-04-02)", "Rainy.")
    assert "Memories that" not in without_repeated_memories(system, repeated)[1]
    # The writer named where the recall says "they wrote" (the first name of the new email's sender), nowhere else.
    sent = user.replace("New email from Ingrid on", "New email from Ingrid Berg <ingrid@example.test> on")
    named = writer_named(system, sent)[1]
    assert "(Ingrid wrote on 2025-03-19) We moved" in named and "(Ingrid wrote on 2025-04-02)" in named
    assert '(Ingrid wrote, "News (big)")' in named and "they wrote" not in named.replace("a file they sent", "")
    assert named.endswith(sent[sent.index("\n\nNew email") :])
    assert writer_named(system, user) == (system, user)  # no address in the From line: as it was


def test_the_ranked_ablations_keep_or_reorder_the_recalled_lines_by_quinns_ranking() -> None:
    """``search_k_N`` keeps the best of the lines the prompt showed (the ranking may hold more: what became
    eligible after the prompt was sent), ``best_first``/``best_last`` show the same lines in the ranking's order
    and say so in the heading; nothing outside the recall sections moves."""
    from bench.long_memory.replay import AGAIN_HEAD, Ranking, best_again, by_rank, query_of, top_ranked

    passage = '- [mail:2025-03-19] (they wrote, "News") We moved to Lund.'
    other = '- [mail:2024-01-02] (they wrote, "Hi") Rainy.'
    user = (
        "Memories that may be relevant to this email, oldest first (cite):\n"
        + "\n".join(f"- [memory:{i}] (they wrote on 2025-0{i}-01) Fact {i}." for i in range(1, 8))
        + f"\n\nFrom your past emails with this person, oldest first (cite):\n{other}\n{passage}\n\n"
        'New email from Ingrid Berg <ingrid@example.test> on 2026-11-28, subject "Q":\n\nWhere do I live?\n\n'
        "Write the reply body only."
    )
    assert query_of(user) == ("ingrid@example.test", "Q\nWhere do I live?")
    ranking = Ranking((9, 7, 2, 5, 1, 3, 4, 6), ("- [mail:2026-01-01] (a later question)", passage, other))
    system, kept = top_ranked("You are Quinn.", user, ranking, 1)  # 2 memories, 1 passage
    assert system == "You are Quinn."
    assert "[memory:7]" in kept and "[memory:2]" in kept and "[memory:5]" not in kept and "[memory:9]" not in kept
    assert passage in kept and other not in kept and kept.endswith(user[user.index("\n\nNew email") :])
    last = by_rank("You are Quinn.", user, ranking, best_last=True)[1]
    lines = [line for line in last.split("\n") if line.startswith("- [")]
    assert lines[:7] == [f"- [memory:{i}] (they wrote on 2025-0{i}-01) Fact {i}." for i in (6, 4, 3, 1, 5, 2, 7)]
    assert lines[7:] == [other, passage] and "most relevant last" in last and "oldest first" not in last
    first = by_rank("You are Quinn.", user, ranking, best_last=False)[1]
    assert next(line for line in first.split("\n") if line.startswith("- [")).startswith("- [memory:7]")
    again = best_again("You are Quinn.", user, ranking)[1]
    head, block = again.split(AGAIN_HEAD + "\n")
    assert head == user[: user.index("New email")]  # the lists as sent
    assert block.split("\n")[:4] == [other, passage, "- [memory:2] (they wrote on 2025-02-01) Fact 2.",
                                      "- [memory:7] (they wrote on 2025-07-01) Fact 7."]  # fmt: skip
    assert block.endswith(user[user.index("New email") :])


def test_every_replay_variant_has_a_title_and_says_what_it_changes() -> None:
    from bench.long_memory.replay import CHANGED, CHANGES, FOLLOW_UPS, RANKED, RANKED_FOLLOW_UPS, TITLES

    variants = {*CHANGES, *FOLLOW_UPS, *RANKED, *RANKED_FOLLOW_UPS}
    assert variants == set(TITLES) == set(CHANGED)  # else the replay dies writing its table, after the model ran


def test_the_unsure_follow_up_names_back_the_recalled_lines_that_share_the_emails_words() -> None:
    from bench.long_memory.replay import UNSURE_NOTE, unsure_sent_back

    pottery = "- [memory:4] (they wrote on 2025-05-02) My pottery class moved to Wednesday evenings."
    user = (
        "Memories that may be relevant to this email, oldest first:\n"
        "- [memory:3] (they wrote on 2025-04-01) I like the class at the gym.\n"
        f"{pottery}\n"
        "- [memory:5] (they wrote on 2025-06-01) We adopted a cat.\n\n"
        'New email from Ingrid Berg <ingrid@example.test> on 2026-11-28, subject "Q":\n\n'
        "Which evening is my pottery class now?\n\nWrite the reply body only."
    )
    unsure = "I'm sorry, but I don't have any information about your pottery class."
    turns = unsure_sent_back("You are Quinn.", user, unsure, "ingrid@example.test")
    assert turns is not None and [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[2]["content"] == unsure and turns[3]["content"] == UNSURE_NOTE.format(lines=pottery)
    # An answer that answers, and a "don't know" with no line sharing two of the email's words, stay as they are.
    assert unsure_sent_back("You are Quinn.", user, "Your pottery class is on Wednesday.", "i@x") is None
    other = user.replace("Which evening is my pottery class now?", "Who is my dentist?")
    assert unsure_sent_back("You are Quinn.", other, "I do not know who your dentist is.", "i@x") is None


def test_the_focused_second_look_asks_afresh_with_the_best_passages_alone_as_blocks() -> None:
    """``focused_again``: an answer that does not know, while a shown passage shares two of the email's words,
    is asked again from scratch: the recall sections gone, the best passages by Quinn's ranking (at most five,
    oldest first) as blocks above the email."""
    from bench.long_memory.replay import FOCUSED_HEAD, Ranking, focused_again

    monkey = '- [mail:2023-02-06] (they wrote, "Chat") Okay, but do not eat it till you get on the plane, monkey.'
    other = '- [mail:2022-01-02] (they wrote, "Hi") Rainy again.'
    user = (
        "Memories that may be relevant to this email, oldest first:\n"
        "- [memory:3] (they wrote on 2023-02-06) Good-bye, little monkey guy.\n\n"
        f"From your past emails with this person, oldest first (cite):\n{other}\n{monkey}\n\n"
        'New email from Phoebe Buffay <phoebe@example.test> on 2026-11-28, subject "Q":\n\n'
        "When should the monkey eat?\n\nWrite the reply body only."
    )
    ranking = Ranking((3,), (monkey, "- [mail:2026-01-01] (a later mail)", other))
    unsure = "I'm sorry, but I don't have any information about when the monkey should eat."
    turns = focused_again("You are Quinn.", user, unsure, "phoebe@example.test", ranking)
    assert turns is not None and [t["role"] for t in turns] == ["system", "user"]
    asked = turns[1]["content"]
    assert asked.startswith(FOCUSED_HEAD) and "[memory:" not in asked and "From your past emails" not in asked
    assert asked.index("--- [mail:2022-01-02]") < asked.index("--- [mail:2023-02-06]")  # oldest first
    assert "till you get on the plane, monkey.\n" in asked and asked.endswith(user[user.index("New email") :])
    assert focused_again("You are Quinn.", user, "On the plane.", "p@x", ranking) is None  # it answered
    dentist = user.replace("When should the monkey eat?", "Who is my dentist?")
    assert focused_again("You are Quinn.", dentist, "I do not know.", "p@x", ranking) is None  # nothing shares


async def test_the_guesses_follow_up_asks_on_top_of_an_answer_naming_what_the_prompt_never_said(
    llm_server: ScriptedLLM,
) -> None:
    """``guesses_sent_back`` changes no prompt: it asks as Quinn does after an answer that guessed (the answer,
    then llm.GUESSES_NOTE), and keeps an answer Quinn would mail as it is."""
    import asyncio

    from bench.long_memory.data import Probe
    from bench.long_memory.replay import Sent, guesses_sent_back, replay
    from quinn.agent.llm import GUESSES_NOTE

    system = "You are Quinn.\n\nMemories that may be relevant to this email:\n- I drive a dark green Mazda."
    user = 'New email from Ingrid Berg <ingrid@example.test> on 2026-11-28, subject "Q":\n\n{}'
    dentist = Probe("ingrid@example.test", "absence", "dentist", "Who is my dentist?", (r"\bnot?\b.*\bknow",), "")
    car = Probe("ingrid@example.test", "single", "car", "Which car do I drive?", (r"mazda",), "Mazda", (), ("mazda",))
    guess = "Hi Ingrid,\n\nYour dentist is Dr. Smith."
    turns = guesses_sent_back(system, user.format(dentist.text), guess, dentist.user)
    assert turns is not None and [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[2]["content"] == guess and turns[3]["content"] == GUESSES_NOTE.format(names="Dr. Smith")
    assert guesses_sent_back(system, user.format(car.text), "Your car is a dark green Mazda.", car.user) is None

    llm_server.script(Text("Hi Ingrid, I do not know who your dentist is."))
    sent = [Sent(dentist, "generated", system, user.format(dentist.text), guess),
            Sent(car, "generated", system, user.format(car.text), "Your car is a dark green Mazda.")]  # fmt: skip
    rows = await asyncio.to_thread(lambda: list(replay(sent, llm_server.base_url, False, ["guesses_sent_back"])))
    assert [(r.condition, r.correct) for r in rows] == [("as_sent", False), ("guesses_sent_back", True),
                                                         ("as_sent", True), ("guesses_sent_back", True)]  # fmt: skip
    assert len(llm_server.requests) == 1  # the car's answer is mailed as it is: nothing asked
    assert rows[1].in_prompt is None and "Dr. Smith" not in rows[3].reply


def test_replays_of_several_variants_merge_only_with_the_same_variants(tmp_path: Path) -> None:
    from bench.long_memory.replay import ReplayError, main

    def row(question: str, condition: str, correct: bool, user: str = "p@x") -> dict:
        return {"user": user, "source": "real", "category": "single", "kind": "k", "condition": condition,
                "correct": correct, "in_prompt": True, "stale": False, "leak": False, "leak_in_prompt": False,
                "replied": True, "tokens_in": 9, "tokens_out": 3, "seconds": 1.0, "question": question}  # fmt: skip

    def part(name: str, data: dict, rows: list[dict]) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({"benchmark": "long_memory_replay", "machine": {}, "model": {}, "rows": rows,
                                    "data": {"transcripts": [name], "re_ask": True, **data}}))  # fmt: skip
        return str(path)

    both = {"variants": ["passages_as_blocks", "without_repeated_memories"]}
    one = part("one", both, [row("Q1", "as_sent", False), row("Q1", "passages_as_blocks", True),
                             row("Q1", "without_repeated_memories", False)])  # fmt: skip
    two = part("two", both, [row("Q2", "as_sent", True), row("Q2", "passages_as_blocks", True),
                             row("Q2", "without_repeated_memories", False),
                             # Another person asked Q1 too, whose answer no change moved.
                             row("Q1", "as_sent", True, "r@x"), row("Q1", "passages_as_blocks", True, "r@x"),
                             row("Q1", "without_repeated_memories", True, "r@x")])  # fmt: skip
    result = main(["--merge", one, two, "--out", str(tmp_path), "--name", "merged"])
    assert [result["summary"][v]["correct"] for v in result["summary"]["variants"]] == [2, 3, 1]
    assert len(result["summary"]["changed"]) == 2  # Q1 of p@x now right, Q2 now wrong; r@x's Q1 did not move
    text = (tmp_path / "merged.md").read_text()
    assert "| passages as blocks | 3 | 3 |" in text and "| without repeated memories | 3 | 1 |" in text
    assert "- now right (passages as blocks, single): Q1" in text
    assert "- now wrong (without repeated memories, single): Q2" in text
    # A part written before several variants could be given names its one variant; it is not merged with these.
    old = part("old", {"variant": "passages_as_blocks"}, [row("Q3", "as_sent", True)])
    with pytest.raises(ReplayError, match="different variants"):
        main(["--merge", one, old, "--out", str(tmp_path), "--name", "mixed"])


def test_parts_run_at_different_commits_are_not_merged() -> None:
    from bench.long_memory.report import merge

    def part(commit: str) -> dict:
        return {"machine": {"git": {"commit": commit, "dirty": False}}, "model": {}, "data": {}, "per_question": []}

    with pytest.raises(SystemExit, match="different commits"):
        merge([part("a" * 40), part("b" * 40)])
