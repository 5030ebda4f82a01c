"""The console in a real browser: Debian's chromium, headless, driven by Selenium through chromium-driver, against
the console served by uvicorn on 127.0.0.1. Log in, find a person, edit a memory, see the new version; edit a
template with an error and see the message, fix it and see the preview with a person's memory, save, roll back;
retry a quarantined mail from the Mail page and see it retried, in the ledger and in the audit log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from quinn.agent import audit_log
from quinn.console.serve import ConsoleServer
from quinn.mailbox.ledger import MailKey, MailLedger
from tests.console.conftest import ALICE, BROKEN, EXTEND, PASSWORDS, World, add_mail, full_console, mail_bytes


@pytest.fixture
def served(world: World) -> Iterator[str]:
    world.console.config.port = 0  # any free port
    server = ConsoleServer(world.console.config, world.store)
    server.start()
    try:
        yield server.url.rstrip("/")
    finally:
        server.stop()


def arrive(driver, url: str) -> None:  # type: ignore[no-untyped-def]
    """Wait until the browser shows ``url``: a click returns before the next page has loaded."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 15).until(expected_conditions.url_to_be(url))


def log_in(driver, served: str, name: str = "root") -> None:  # type: ignore[no-untyped-def]
    from selenium.webdriver.common.by import By

    driver.get(f"{served}/people")
    assert driver.current_url == f"{served}/login"  # no page without a login
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "password").send_keys(PASSWORDS[name])
    driver.find_element(By.ID, "login").click()
    arrive(driver, f"{served}/people")


def test_log_in_find_a_person_edit_a_memory_see_the_new_version(world, served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    log_in(driver, served)

    driver.find_element(By.ID, "q").send_keys("alice")
    driver.find_element(By.ID, "find").click()
    arrive(driver, f"{served}/people?q=alice")
    driver.find_element(By.LINK_TEXT, ALICE).click()
    arrive(driver, f"{served}/people/{ALICE}")
    assert "Alice's sister is called Jo" in driver.page_source

    driver.find_element(By.LINK_TEXT, str(world.memory_id)).click()
    arrive(driver, f"{served}/memories/{world.memory_id}")
    box = driver.find_element(By.ID, "edit-content")
    box.clear()
    box.send_keys("Alice's sister is called Joanna")
    driver.find_element(By.ID, "edit-reason").send_keys("she wrote to correct it")
    driver.find_element(By.ID, "save").click()
    WebDriverWait(driver, 15).until(lambda d: d.current_url != f"{served}/memories/{world.memory_id}")

    assert driver.find_element(By.ID, "content").text == "Alice's sister is called Joanna"
    versions = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "table.versions tbody tr")]
    assert len(versions) == 2 and "called Jo " in versions[0] + " " and "Joanna" in versions[1]
    changes = driver.find_element(By.CSS_SELECTOR, "table.changes").text
    assert "edited in the console by root: she wrote to correct it" in changes
    new_id = int(driver.current_url.rsplit("/", 1)[1])
    assert world.store.get(new_id).current and not world.store.get(world.memory_id).current

    # Attacker-controlled text in a real browser: shown as text, never run (an alert would fail the next call).
    add_mail(world.store.db, 9, mail_bytes("<script>alert('subject')</script>", "m9@example.org"), ALICE,
             "quarantined", "<img src=x onerror=alert('reason')>")  # fmt: skip
    driver.find_element(By.LINK_TEXT, "Mail").click()
    arrive(driver, f"{served}/mail")
    row = driver.find_element(By.CSS_SELECTOR, "table.mail tbody tr").text
    assert "<script>alert('subject')</script>" in row and "<img src=x onerror=alert('reason')>" in row
    assert driver.execute_script("return document.querySelectorAll('main script, main img').length") == 0


@pytest.fixture
def served_with_prompts(world: World, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    server, admin_dir = full_console(world, tmp_path)
    server.start()
    try:
        yield server.url.rstrip("/"), admin_dir
    finally:
        server.stop()


def test_edit_a_template_see_the_error_fix_it_preview_save_and_roll_back(served_with_prompts, browser):
    from selenium.webdriver.common.by import By

    served, admin_dir = served_with_prompts
    driver = browser
    log_in(driver, served)
    driver.find_element(By.LINK_TEXT, "Prompts").click()
    arrive(driver, f"{served}/prompts")
    assert "packaged default" in driver.page_source
    driver.find_element(By.LINK_TEXT, "reply").click()
    arrive(driver, f"{served}/prompts/reply")
    default_version = driver.find_element(By.ID, "version").text

    def write(source: str) -> None:
        box = driver.find_element(By.ID, "source")
        box.clear()
        box.send_keys(source)

    write(BROKEN)
    driver.find_element(By.ID, "save-template").click()
    arrive(driver, f"{served}/prompts/reply/save")
    error = driver.find_element(By.CSS_SELECTOR, "p.error").text
    assert "Not saved" in error and "supper" in error and "reply.j2:" in error
    assert list(admin_dir.iterdir()) == []

    write(EXTEND.replace("MARK", "the browser"))
    driver.find_element(By.ID, "preview-user").send_keys(ALICE)
    driver.find_element(By.ID, "preview").click()
    arrive(driver, f"{served}/prompts/reply/preview")
    system = driver.find_element(By.ID, "preview-system").text
    user = driver.find_element(By.ID, "preview-user-message").text  # recall opens the user message (reply.j2)
    assert 'Sign as "Quinn from the browser".' in system and "Alice's sister is called Jo" in user
    assert list(admin_dir.iterdir()) == []  # a preview saves nothing

    driver.find_element(By.ID, "save-template").click()
    arrive(driver, f"{served}/prompts/reply")
    assert driver.find_element(By.ID, "version").text != default_version
    assert "Quinn from the browser" in (admin_dir / "reply.j2").read_text(encoding="utf-8")
    assert "the admin's copy" in driver.page_source

    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    shown = driver.find_element(By.ID, "version")
    driver.find_element(By.ID, "rollback-default").click()  # back to the same address: wait for the new page
    WebDriverWait(driver, 15).until(expected_conditions.staleness_of(shown))
    arrive(driver, f"{served}/prompts/reply")
    assert driver.find_element(By.ID, "version").text == default_version
    assert not (admin_dir / "reply.j2").exists()
    driver.find_element(By.LINK_TEXT, "Audit").click()
    arrive(driver, f"{served}/audit")
    rows = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "table.audit tbody tr")]
    assert "roll back template" in rows[0] and "save template" in rows[1] and len(rows) == 2


def test_retry_a_quarantined_mail_and_see_it_retried_and_audited(world, served_with_prompts, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    served, _admin_dir = served_with_prompts  # the console `quinn console` serves: retry wired from the config
    reason = "unparseable: unknown charset x-klingon"
    add_mail(world.store.db, 9, mail_bytes("Lost in quarantine", "m9@example.org"), ALICE, "quarantined", reason)
    ledger, key = MailLedger(world.store.db), MailKey("INBOX", 1, 9)
    driver = browser
    log_in(driver, served)
    driver.find_element(By.LINK_TEXT, "Mail").click()
    arrive(driver, f"{served}/mail")
    row = driver.find_element(By.XPATH, "//table[@class='mail']/tbody/tr[td='Lost in quarantine']")
    assert "quarantined" in row.text and reason in row.text and "INBOX:1:9" in row.text
    assert len(driver.find_elements(By.CSS_SELECTOR, "button.retry")) == 2  # the failed mail's and this one's
    row.find_element(By.CSS_SELECTOR, "button.retry").click()
    WebDriverWait(driver, 15).until(lambda d: "retried=" in d.current_url)

    status = driver.find_element(By.CSS_SELECTOR, "p.ok").text
    assert status.startswith("Mail INBOX:1:9 goes round again"), status
    row = driver.find_element(By.XPATH, "//table[@class='mail']/tbody/tr[td='Lost in quarantine']")
    assert row.find_element(By.CSS_SELECTOR, "td.state-retried").text == "retried"
    assert "was: " + reason in row.text and not row.find_elements(By.CSS_SELECTOR, "button.retry")
    record = ledger.get(key)
    assert record is not None and record.state == "retried" and record.attempts == 0
    assert f"(was: {reason})" in record.reason
    assert ledger.get(MailKey("INBOX", 1, 2)).state == "failed"  # the other one was left alone

    driver.find_element(By.LINK_TEXT, "Audit").click()
    arrive(driver, f"{served}/audit")
    [row] = driver.find_elements(By.CSS_SELECTOR, "table.audit tbody tr")
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1:] == ["root", "retry mail", "mail INBOX:1:9", ALICE, "was quarantined; still in the watched folder"]
    [entry] = audit_log.listing(world.store.db)
    assert (entry.actor, entry.action, entry.object, entry.user_id) == ("root", "retry mail", "mail INBOX:1:9", ALICE)
