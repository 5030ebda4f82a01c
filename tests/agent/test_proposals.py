"""Template improvement proposals (issue 15): reviews become a rewrite an admin reads, diffs, accepts or rejects;
nothing is applied by Quinn. The scripted model plays the rewriter; what is asserted is what Quinn stores,
checks and writes."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import time
from pathlib import Path

from quinn.agent import audit_log, proposals
from quinn.agent.prompts import PromptStore, packaged_dir
from quinn.cli import main
from quinn.clock import iso, utcnow
from quinn.db import Database
from tests.lab.llm_server import Json, RecordedRequest, Text

REWRITER = "TemplateRewrite"  # the improvement call's schema: its RecordedRequest.purpose
PLAIN = "Answer in plain text suitable for an email."
SHORT = "Answer in plain, short text suitable for an email: three sentences at most."


def reviewed(db: Database, version: str, suggestions: list[str]) -> None:
    """Conversation reviews of replies written by ``version``, as session close leaves them."""
    for index, suggestion in enumerate(suggestions):
        db.execute("INSERT INTO conversation_summaries (session_id, user_id, summary, reward_score,"
                   " improvement_suggestion, prompt_version, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (f"s-{index}", "ann@example.test", "A conversation.", -0.2, suggestion, version,
                    iso(utcnow())))  # fmt: skip


async def test_reviews_become_one_checked_proposal_per_version_and_nothing_is_applied(job_bench, llm_server) -> None:
    version, text = PromptStore().text_of("reply")
    proposals.keep_version(job_bench.db, version, "reply", text, utcnow())
    reviewed(job_bench.db, version, ["Replies are too long.", "Keep answers shorter.", "Get to the point faster."])

    def rewriter(request: RecordedRequest):
        if request.purpose == REWRITER:
            return Json({"source": text.replace(PLAIN, SHORT), "rationale": "Shorter answers, as three reviews ask."})
        return Text("ok")

    llm_server.responder = rewriter
    first = await job_bench.runner().run_job("improvement")
    assert first.status == "ok" and first.counts["created"] == 1
    [proposal] = proposals.listing(job_bench.db)
    assert (proposal.name, proposal.base_version, proposal.status) == ("reply", version, "pending")
    assert proposal.evidence["suggestions"] and proposal.evidence["mean_reward"] == -0.2
    changes = proposals.diff(job_bench.db, proposal)
    assert f"-{PLAIN}" in changes and f"+{SHORT}" in changes
    assert PromptStore().text_of("reply") == (version, text)  # the template in use is untouched
    asked = [r for r in llm_server.requests if r.purpose == REWRITER]
    assert len(asked) == 1 and "Keep answers shorter." in asked[0].text and PLAIN in asked[0].text

    await job_bench.runner().run_job("improvement", force=True)  # one proposal per version: not asked again
    assert len(proposals.listing(job_bench.db)) == 1
    assert len([r for r in llm_server.requests if r.purpose == REWRITER]) == 1


async def test_a_rewrite_that_breaks_the_template_is_discarded(job_bench, llm_server) -> None:
    version, text = PromptStore().text_of("reply")
    proposals.keep_version(job_bench.db, version, "reply", text, utcnow())
    reviewed(job_bench.db, version, ["Be warmer.", "Say thanks.", "Use their name."])
    broken = text.replace("{{ assistant.name }}", "{{ assistant.name | nosuchfilter }}")
    llm_server.responder = lambda r: Json({"source": broken, "rationale": "Warmer."}) if r.purpose == REWRITER else None
    outcome = await job_bench.runner().run_job("improvement")
    assert outcome.status == "ok" and outcome.counts.get("created") is None
    assert "nosuchfilter" in outcome.counts["details"]["discarded"][0]["why"]
    assert proposals.listing(job_bench.db) == []


async def test_a_rewrite_that_would_render_for_hours_is_discarded_and_the_loop_goes_on(job_bench, llm_server) -> None:
    """Issue 30: the model's rewrite was trial-rendered on the daemon's event loop; a nested loop stopped the
    loop (a 0.25 s ticker never ran again) and the job's own timeout could not fire. Now it renders in a child
    process, killed at its deadline; the loop ticks on."""
    from quinn.agent.trials import TRIAL_LIMITS

    version, text = PromptStore().text_of("reply")
    proposals.keep_version(job_bench.db, version, "reply", text, utcnow())
    reviewed(job_bench.db, version, ["Be thorough.", "Think longer.", "Consider everything."])
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    looping = text.replace("{% block system %}", "{% block system %}" + loop, 1)
    assert looping != text
    llm_server.responder = lambda r: Json({"source": looping, "rationale": "Thorough."}) if r.purpose == REWRITER \
        else None  # fmt: skip
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.25)

    ticking = asyncio.create_task(ticker())
    try:
        outcome = await job_bench.runner().run_job("improvement")
    finally:
        ticking.cancel()
    gaps = [later - earlier for earlier, later in itertools.pairwise(ticks)]
    print(f"improvement job: {len(ticks)} ticks over {ticks[-1] - ticks[0]:.1f} s, the longest gap {max(gaps):.2f} s")
    assert max(gaps) < 2.0  # a 0.25 s ticker, on a busy machine: never stalled
    assert outcome.status == "ok" and outcome.counts.get("created") is None
    why = outcome.counts["details"]["discarded"][0]["why"]
    assert f"took longer than the {TRIAL_LIMITS.timeout_s:g} s limit" in why
    assert proposals.listing(job_bench.db) == []


def test_an_admin_accepts_or_rejects_from_the_command_line(tmp_path: Path, lab_config, capsys) -> None:
    admin = tmp_path / "prompts"
    shutil.copytree(packaged_dir(), admin)
    config = lab_config(extra=f'[prompts]\ndir = "{admin}"\n')
    db = Database.open(str(config.db_path))
    version, text = PromptStore(admin).text_of("reply")
    proposals.keep_version(db, version, "reply", text, utcnow())
    shorter = proposals.add(db, "reply", version, text.replace(PLAIN, SHORT), "Shorter.", {"scored": 3}, utcnow())
    other = proposals.add(db, "reply", version, text.replace(PLAIN, "Answer in verse."), "Poetic.", {}, utcnow())
    db.close()
    os.environ.update(config.env)
    try:
        assert main(["prompts", "proposals", "-c", str(config.path)]) == 0
        assert "Shorter." in capsys.readouterr().out
        assert main(["prompts", "proposal", str(shorter), "-c", str(config.path)]) == 0
        assert f"+{SHORT}" in capsys.readouterr().out
        assert main(["prompts", "accept", str(shorter), "-c", str(config.path)]) == 0
        assert (admin / "reply.j2").read_text(encoding="utf-8") == text.replace(PLAIN, SHORT)
        assert PromptStore(admin).text_of("reply")[0] != version  # a new version, used from the next reply
        # The other proposal rewrote the old text: accepting it now would undo the first, so it is refused.
        assert main(["prompts", "accept", str(other), "-c", str(config.path)]) == 2
        assert "changed since proposal" in capsys.readouterr().err
        assert main(["prompts", "reject", str(other), "-c", str(config.path)]) == 0
        assert main(["prompts", "reject", str(other), "-c", str(config.path)]) == 2  # decided once
    finally:
        for key in config.env:
            os.environ.pop(key, None)
    db = Database.open(str(config.db_path))
    try:
        assert db.query("SELECT id, status FROM prompt_proposals ORDER BY id") == [(shorter, "accepted"),
                                                                                 (other, "rejected")]  # fmt: skip
        audited = [(e.actor.startswith("cli:"), e.action, e.object) for e in audit_log.listing(db)]
        assert audited == [
            (True, "reject proposal", f"proposal {other}"),
            (True, "accept proposal", f"proposal {shorter}"),
        ]  # refused tries leave no entry
    finally:
        db.close()
