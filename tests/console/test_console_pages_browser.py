"""Every console page in a real browser, for both roles, over a seeded world (people, an edited memory, a reply's
trace with its tokens, job runs, template versions and a proposal, mail in every state, audit entries): each
page shows its own heading, never the login page, an error page or a server error; and the admin's template
edit with an error is refused on the page.

QUINN_CONSOLE_SCREENSHOTS=docs/console/ also saves each page as the admin sees it, 1200x800, as
docs/console/<page>.png (reduced to a palette of colours with Pillow when it is installed); docs/console.md
shows them. Run it alone: nice -n 19 .venv/bin/pytest -q tests/console/test_console_pages_browser.py
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from quinn.agent import TemplateTrials, audit_log, proposals, reply_trace
from quinn.agent.consent import opt_out
from quinn.agent.llm import Usage
from quinn.agent.prompts import PromptStore
from quinn.agent.reply_trace import ShownMemory, ToolUse, Trace
from quinn.agent.samples import sample_variables
from quinn.agent.usage import record_usage
from quinn.clock import utcnow
from quinn.documents import Extracted, Section
from quinn.documents.library import keep_documents
from quinn.mailbox.ledger import MailKey, MailLedger
from quinn.mailbox.message import Attachment
from quinn.memory.passages import index_message
from quinn.scheduler.runlog import OK, RunLog
from tests.console.conftest import ALICE, BROKEN, EXTEND, World, add_mail, full_console, mail_bytes
from tests.console.test_console_browser import arrive, log_in

CAROL = "carol@example.org"
SHOT_SIZE = {"width": 1200, "height": 800, "deviceScaleFactor": 1, "mobile": False}
CHANGES = (
    "button.retry, [id^=run-], #save, #forget, #save-template, button.rollback, #accept, #reject, #pin, #unpin, "
    "#mark-private, #not-private, #export, #purge"
)
PALETTE = 128  # colours of a saved screenshot: text and flat colours lose nothing visible, the file a third


@dataclass
class Seeded:
    """The console serving the seeded world, and the address of each page (by its screenshot's name)."""

    url: str
    pages: dict[str, str]


def seed(world: World, admin_dir: Path) -> dict[str, str]:
    """What a console a few weeks into use holds; returns each page's path and the heading it shows."""
    store, db, now = world.store, world.store.db, utcnow()
    store.add(ALICE, "Alice works at the Lisbon office of Example Ltd", type="fact", domain="work")
    cello = store.add(ALICE, "Alice plays the cello on Thursdays", type="fact", domain="music", scope="episodic")
    store.add(CAROL, "Carol is allergic to peanuts", type="fact", domain="health")
    store.add(CAROL, "Carol's invoices go to accounts@carol.example", type="fact", domain="work")
    store.add("dan@example.org", "Dan writes in Portuguese", type="preference")
    store.add("erin@example.org", "Erin is moving to Porto in March", type="fact", domain="home", scope="episodic")
    edited = store.update(world.memory_id, "Alice's sister is called Joanna",
                          reason="edited in the console by root: she wrote to correct it")  # fmt: skip
    detail = f"new version: memory {edited}; she wrote to correct it"
    audit_log.record(db, "root", "edit memory", f"memory {world.memory_id}", user_id=ALICE, detail=detail,
                     now=now - timedelta(days=2))  # fmt: skip

    add_mail(db, 3, mail_bytes("Cello on Thursday", "m3@example.org"), ALICE, "replied")
    add_mail(db, 4, mail_bytes("=?x-klingon?q?Qapla?=", "m4@example.org", CAROL), CAROL, "quarantined",
             "unparseable: unknown charset x-klingon")  # fmt: skip
    add_mail(db, 5, mail_bytes("Invoice 2026-118", "m5@example.org", CAROL), CAROL, "processing")
    MailLedger(db).defer(MailKey("INBOX", 1, 5), "model unreachable: connection refused", now + timedelta(minutes=4))
    for message_id in ("<m1@example.org>", "<m3@example.org>"):  # conversation recall's passages, and a file's
        index_message(store, ALICE, message_id, "in")
    lease = Extracted("lease.pdf", "application/pdf", "pdf", 9, "ab" * 32, (Section("p.1", "The lease runs a year."),))
    keep_documents(store, ALICE, "<m3@example.org>", None, [lease],
                   [Attachment("lease.pdf", "application/pdf", 9, b"x" * 9)], max_file_bytes=1024)  # fmt: skip
    opt_out(db, CAROL, now - timedelta(days=4), "<m4@example.org>")

    prompts = PromptStore(admin_dir, samples=sample_variables)
    default_version, default_text = prompts.text_of("reply")
    proposals.keep_version(db, default_version, "reply", default_text, now - timedelta(days=9))
    trials = TemplateTrials()
    first = proposals.save(
        db, prompts, trials.check("reply", EXTEND.replace("MARK", "Example")), now - timedelta(days=3)
    )
    saved = proposals.save(db, prompts, trials.check("reply", EXTEND.replace("MARK", "Example Ltd, Lisbon")),
                           now - timedelta(days=1))  # fmt: skip
    for old, new, days, why in ((default_version, first, 3, "sign as the company"), (first, saved, 1, "full name")):
        audit_log.record(db, "root", "save template", "template reply", detail=f"{old} -> {new}; {why}",
                         now=now - timedelta(days=days))  # fmt: skip
    digest_version, digest_text = prompts.text_of("digest")
    proposals.keep_version(db, digest_version, "digest", digest_text, now - timedelta(days=9))
    proposal = proposals.add(db, "digest", digest_version,
                             digest_text.replace("Write a friendly, readable digest", "Write a short digest (at "
                                                 "most 15 lines)"), "Three people asked for shorter digests.",
                             {"scored": 12, "mean_reward": -0.3, "suggestions": ["too long", "shorter please"]},
                             now - timedelta(hours=5))  # fmt: skip

    shown = Trace(memories=(ShownMemory(edited, "profile"), ShownMemory(cello, "search", 0.82, 0.71)),
                  tools=(ToolUse("search_memory", (cello,), found=1),), domains=("music", "family"))  # fmt: skip
    replies = [
        ("<m3@example.org>", shown, reply_trace.PASSED, 1),
        ("<m1@example.org>", Trace(), reply_trace.REJECTED, None),
    ]
    for day, (message_id, trace, gate, learnt) in enumerate(replies):
        reply_trace.record(db, ALICE, message_id, "reply", saved, trace, now - timedelta(days=day, hours=1))
        reply_trace.learnt(db, message_id, gate, learnt)
    record_usage(db, "reply", Usage("qwen2.5:7b", 1830, 96, 2), user_id=ALICE, message_id="<m3@example.org>")
    [trace_id] = [t.id for t in reply_trace.for_user(db, ALICE) if t.message_id == "<m3@example.org>"]

    runs = RunLog(db)
    for job, counts in (("decay", {"decayed": 41}), ("reflect", {"processed": 4, "promoted": 1}),
                        ("cleanup", {"deleted": 3})):  # fmt: skip
        runs.finish(runs.start(job, now - timedelta(minutes=30), "test"), now - timedelta(minutes=29), OK, counts)
    audit_log.record(db, "root", "run job", "job decay", now=now - timedelta(minutes=30))
    failed = runs.start("summarize", now - timedelta(minutes=8), "test")
    runs.finish(failed, now - timedelta(minutes=8), "failed", {}, "model unreachable: connection refused")
    return {
        "people": "/people",
        "person": f"/people/{ALICE}",
        "memory": f"/memories/{edited}",
        "why": f"/replies/{trace_id}",
        "prompts": "/prompts",
        "prompt": "/prompts/reply",
        "prompt-diff": f"/prompts/reply/diff?from={first}&to=current",
        "proposals": "/proposals",
        "proposal": f"/proposals/{proposal}",
        "mail": "/mail",
        "jobs": "/jobs",
        "audit": "/audit",
    }


@pytest.fixture
def seeded(world: World, tmp_path: Path) -> Iterator[Seeded]:
    server, admin_dir = full_console(world, tmp_path)
    pages = seed(world, admin_dir)
    server.start()
    try:
        yield Seeded(server.url.rstrip("/"), pages)
    finally:
        server.stop()


HEADINGS = {"people": "People", "person": ALICE, "memory": "Memory ", "why": "Why did Quinn say that?",
            "prompts": "Prompts", "prompt": "Prompt reply", "prompt-diff": "Prompt reply: from reply@",
            "proposals": "Template proposals", "proposal": "Proposal ", "mail": "Mail", "jobs": "Jobs and health",
            "audit": "Audit"}  # fmt: skip


def shown_fine(driver, url: str, heading: str) -> None:  # type: ignore[no-untyped-def]
    """The page at ``url`` is itself: not the login page, not an error page, not a server error."""
    from selenium.webdriver.common.by import By

    assert driver.current_url == url, driver.current_url
    assert "Internal Server Error" not in driver.page_source
    assert not driver.find_elements(By.CSS_SELECTOR, "p.error"), driver.find_element(By.TAG_NAME, "main").text
    assert driver.find_element(By.TAG_NAME, "h1").text.startswith(heading)


def save_shot(driver, folder: Path, name: str) -> None:  # type: ignore[no-untyped-def]
    """The page as a PNG; with Pillow, reduced to a palette (a screenshot of text and flat colours)."""
    png = driver.get_screenshot_as_png()
    try:
        from PIL import Image
    except ImportError:
        (folder / f"{name}.png").write_bytes(png)
        return
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(PALETTE, dither=Image.Dither.NONE)
    image.save(folder / f"{name}.png", optimize=True)


@pytest.mark.timeout(300)  # a browser walking 24 pages on a loaded 2-core machine
def test_every_page_renders_for_both_roles(world, seeded, browser):
    from selenium.webdriver.common.by import By

    driver, url = browser, seeded.url
    shots = os.environ.get("QUINN_CONSOLE_SCREENSHOTS")
    folder = Path(shots) if shots else None
    if folder:
        folder.mkdir(parents=True, exist_ok=True)
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", SHOT_SIZE)  # the page itself is 1200x800
    for name in ("viewer", "root"):  # the admin last: the screenshots are theirs
        log_in(driver, url, name)
        assert driver.find_element(By.CSS_SELECTOR, "span.who").text.startswith(name)
        for page, path in seeded.pages.items():
            driver.get(url + path)
            shown_fine(driver, url + path, HEADINGS[page])
            # No page scrolls sideways at 1200 px (issue 34: the person page did, with a reply's Message-ID).
            wide = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            scroll_width, client_width = driver.execute_script(wide)
            assert scroll_width <= client_width, f"{page}: {scroll_width} px wide in a {client_width} px window"
            if folder and name == "root":
                if page == "prompt":  # the editor, below the variables
                    driver.execute_script("scrollTo(0, document.getElementById('source').offsetTop - 110)")
                save_shot(driver, folder, page)
            if name == "viewer":  # may look, is offered no change
                assert not driver.find_elements(By.CSS_SELECTOR, CHANGES), page
        if name == "viewer":
            driver.find_element(By.CSS_SELECTOR, "header button").click()  # log out
            arrive(driver, f"{url}/login")

    # The editor refuses a template with an error and says where (the Prompts page in use).
    driver.get(url + seeded.pages["prompt"])
    box = driver.find_element(By.ID, "source")
    box.clear()
    box.send_keys(BROKEN)
    driver.find_element(By.ID, "save-template").click()
    arrive(driver, f"{url}/prompts/reply/save")
    error = driver.find_element(By.CSS_SELECTOR, "p.error").text
    assert "Not saved" in error and "supper" in error
    if folder:
        save_shot(driver, folder, "prompt-error")
    assert "supper()" in driver.find_element(By.ID, "source").get_attribute("value")  # the text is kept to fix
