"""Isolation: no user's memory reaches the model for another user, and no private memory reaches other people.

Randomized users hold memories with unique markers on shared topics (so a retrieval that ignored the owner
would find other users' memories by content). Each trial is one mail from one user, parsed from real RFC 5322
bytes, answered by the real Agent (libSQL file, the real embedding model, Mirascope over HTTP to the scripted
model) in process: plain questions, other users or outsiders on To/Cc/Reply-To, memory commands (digest,
export) and model tool calls that search or try to forget memories. The scripted model echoes every marker it
was shown, so what it saw is also what the reply would carry to the thread. Checked on every trial:

- no request reaching the model contains another user's marker;
- with anyone but the user on the thread (To, Cc or Reply-To), no request made for the reply, no reply body and
  no attachment carries the user's private markers (personal details, PII);
- the control: the user's own marker for the topic asked about does reach the model, so a retrieval that
  returned nothing could not pass.

Conversation recall (issue 14) is under the same checks: each user also has past one-to-one mails (stored
messages cut into passages) with their own markers, one per topic. Another user's passage is a leak anywhere; a
one-to-one passage is private to the user (it must not reach a thread with anyone else on it); the control also
asks that the user's passage about the topic reaches the model when the user writes alone. The model's
``search_conversations`` tool is called too, alone and with others on the thread.

2,000 trials in CI, 10,000 with ``--long``; a smaller run goes through ``quinn run`` end to end. The seed is
printed (``QUINN_PROOF_SEED=N`` replays a run).
"""

from __future__ import annotations

import email
import email.policy
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from quinn.agent.llm import LLM
from quinn.agent.prompts import PromptStore
from quinn.agent.respond import Agent, Answer
from quinn.db import Database
from quinn.documents import Extracted, Section
from quinn.documents.knowledge import add_file
from quinn.documents.library import keep_documents
from quinn.lab.wait import wait_for
from quinn.mailbox.message import Attachment
from quinn.mailbox.parse import parse_email
from quinn.memory.embed import RecentEmbeddings
from quinn.memory.models import NewMemory
from quinn.memory.passages import index_message
from quinn.memory.store import MemoryStore
from tests.lab.brain import EXTRACTION, Brain, new_mail
from tests.lab.llm_server import REPLY, RecordedRequest, Text, ToolCall
from tests.lab.mails import lab_settings, make_mail
from tests.lab.smtp import unique_address

USERS = 16
TOPICS = ["greenhouse", "sailboat", "violin", "mortgage", "marathon", "beehive", "telescope", "pottery", "chess club",
          "vineyard", "motorbike", "aquarium", "harpsichord", "allotment", "kayak", "sourdough"]  # fmt: skip
MARKER = re.compile(r"QX[0-9a-f]{10}")
SHAPES = {  # trial shape -> weight
    "alone": 30, "cc user": 12, "to user": 8, "cc outsider": 10, "reply-to outsider": 10, "digest": 5,
    "digest cc": 5, "export": 3, "export cc": 4, "tool search": 5, "tool search cc": 4, "tool forget": 4,
    "tool recall": 4, "tool recall cc": 4,
}  # fmt: skip
WITH_OTHERS = {"cc user", "to user", "cc outsider", "reply-to outsider", "digest cc", "export cc", "tool search cc",
               "tool forget", "tool recall cc"}  # fmt: skip


def trials_wanted(request: pytest.FixtureRequest) -> int:
    """2,000 (10,000 with ``--long``); ``QUINN_PROOF_TRIALS=N`` for a shorter look on a busy machine."""
    if os.environ.get("QUINN_PROOF_TRIALS"):
        return int(os.environ["QUINN_PROOF_TRIALS"])
    return 10_000 if request.config.getoption("--long") else 2_000


def proof_seed() -> int:
    """QUINN_PROOF_SEED replays a run; otherwise a fresh seed (printed, and named in every failure)."""
    value = os.environ.get("QUINN_PROOF_SEED")
    return int(value) if value else random.SystemRandom().randrange(2**31)


@dataclass
class Person:
    """A user with markers: private ones (personal, PII) and public ones (preference, one per topic)."""

    address: str
    name: str
    private: set[str] = field(default_factory=set)
    public: set[str] = field(default_factory=set)
    topics: dict[str, str] = field(default_factory=dict)  # topic -> the marker of that memory
    recalled: dict[str, str] = field(default_factory=dict)  # topic -> the marker of a one-to-one mail about it
    memory_ids: list[int] = field(default_factory=list)

    @property
    def markers(self) -> set[str]:
        return self.private | self.public


def seed_people(store: MemoryStore, rng: random.Random, count: int) -> list[Person]:
    """``count`` users, each with a personal and a PII memory (private), a preference and three topic facts;
    stored in one batch (one embedding call)."""
    people, items = [], []
    for i in range(count):
        person = Person(unique_address(f"user{i}"), f"Person{i}")
        mark = lambda: f"QX{rng.getrandbits(40):010x}"  # noqa: E731
        personal, pii, pref = mark(), mark(), mark()
        person.private |= {personal, pii}
        person.public.add(pref)
        mine = [
            # Neither is flagged by hand: the store classifies them (a code, an identity number), as it does
            # for whatever extraction, the tools or a "remember" write (quinn/memory/sensitive.py).
            NewMemory(person.address, f"{person.name}'s family code word is {personal}.", type="fact",
                      scope="profile"),
            NewMemory(person.address, f"{person.name}'s passport number for the {rng.choice(TOPICS)} trip is {pii}.",
                      type="fact", scope="episodic"),
            NewMemory(person.address, f"{person.name} likes replies signed off with {pref}.", type="preference",
                      scope="profile"),
        ]  # fmt: skip
        for topic in rng.sample(TOPICS, 3):
            marker = mark()
            person.topics[topic] = marker
            person.public.add(marker)
            mine.append(NewMemory(person.address, f"{person.name} keeps the {topic} notes in the folder labelled "
                                  f"{marker}.", type="fact", scope="episodic"))  # fmt: skip
        items += mine
        people.append(person)
    ids = iter(store.add_many(items))
    for person in people:
        person.memory_ids = [next(ids) for _ in range(3 + len(person.topics))]
        classified = [store.get(mid) for mid in person.memory_ids[:2]]
        assert all(m is not None and m.private for m in classified), "the store did not classify a private memory"
    seed_conversations(store, rng, people)
    return people


def seed_conversations(store: MemoryStore, rng: random.Random, people: list[Person]) -> None:
    """Past mail of each user, one one-to-one message per topic with a marker, stored and indexed as the mail
    path does (``messages``, then ``index_message``). Those markers are private: one-to-one mail."""
    for person in people:
        for n, topic in enumerate(person.topics):
            marker = f"QX{rng.getrandbits(40):010x}"
            person.recalled[topic] = marker
            person.private.add(marker)
            message_id = f"<past-{n}-{rng.getrandbits(32):x}@example.test>"
            body = f"By the way, the {topic} receipts are in the shoebox I marked {marker}."
            store.db.execute(
                "INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, to_addrs,"
                " sent_at, body, full_text, created_at) VALUES (?, ?, 'in', ?, ?, ?, '[\"quinn@example.test\"]',"
                " '2026-06-01T09:00:00+00:00', ?, ?, '2026-06-01T09:00:00+00:00')",
                (f"past-{person.address}-{n}", person.address, message_id, topic, person.address, body, body),
            )  # fmt: skip
            assert index_message(store, person.address, message_id, "in") == 1


def echo_markers(request: RecordedRequest) -> Text:
    """The scripted model repeats every marker it was shown: what it saw is what the thread would get."""
    seen = sorted(set(MARKER.findall(request.text)))
    return Text("Here is what I recall: " + (", ".join(seen) if seen else "nothing specific") + ".")


@dataclass
class Trial:
    """One mail and what must (not) be seen."""

    index: int
    shape: str
    person: Person
    topic: str
    raw: bytes
    others: bool


def make_trial(index: int, rng: random.Random, people: list[Person], quinn: str) -> Trial:
    shape = rng.choices(list(SHAPES), weights=list(SHAPES.values()))[0]
    person = rng.choice(people)
    other = rng.choice([p for p in people if p is not person])
    outsider = f"someone-{rng.getrandbits(24):06x}@elsewhere.test"
    topic = rng.choice(list(person.topics)) if rng.random() < 0.8 else rng.choice(TOPICS)
    body = {
        "digest": "What do you know about me?",
        "export": "Could you export my memory, please?",
    }.get(shape.split()[0], f"Hi Quinn, where did I put my {topic} notes again? Thanks.")
    to, cc, headers = [quinn], [], {}
    if shape in ("cc user", "digest cc", "export cc", "tool search cc", "tool recall cc"):
        cc = [other.address]
    elif shape == "to user":
        to = [other.address, quinn]
    elif shape in ("cc outsider", "tool forget"):
        cc = [outsider]
    elif shape == "reply-to outsider":
        headers = {"Reply-To": f"Helper <{outsider}>"}
    sender = f"{person.name} <{person.address}>"
    raw = make_mail(sender, to, f"Trial {index}: {topic}", body, message_id=f"<trial-{index}-{rng.getrandbits(32):x}"
                    "@example.test>", cc=cc, headers=headers)  # fmt: skip
    return Trial(index, shape, person, topic, raw, shape in WITH_OTHERS)


def leaks(trial: Trial, people: list[Person], texts: dict[str, str]) -> list[str]:
    """What must not be there: other users' markers anywhere; the user's private ones when others read along."""
    found = []
    for where, text in texts.items():
        for marker in set(MARKER.findall(text)):
            owner = next(p for p in people if marker in p.markers)
            if owner is not trial.person:
                found.append(f"{where}: {owner.address}'s marker {marker}")
            elif trial.others and marker in owner.private and f"({EXTRACTION})" not in where:
                # The extraction call sees the user's memories to deduplicate; its answer goes to the store,
                # never to the thread, so only the reply's requests, body and attachments must withhold them.
                found.append(f"{where}: the user's private marker {marker} with others on the thread")
    return found


async def run_trial(agent: Agent, llm_server, trial: Trial, people: list[Person], rng: random.Random) -> tuple[
        list[str], bool | None]:  # fmt: skip
    """Answer one trial's mail; returns (leaks, control) where control says whether the user's own topic marker
    reached the model (None when the trial asks nothing the user has a memory for)."""
    person = trial.person
    if trial.shape.startswith("tool search"):
        llm_server.script(ToolCall("search_memory", {"query": f"{trial.topic} notes folder"}))
    elif trial.shape.startswith("tool recall"):
        llm_server.script(ToolCall("search_conversations", {"query": f"{trial.topic} receipts shoebox"}))
    elif trial.shape == "tool forget":  # another user's memory, or the user's own private one with others on
        victim = rng.choice([p for p in people if p is not person])
        target = rng.choice([rng.choice(victim.memory_ids), person.memory_ids[0]])
        llm_server.script(ToolCall("forget_memory", {"id": target}))
    before = len(llm_server.requests)
    mail = parse_email(trial.raw)
    answer: Answer = await agent.answer(mail, person.address, True)
    if rng.random() < 0.05:  # now and then the extraction call too: it shows the model the user's memories
        await agent.learn(person.address, mail)
    requests = llm_server.requests[before:]
    texts = {f"request {n} ({r.purpose})": r.text
             for n, r in enumerate(requests)}  # fmt: skip
    texts["reply body"] = answer.body
    for attachment in answer.attachments:
        texts[f"attachment {attachment.filename}"] = attachment.data.decode("utf-8")
    found = leaks(trial, people, texts)
    if trial.shape.split()[0] not in ("alone", "cc", "to", "reply-to") or trial.topic not in person.topics:
        return found, None
    seen = "\n".join(r.text for r in requests)
    # Alone, the one-to-one mail about the topic is recalled too; with others on the thread it never is.
    recalled = trial.others or person.recalled[trial.topic] in seen
    return found, person.topics[trial.topic] in seen and recalled


def echoing_agent_settings(dovecot, llm_server) -> tuple[str, Any]:
    """(Quinn's address, the settings of an in-process Agent) for the lab, the scripted model echoing markers."""
    brain = Brain(llm_server)
    brain.reply = echo_markers
    quinn = unique_address("quinn")
    return quinn, lab_settings(dovecot, quinn, env={"QUINN_TEST_LLM_KEY": "k"}, llm={
        "base_url": llm_server.openai_base_url, "api_key_env": "QUINN_TEST_LLM_KEY", "max_retries": 0})  # fmt: skip


@pytest.mark.timeout(1800)
async def test_isolation_in_process(request, tmp_path: Path, dovecot, llm_server, local_embedder) -> None:
    seed = proof_seed()
    rng = random.Random(seed)
    wanted = trials_wanted(request)
    quinn, config = echoing_agent_settings(dovecot, llm_server)
    # As the daemon does (embed.build_embedder): one mail's query sentences are embedded once for domains, memory
    # search and conversation recall together.
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), RecentEmbeddings(local_embedder))
    try:
        people = seed_people(store, rng, USERS)
        agent = Agent(config, LLM(config.llm), PromptStore(), store)
        failures: list[str] = []
        control = {"expected": 0, "seen": 0}
        shapes: dict[str, int] = {}
        started = time.monotonic()
        for index in range(wanted):
            trial = make_trial(index, rng, people, quinn)
            shapes[trial.shape] = shapes.get(trial.shape, 0) + 1
            found, own_seen = await run_trial(agent, llm_server, trial, people, rng)
            failures += [f"trial {index} ({trial.shape}, {trial.person.address}): {leak}" for leak in found]
            if own_seen is not None:
                control["expected"] += 1
                control["seen"] += own_seen
                if not own_seen:
                    own = trial.person.topics[trial.topic]
                    mail = trial.person.recalled[trial.topic]
                    failures.append(f"trial {index} ({trial.shape}): control failed, the user's own marker {own} "
                                    f"or mail {mail} for {trial.topic!r} never reached the model")  # fmt: skip
        current = store.db.query_value(
            "SELECT count(*) FROM memories WHERE active = 1 AND valid_to IS NULL AND user_id IS NOT NULL"
        )
        seeded = sum(len(p.memory_ids) for p in people)
    finally:
        store.close()
    print(f"isolation: seed {seed}, {wanted} trials ({', '.join(f'{k} {v}' for k, v in sorted(shapes.items()))}), "
          f"{len(llm_server.requests)} model requests, control: own marker reached the model in "
          f"{control['seen']}/{control['expected']} trials, leaks {len(failures)}, "
          f"{time.monotonic() - started:.0f}s")  # fmt: skip
    assert not failures, f"seed {seed}: {len(failures)} failures, first ones:\n" + "\n".join(failures[:20])
    assert control["expected"] > wanted // 4  # the control ran on enough trials to mean something
    assert current == seeded, f"seed {seed}: a tool call forgot a memory it must not reach ({current} of {seeded})"


E2E_TRIALS = 20
E2E_SHAPES = ("alone", "cc user", "to user", "cc outsider", "reply-to outsider")


def test_isolation_through_the_daemon(dovecot, smtp_lab, llm_server, lab_config, quinn_daemon, local_embedder):
    """The same checks through ``quinn run``: mail over SMTP, replies read from every recipient's inbox."""
    seed = proof_seed()
    print(f"isolation e2e: seed {seed}")  # shown with a failure of any kind, a timeout included
    rng = random.Random(seed)
    brain = Brain(llm_server)
    brain.reply = echo_markers
    config = lab_config(smtp_extra="reply_all = true")
    quinn = config.address
    store = MemoryStore(Database.open(str(config.db_path)), local_embedder)
    try:
        people = seed_people(store, rng, 6)
    finally:
        store.close()
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=120)
    trials = []
    while len(trials) < E2E_TRIALS:
        trial = make_trial(len(trials), rng, people, quinn)
        if trial.shape not in E2E_SHAPES:
            continue
        parsed = email.message_from_bytes(trial.raw, policy=email.policy.default)
        recipients = [a.addr_spec for h in ("To", "Cc") for a in (parsed[h].addresses if parsed[h] else ())]
        smtp_lab.send(trial.person.address, recipients, trial.raw)
        trials.append((trial, str(parsed["Message-ID"]), parsed))
    failures: list[str] = []
    checked_inboxes = 0
    control = {"expected": 0, "seen": 0}
    for trial, message_id, parsed in trials:
        texts = _delivered_replies(dovecot, quinn, trial, message_id, parsed, daemon.log)
        checked_inboxes += len(texts)
        requests = [r for r in llm_server.requests if _about(r, trial)]
        if not requests:  # the attribution lost track of the prompts (a template reworded): nothing was checked
            failures.append(f"trial {trial.index}: no model request was recognised as answering it")
        texts |= {f"request {n} ({r.purpose})": r.text
                  for n, r in enumerate(requests)}  # fmt: skip
        failures += [f"trial {trial.index} ({trial.shape}, {trial.person.address}): {leak}"
                     for leak in leaks(trial, people, texts)]  # fmt: skip
        if trial.shape == "reply-to outsider":  # the reply goes to someone else: no memory at all (issue 13)
            seen = "\n".join(r.text for r in requests)
            shown = [m for m in trial.person.topics.values() if m in seen]
            failures += [f"trial {trial.index}: memory {m} reached a reply to an outsider" for m in shown]
        elif trial.topic in trial.person.topics:
            control["expected"] += 1
            own = trial.person.topics[trial.topic] in "\n".join(r.text for r in requests)
            control["seen"] += own
            if not own:
                failures.append(f"trial {trial.index}: control failed, own marker for {trial.topic!r} not shown")
    assert daemon.terminate() == 0
    shapes = ", ".join(f"{s} {sum(t.shape == s for t, _, _ in trials)}" for s in E2E_SHAPES)
    print(f"isolation e2e: seed {seed}, {len(trials)} mails through quinn run ({shapes}), {checked_inboxes} recipient "
          f"inboxes read, control {control['seen']}/{control['expected']}, failures {len(failures)}")  # fmt: skip
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:20])
    assert control["expected"] > 0


def _about(request: RecordedRequest, trial: Trial) -> bool:
    """Whether a model request works on ``trial``'s mail: the mail being answered or learnt from (its subject in
    the new email, `brain.new_mail`), or the thread a job reviews or summarizes (its subject in the prompt). A
    later mail's prompt may quote this one as a recalled passage (``[mail:DATE] (who, "Trial N: ...")``); that
    request belongs to the later mail, whose audience decides what it may show. By purpose and data, never by a
    template's wording."""
    subject = f'"Trial {trial.index}:'
    if request.kind == "embeddings":
        return False
    if request.purpose in (REPLY, EXTRACTION):
        return subject in new_mail(request)
    return subject in request.text


def _delivered_replies(dovecot, quinn: str, trial: Trial, message_id: str, parsed, log) -> dict[str, str]:
    """The reply's body as each of its recipients got it: inbox of reader -> text."""
    reply_to = parsed["Reply-To"].addresses[0].addr_spec if parsed["Reply-To"] else trial.person.address
    reply = wait_for(lambda: _reply_in(dovecot, reply_to, message_id), f"trial {trial.index}'s reply",
                     timeout_s=120, log=log)  # fmt: skip
    readers = {a.addr_spec.lower() for h in ("To", "Cc") for a in (reply[h].addresses if reply[h] else ())}
    texts = {}
    for reader in sorted(readers - {quinn}):
        raw = wait_for(lambda r=reader: _reply_in(dovecot, r, message_id, raw=True),
                       f"trial {trial.index}'s reply in {reader}'s inbox", log=log)  # fmt: skip
        texts[f"inbox of {reader}"] = _body(raw)
    return texts


def _reply_in(dovecot, user: str, message_id: str, raw: bool = False):
    """Quinn's reply to ``message_id`` in ``user``'s inbox (parsed), or None."""
    for data in dovecot.messages(user):
        parsed = email.message_from_bytes(data, policy=email.policy.default)
        if str(parsed["In-Reply-To"] or "").strip() == message_id:
            return data if raw else parsed
    return None


def _body(raw: bytes) -> str:
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    part = parsed.get_body(("plain",))
    return part.get_content() if part is not None else ""


async def test_the_knowledge_base_reaches_everyone_and_a_users_file_no_one_else(
    tmp_path: Path, dovecot, llm_server, local_embedder
) -> None:
    """Issue 18: a knowledge-base file (``quinn kb add``) reaches every user's reply, alone or with others on the
    thread, and through ``search_documents``; a file one user attached reaches only that user, alone."""
    quinn, config = echoing_agent_settings(dovecot, llm_server)
    store = MemoryStore(Database.open(str(tmp_path / "quinn.db")), RecentEmbeddings(local_embedder))
    rng = random.Random(proof_seed())
    shared, private = (f"QX{rng.getrandbits(40):010x}" for _ in range(2))
    alice, bob = unique_address("alice"), unique_address("bob")
    try:
        (tmp_path / "handbook.txt").write_text(f"The greenhouse key hangs in the locker labelled {shared}.")
        assert add_file(store, tmp_path / "handbook.txt", config.documents).status == "added"
        store.db.execute(
            "INSERT INTO messages (session_id, user_id, direction, message_id, subject, from_addr, to_addrs,"
            " sent_at, body, full_text, created_at) VALUES ('s-alice', ?, 'in', '<lease@example.test>', 'Lease', ?,"
            " '[\"quinn@example.test\"]', '2026-06-01T09:00:00+00:00', 'The lease.', 'The lease.',"
            " '2026-06-01T09:00:00+00:00')",
            (alice, alice),
        )  # fmt: skip
        text = f"Greenhouse lease: the deposit is in the envelope labelled {private}."
        lease = Extracted("lease.pdf", "application/pdf", "pdf", 99, "ab" * 32, (Section("p.1", text),))
        attached = [Attachment("lease.pdf", "application/pdf", 99, b"x" * 99)]
        kept = keep_documents(store, alice, "<lease@example.test>", "s-alice", [lease], attached, max_file_bytes=1024)
        assert kept == 1
        agent = Agent(config, LLM(config.llm), PromptStore(), store)
        question = "Where is the greenhouse key, and the envelope with the greenhouse deposit?"
        trials = [(alice, [], False), (bob, [], False), (alice, [bob], False), (bob, [alice], False),
                  (bob, [], True), (alice, [bob], True), (alice, [], True)]  # fmt: skip
        for n, (sender, cc, tool) in enumerate(trials):
            if tool:
                llm_server.script(ToolCall("search_documents", {"query": "greenhouse key deposit envelope"}))
            before = len(llm_server.requests)
            raw = make_mail(sender, [quinn], "Greenhouse", question, message_id=f"<kb-{n}@example.test>", cc=cc)
            await agent.answer(parse_email(raw), sender, True)
            seen = "\n".join(r.text for r in llm_server.requests[before:])
            where = f"trial {n} ({sender}, cc {cc}, tool {tool})"
            assert f"[doc:handbook.txt] (the knowledge base) The greenhouse key hangs in the locker labelled {shared}" \
                in seen, where  # fmt: skip
            assert (private in seen) == (sender == alice and not cc), where
    finally:
        store.close()
