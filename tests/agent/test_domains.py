"""Domain detection with the real embedding model, domain config, and the usage ledger on a real libSQL file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quinn.agent.domains import DomainDetector
from quinn.agent.llm import Usage
from quinn.agent.usage import record_usage, usage_totals
from quinn.config import DomainConfig, parse_config
from quinn.db import Database
from quinn.errors import ConfigError
from quinn.memory.embed import LocalEmbedder

DOMAINS = [
    DomainConfig(name="work", description="Work: projects, deadlines, meetings, colleagues and clients.",
                 keywords=["Project Alpha", "standup"]),
    DomainConfig(name="health", description="Health: doctors, medicine, exercise, sleep and diet."),
    DomainConfig(name="pets", description="Pets: dogs, cats, walks, the vet and pet food."),
]  # fmt: skip


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    yield LocalEmbedder()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Can we move the standup to 10?", ["work"]),
        ("project alpha slipped a week", ["work"]),
        ("I slept badly again and my back hurts", ["health"]),
        ("My dog Rex loves the beach", ["pets"]),
        ("thanks!", []),
        ("I moved to Node on Docker", []),
    ],
)
def test_detection_by_keyword_and_similarity(embedder: LocalEmbedder, text: str, expected: list[str]) -> None:
    detector = DomainDetector(DOMAINS, embedder, min_similarity=0.35)
    matches = detector.detect(text)
    assert [m.name for m in matches] == expected
    for match in matches:
        assert match.reason.startswith("keyword") or match.reason.startswith("similarity")


def test_keywords_match_whole_words_only(embedder: LocalEmbedder) -> None:
    detector = DomainDetector([DomainConfig(name="ops", description="x", keywords=["ops"])], None, 0.35)
    assert [m.name for m in detector.detect("The OPS team is on call")] == ["ops"]
    assert detector.detect("oops, stops and topsoil") == []


def test_without_embedder_or_domains_nothing_is_detected_by_similarity() -> None:
    assert DomainDetector(DOMAINS, None, 0.0).detect("My dog Rex loves the beach") == []
    assert DomainDetector([], None, 0.0).detect("Project Alpha") == []


def test_normalise_keeps_only_configured_names() -> None:
    detector = DomainDetector(DOMAINS, None, 0.35)
    assert detector.normalise("Work") == "work"
    assert detector.normalise("finance") is None and detector.normalise(None) is None


def test_domain_config_errors_name_the_key() -> None:
    base = {
        "imap": {"host": "h", "username": "u", "password_env": "P"},
        "smtp": {"host": "h", "from_address": "q@example.org"},
        "llm": {"model": "ollama/x", "base_url": "u"},
    }
    config = parse_config({**base, "domains": [{"name": "work", "description": "Work."}]})
    assert config.domains[0].keywords == []
    with pytest.raises(ConfigError, match=r"domains\.0\.name"):
        parse_config({**base, "domains": [{"name": "Work Stuff", "description": "Work."}]})
    with pytest.raises(ConfigError, match=r"missing key domains\.0\.description"):
        parse_config({**base, "domains": [{"name": "work"}]})
    with pytest.raises(ConfigError, match=r"unknown key domains\.0\.colour"):
        parse_config({**base, "domains": [{"name": "work", "description": "Work.", "colour": "red"}]})


def test_usage_ledger_sums_per_user_purpose_and_email(tmp_path: Path) -> None:
    db = Database.open(str(tmp_path / "usage.db"))
    try:
        record_usage(db, "reply", Usage("openai/x", 100, 20, 2), user_id="alice@example.org", message_id="<a1>")
        record_usage(db, "extract", Usage("openai/mini", 50, 10, 1), user_id="alice@example.org", message_id="<a1>")
        record_usage(db, "job:summarize", Usage("openai/mini", 30, 5, 1), user_id="bob@example.org")
        by_user = {t.key: (t.input_tokens, t.output_tokens, t.calls) for t in usage_totals(db, "user_id")}
        assert by_user == {"alice@example.org": (150, 30, 3), "bob@example.org": (30, 5, 1)}
        by_purpose = {t.key: t.calls for t in usage_totals(db, "purpose")}
        assert by_purpose == {"reply": 2, "extract": 1, "job:summarize": 1}
        assert {t.key: t.input_tokens for t in usage_totals(db, "message_id")}["<a1>"] == 150
        with pytest.raises(ValueError, match="cannot group"):
            usage_totals(db, "content; DROP TABLE llm_usage")
    finally:
        db.close()
