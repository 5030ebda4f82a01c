"""Build the real development set of ``bench.real_recall`` from public, human-written conversations (issue 31).

    python -m bench.real_recall_data           # reads the fetched repositories, writes bench/data/real_recall.json
    python -m bench.real_recall_data --check   # only verify the sources' checksums against the manifest

Nothing here downloads: the source repositories are fetched beforehand (by hand, see bench/data/README.md) into
git directories under ``--mirror`` (default ``/work/.mirror``), and every file is read from the commit pinned in
``SOURCES`` with ``git show`` and checked against its sha256 before use. The output is a compact JSON file that
stays out of git (bench/data/.gitignore); ``bench.real_recall`` skips with a message where it is absent.

Sources (licences and checksums in bench/data/README.md):

- ``friendsqa`` (emorynlp/FriendsQA, Apache-2.0): transcripts of TV-show scenes (multi-party dialogue) with
  questions written by crowd workers and, per answer, the utterance that holds it: gold evidence from the source.
  One "user" per season (its dev and test scenes, every scene a dated session: one episode a week, its scenes an
  hour apart). Kinds, from the source's own labels, first match wins: ``temporal`` (the question's form is When),
  ``multi-hop`` (answers in two or more utterances), ``paraphrased`` (the source's ``_Paraphrased`` questions,
  reworded by a second worker), ``single-hop`` (the rest).
- ``topicalchat`` (alexa/Topical-Chat, CDLA-Sharing-1.0): open chit-chat between two crowd workers, where the author
  of each turn marked which reading section it drew on (a fact section about a named entity, or the news article).
  Ten "users" of 25 conversations each, drawn with a fixed seed (every conversation a session, three days
  apart). Questions are built
  mechanically from those marks, never from the turns' words; gold = the turns marked with that section:
  ``single-hop`` "What did we say about <entity>?" (an entity of one session only), ``temporal`` the same with the
  session's date where the entity came up in several sessions, ``multi-hop`` two single-hop entities of different
  sessions in one question, ``open-domain`` the news article, named by its URL's headline words. Sections marked on
  1-4 turns only (a gold set of 10 would make recall@10 a coin toss).

The held-out benchmark of the project (snap-research/LoCoMo) is not read, fetched or mirrored here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.machine import ROOT

OUT = ROOT / "bench" / "data" / "real_recall.json"
MIRROR = Path("/work/.mirror")
SEED = 31
CONVERSATIONS_PER_USER = 25
TOPICAL_USERS = 10  # 250 of the 1,078 test conversations: ~5,400 turns, as many as FriendsQA's
MAX_GOLD = 4

# repo -> (commit, licence, {path: sha256})
SOURCES: dict[str, dict[str, Any]] = {
    "emorynlp/FriendsQA": {
        "commit": "9ce6c98a6acf13c87d96b6811e4409b5de43bdfe",
        "licence": "Apache-2.0 (LICENSE.txt); the scenes are fan transcripts of Friends (Character Mining)",
        "files": {
            "dat/friendsqa_dev.json": "3a85d3fcb175589ffd050fb4bf431da77a6e12589c8ec03f1d54060ce33ec703",
            "dat/friendsqa_tst.json": "a98f24d4b04ac9f8d9468088febf304bd90eada134537277c1a425e31c0372bc",
            "LICENSE.txt": "35a15bf1a8802e225106045dc4bb6c668a376e445b89f783471156fa26cc16b4",
        },
    },
    "alexa/Topical-Chat": {
        "commit": "7c939229cbcf6f55f6977b341a5a2f2fe982d53f",
        "licence": "CDLA-Sharing-1.0 (DATALICENSE)",
        "files": {
            "conversations/test_rare.json": "4f21a18be16e310840280678e7bb4646852573b239b69183ddf8898f40119567",
            "conversations/test_freq.json": "3c65693d59e40a1fb58ead35dcfe85fbcc88ea93a4d74557df620996f72c8f08",
            "reading_sets/pre-build/test_rare.json": "1c7ce89668cd23ee105871edfadcfce6a2d1940f1ded6cab44b3561ead84b842",
            "reading_sets/pre-build/test_freq.json": "9fca4e9f4bebf26ffb2231d2de0614dd2e2026912f9dd4478b6f7a59c08e19ac",
            "DATALICENSE": "a08ff57744857367fb51f27a06c9877818a102692db72fbe06aaadec4d76e5f3",
        },
    },
}


def _git_dir(mirror: Path, repo: str) -> Path:
    base = mirror / repo.replace("/", "+") / "repo"
    return base / ".git" if (base / ".git").is_dir() else base


def read_source(mirror: Path, repo: str, path: str) -> bytes:
    """One file of a fetched repository at the pinned commit, its sha256 checked when the manifest has one."""
    spec = SOURCES[repo]
    git = _git_dir(mirror, repo)
    if not git.exists():
        raise SystemExit(f"{repo} is not fetched: expected a git directory at {git} (see bench/data/README.md)")
    try:
        data = subprocess.run(
            ["git", "--git-dir", str(git), "show", f"{spec['commit']}:{path}"], check=True, capture_output=True
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"{repo}@{spec['commit'][:10]}:{path} cannot be read: {exc.stderr.decode().strip()}") from exc
    want = spec["files"][path]
    got = hashlib.sha256(data).hexdigest()
    if want and got != want:
        raise SystemExit(f"{repo}:{path} has sha256 {got}, the manifest says {want}: a different copy, not used")
    return data


# --- FriendsQA ---------------------------------------------------------------------------------------------------

_DETOKENISE = [
    (re.compile(r" (n't|'s|'re|'m|'ll|'ve|'d)\b", re.IGNORECASE), r"\1"),
    (re.compile(r"\b(gon|wan|got) (na|ta)\b", re.IGNORECASE), r"\1\2"),
    (re.compile(r" ([.,!?;:])"), r"\1"),
    (re.compile(r"\s+"), " "),
]


def detokenise(text: str) -> str:
    """Undo the source's tokenisation ("you 're gon na" -> "you're gonna"), nothing else."""
    for pattern, repl in _DETOKENISE:
        text = pattern.sub(repl, text)
    return text.strip()


def _friends_kind(qid: str, answers: list[dict[str, Any]]) -> str:
    form = qid.split("_")[3] if qid.count("_") >= 3 else ""
    if form.lower() == "when":
        return "temporal"
    if len({a["utterance_id"] for a in answers}) >= 2:
        return "multi-hop"
    if qid.endswith("_Paraphrased"):
        return "paraphrased"
    return "single-hop"


def friendsqa(mirror: Path) -> dict[str, Any]:
    """Scenes of the dev and test splits, one user per season, every scene a dated session."""
    scenes = []
    for path in ("dat/friendsqa_dev.json", "dat/friendsqa_tst.json"):
        scenes += json.loads(read_source(mirror, "emorynlp/FriendsQA", path))["data"]
    messages, questions = [], []
    for scene in sorted(scenes, key=lambda s: s["title"]):
        season, episode, cut = (int(part[1:]) for part in scene["title"].split("_"))
        user = f"friends-s{season:02d}"
        at = datetime(2025, 1, 6, 18, tzinfo=UTC) + timedelta(weeks=episode - 1, hours=cut)
        paragraph = scene["paragraphs"][0]
        for u in paragraph["utterances:"]:
            speakers = [s for s in u["speakers"] if s and s != "#NOTE#"] or ["scene"]
            messages.append({
                "id": f"{scene['title']}_u{u['uid']:03d}",
                "user": user,
                "session": scene["title"],
                "at": at.isoformat(),
                "speaker": " and ".join(speakers),
                "text": detokenise(u["utterance"]),
            })  # fmt: skip
        for qa in paragraph["qas"]:
            answers = qa["answers"]
            if not answers:
                continue
            questions.append({
                "id": qa["id"],
                "user": user,
                "kind": _friends_kind(qa["id"], answers),
                "text": detokenise(qa["question"]),
                "answers": sorted({f"{scene['title']}_u{a['utterance_id']:03d}" for a in answers}),
            })  # fmt: skip
    return {"messages": messages, "questions": questions}


# --- Topical-Chat ------------------------------------------------------------------------------------------------

_URL_WORDS = re.compile(r"[a-z0-9]+")


def headline(url: str) -> str:
    """The headline words of a Washington Post URL (its slug: the longest path part with hyphens)."""
    parts = [p for p in url.rstrip("/").split("/") if "-" in p and not re.fullmatch(r"[0-9a-f-]{20,}", p)]
    slug = max(parts, key=len) if parts else ""
    slug = re.sub(r"_story\.html$|\.html$", "", slug)
    return " ".join(_URL_WORDS.findall(slug.lower()))


def _sections(reading: dict[str, Any], agent: str) -> dict[str, str]:
    """FSn -> entity, as the turn's author saw it."""
    return {name: part.get("entity", "") for name, part in reading.get(agent, {}).items() if name.startswith("FS")}


def topicalchat(mirror: Path) -> dict[str, Any]:
    """Conversations of the test splits, 25 a user, every conversation a session; questions from the marks."""
    conversations: dict[str, Any] = {}
    readings: dict[str, Any] = {}
    for split in ("test_freq", "test_rare"):
        conversations |= json.loads(read_source(mirror, "alexa/Topical-Chat", f"conversations/{split}.json"))
        readings |= json.loads(read_source(mirror, "alexa/Topical-Chat", f"reading_sets/pre-build/{split}.json"))
    rng = random.Random(SEED)
    ids = sorted(conversations)
    rng.shuffle(ids)
    messages: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for start in range(0, TOPICAL_USERS * CONVERSATIONS_PER_USER, CONVERSATIONS_PER_USER):
        user = f"topical-{start // CONVERSATIONS_PER_USER:02d}"
        # per conversation: entity -> marked turn ids; article -> marked turn ids
        entity_turns: dict[str, dict[str, list[str]]] = {}
        article_turns: dict[str, tuple[str, list[str]]] = {}
        dates: dict[str, datetime] = {}
        for n, cid in enumerate(ids[start : start + CONVERSATIONS_PER_USER]):
            conv, reading = conversations[cid], readings.get(cid, {})
            at = datetime(2025, 1, 6, 19, tzinfo=UTC) + timedelta(days=3 * n)
            dates[cid] = at
            marks: dict[str, list[str]] = defaultdict(list)
            articles: list[str] = []
            for i, turn in enumerate(conv["content"]):
                mid = f"{cid}_t{i:02d}"
                messages.append({
                    "id": mid, "user": user, "session": cid, "at": (at + timedelta(minutes=i)).isoformat(),
                    "speaker": turn["agent"], "text": " ".join(turn["message"].split()),
                })  # fmt: skip
                sections = _sections(reading, turn["agent"])
                for source in turn["knowledge_source"]:
                    if sections.get(source):
                        marks[sections[source]].append(mid)
                    elif source.startswith("AS"):
                        articles.append(mid)
            entity_turns[cid] = {e: sorted(set(t)) for e, t in marks.items()}
            if articles and headline(conv.get("article_url", "")):
                article_turns[cid] = (headline(conv["article_url"]), sorted(set(articles)))
        questions += _topical_questions(user, entity_turns, article_turns, dates, rng)
    return {"messages": messages, "questions": questions}


def _date_words(at: datetime) -> str:
    return f"{at:%A} {at.day} {at:%B %Y}"


def _topical_questions(
    user: str,
    entity_turns: dict[str, dict[str, list[str]]],
    article_turns: dict[str, tuple[str, list[str]]],
    dates: dict[str, datetime],
    rng: random.Random,
) -> list[dict[str, Any]]:
    sessions_of: dict[str, list[str]] = defaultdict(list)
    for cid, entities in entity_turns.items():
        for entity in entities:
            sessions_of[entity].append(cid)
    out: list[dict[str, Any]] = []
    singles = []
    for entity, cids in sorted(sessions_of.items()):
        for cid in cids:
            gold = entity_turns[cid][entity]
            if not 1 <= len(gold) <= MAX_GOLD:
                continue
            if len(cids) == 1:
                singles.append((entity, cid, gold))
                out.append(_q(user, "single-hop", f"What did we say about {entity}?", gold, len(out)))
            else:
                text = f"What did we say about {entity} on {_date_words(dates[cid])}?"
                out.append(_q(user, "temporal", text, gold, len(out)))
    rng.shuffle(singles)
    for (e1, c1, g1), (e2, c2, g2) in zip(singles[0::2], singles[1::2], strict=False):
        if c1 != c2:
            out.append(_q(user, "multi-hop", f"What did we say about {e1}, and about {e2}?", g1 + g2, len(out)))
    heads = Counter(h for h, _ in article_turns.values())
    for _cid, (head, gold) in sorted(article_turns.items()):
        if heads[head] == 1 and 1 <= len(gold) <= MAX_GOLD:
            out.append(_q(user, "open-domain", f'What did we say about the article "{head}"?', gold, len(out)))
    return out


def _q(user: str, kind: str, text: str, gold: Iterable[str], n: int) -> dict[str, Any]:
    return {"id": f"{user}_q{n:03d}", "user": user, "kind": kind, "text": text, "answers": sorted(set(gold))}


BUILDERS = {"friendsqa": friendsqa, "topicalchat": topicalchat}


def checksums(mirror: Path) -> dict[str, dict[str, str]]:
    """sha256 of every source file at its pinned commit."""
    return {
        repo: {path: hashlib.sha256(read_source(mirror, repo, path)).hexdigest() for path in spec["files"]}
        for repo, spec in SOURCES.items()
    }


def main(argv: list[str] | None = None) -> None:
    """Build (or only check) the development set."""
    parser = argparse.ArgumentParser(prog="python -m bench.real_recall_data", description=__doc__.splitlines()[0])
    parser.add_argument("--mirror", type=Path, default=MIRROR, help="where the fetched repositories are")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="print the sources' checksums only")
    args = parser.parse_args(argv)
    sums = checksums(args.mirror)
    if args.check:
        print(json.dumps(sums, indent=1))
        return
    sets = {name: build(args.mirror) for name, build in BUILDERS.items()}
    data = {
        "built_by": "python -m bench.real_recall_data",
        "sources": {
            repo: {"commit": s["commit"], "licence": s["licence"], "sha256": sums[repo]} for repo, s in SOURCES.items()
        },
        "sets": sets,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    blob = json.dumps(data, separators=(",", ":")).encode()
    args.out.write_bytes(blob)
    for name, s in sets.items():
        kinds = Counter(q["kind"] for q in s["questions"])
        users = len({m["user"] for m in s["messages"]})
        print(f"{name}: {users} users, {len(s['messages'])} turns, {len(s['questions'])} questions {dict(kinds)}")
    print(f"wrote {args.out} ({len(blob):,} bytes, sha256 {hashlib.sha256(blob).hexdigest()})")


if __name__ == "__main__":
    sys.exit(main())
