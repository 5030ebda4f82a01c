"""Observability: the Prometheus endpoint, JSON logs, and secrets and mail bodies kept out of the logs."""

from __future__ import annotations

import io
import json
import logging
import re
import time
import urllib.request
from email.message import EmailMessage

import pytest
from imapclient import IMAPClient
from prometheus_client.parser import text_string_to_metric_families

from quinn.lab.wait import wait_for
from quinn.logs import RedactingFilter, setup_logging
from quinn.metrics import Metrics
from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import Error, Json, RecordedRequest, Text

FAST = '[embeddings]\nbackend = "none"\n'


def mail(sender: str, to: str, subject: str, body: str, message_id: str) -> bytes:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"], msg["Message-ID"] = sender, to, subject, message_id
    msg["Date"] = "Sat, 21 Nov 2026 09:00:00 +0000"
    msg.set_content(body)
    return msg.as_bytes()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def test_metrics_endpoint_reports_mail_replies_tokens_latency_and_errors(mail_lab, lab_config, llm_server,
                                                                         quinn_daemon):  # fmt: skip
    alice = mail_lab.new_user("alice")
    config = lab_config(extra=FAST + "[metrics]\nenabled = true\nport = 0\n")
    calls = {"reply": 0}

    def respond(request: RecordedRequest):
        if request.purpose == EXTRACTION:
            return Json({"new": [], "updated": [], "contradicted": []})
        calls["reply"] += 1
        return Error(503, "overloaded") if calls["reply"] == 1 else Text("Metrics reply.")

    llm_server.responder = respond
    daemon = quinn_daemon(config)
    daemon.wait_for_log("metrics on http://127.0.0.1:", timeout_s=60)
    port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", daemon.log()).group(1))
    url = f"http://127.0.0.1:{port}/metrics"
    before = scrape(url)
    assert before[("quinn_database_up", ())] == 1

    quinn = config.address
    mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "First", "This one meets a model error", "<m-1@x.test>"))
    daemon.wait_for_log("deferred")  # the 503 defers the mail (retried later, with backoff)
    second = "I moved to Lisbon in May and I prefer short answers in Portuguese."  # passes the sensory gate
    mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "Second", second, "<m-2@x.test>"))
    mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    daemon.wait_for_log("extraction for")
    # The extract stage is timed until extraction returns, after its log line: on a loaded box it was not yet in.
    wait_for(lambda: ("quinn_stage_seconds_count", (("stage", "extract"),)) in scrape(url), "the extract stage timed",
             timeout_s=30, log=daemon.log)  # fmt: skip
    after = scrape(url)
    assert after[("quinn_mails", (("state", "replied"),))] == 1
    assert after[("quinn_mails", (("state", "deferred"),))] == 1
    assert after[("quinn_replies", (("state", "sent"),))] == 1
    assert after[("quinn_mails_finished_total", (("state", "replied"),))] == 1
    model = "openai/gpt-test"
    assert after[("quinn_llm_tokens_total", (("direction", "input"), ("model", model)))] > 0
    assert after[("quinn_llm_tokens_total", (("direction", "output"), ("model", model)))] > 0
    assert after[("quinn_llm_calls_total", (("model", model), ("purpose", "reply")))] == 1
    errors = {k: v for k, v in after.items() if k[0] == "quinn_llm_errors_total"}
    assert list(errors.values()) == [1] and dict(next(iter(errors))[1])["model"] == model
    # Every stage of one mail's path (bench/pipeline.py reports them), then the wider ones around them.
    for stage in ("fetch", "parse", "thread", "retrieve", "render", "llm", "send", "mark", "reply", "extract", "mail"):
        assert after[("quinn_stage_seconds_count", (("stage", stage),))] >= 1, stage
    assert ("quinn_memories", (("scope", "profile"),)) not in after  # no memory was written: no invented rows
    assert daemon.terminate() == 0


def test_kept_stage_samples_are_the_histograms_observations() -> None:
    metrics = Metrics()
    with metrics.stage("fetch"):
        pass
    assert metrics.samples is None  # off unless asked for: quinn run keeps no list that grows
    metrics.keep_samples()
    started = time.time()
    with metrics.stage("parse"):
        time.sleep(0.002)
    with pytest.raises(ValueError), metrics.stage("send"):
        raise ValueError("a failing stage is timed too")
    assert metrics.samples is not None
    assert [s.stage for s in metrics.samples] == ["parse", "send"]
    parse = metrics.samples[0]
    assert parse.duration_s >= 0.002 and started <= parse.started_at_s <= started + 1
    histogram = {(s.name, s.labels.get("stage")): s.value for f in metrics.stage_seconds.collect() for s in f.samples}
    assert histogram[("quinn_stage_seconds_count", "parse")] == 1
    assert histogram[("quinn_stage_seconds_sum", "parse")] == pytest.approx(parse.duration_s)


# -- logs --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "secret_free"),
    [
        ("> b'ELDG1 LOGIN quinn@example.org \"hunter2-imap\"'", "> b'ELDG1 LOGIN ***"),
        ("> b'ABCD7 AUTHENTICATE PLAIN AHF1aW5uAGh1bnRlcjI='", "> b'ABCD7 AUTHENTICATE ***"),
        ("send: 'AUTH PLAIN AHF1aW5uAGh1bnRlcjI=\\r\\n'", "send: 'AUTH PLAIN ***"),
        ("headers={'Authorization': 'Bearer sk-proj-abcdefghijklmnop1234'}", "headers={'Authorization': 'Bearer ***'}"),
        ("Authorization: Basic  abcdefghijklmnop", "Authorization: Basic  ***"),
        ('authorization="abcdefghijklmnop"', 'authorization="***"'),
        ("x-api-key: sk-ant-api03-abcdefghijklmnop", "x-api-key: ***"),
        ("client(api_key='not-a-real-key-value')", "client(api_key='***')"),
        ("database libsql://admin:tok3n@db.example.org", "database libsql://***@db.example.org"),
        ("the configured secret s3cr3t-value appears", "the configured secret *** appears"),
    ],
)  # fmt: skip
def test_redaction_filter_removes_credentials(line, secret_free):
    redactor = RedactingFilter(["s3cr3t-value"])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s", (line,), None)
    assert redactor.filter(record)
    assert record.getMessage().startswith(secret_free)
    for secret in ("hunter2", "AHF1aW5u", "abcdefghijklmnop", "not-a-real-key-value", "tok3n", "s3cr3t-value"):
        assert secret not in record.getMessage()


def test_redaction_is_not_a_redos():
    """Every log line passes the redaction: "authorization:" then a long run of spaces and no token made two
    "\\s*" share the run (quadratic: 16,000 spaces 4.5 s)."""
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s", ("Authorization:" + " " * 60_000,), None)
    started = time.monotonic()
    assert RedactingFilter([]).filter(record)
    assert time.monotonic() - started < 5


def test_redaction_keeps_ordinary_messages_and_cleans_tracebacks():
    redactor = RedactingFilter(["pw-123456"])
    ordinary = (
        "IMAP login as quinn@example.org at 127.0.0.1:143 rejected: [AUTHENTICATIONFAILED]",
        "mail uid=3 id=<a@b> from=alice@example.org: handle (allowed)",
        "received SIGTERM: login later",
    )
    for text in ordinary:
        record = logging.LogRecord("x", logging.INFO, __file__, 1, text, None, None)
        redactor.filter(record)
        assert record.getMessage() == text
    try:
        raise ValueError("connect failed with password pw-123456")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, sys.exc_info())
    redactor.filter(record)
    assert "pw-123456" not in record.exc_text and "connect failed with password" in record.exc_text


def test_imapclient_protocol_trace_is_redacted_at_debug(dovecot, users):
    """imapclient's own protocol trace, through Quinn's handler, with the IMAP password as a configured secret."""
    stream = io.StringIO()
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    redactor = setup_logging("DEBUG", "text", [dovecot.password])
    handler = logging.getLogger().handlers[0]
    handler.setStream(stream)
    trace = logging.getLogger("imapclient")
    trace.setLevel(logging.DEBUG)  # an operator digging into IMAP turns this on by hand
    try:
        client = IMAPClient(dovecot.host, port=dovecot.port, ssl=False, timeout=10)
        client.login(users("trace"), dovecot.password)
        client.select_folder("INBOX")
        logging.getLogger("quinn.test").debug("imap password was %s", dovecot.password)
        client.logout()
    finally:
        root.removeHandler(handler)
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        trace.setLevel(logging.NOTSET)
    output = stream.getvalue()
    assert "LOGIN" in output and "SELECT" in output  # the trace is there
    assert dovecot.password not in output
    assert "imap password was ***" in output
    assert redactor.secrets == [dovecot.password]


def test_json_debug_logs_hold_no_secret_and_no_mail_body(mail_lab, lab_config, llm_server, quinn_daemon):
    alice = mail_lab.new_user("alice")
    config = lab_config(extra=FAST)
    config.path.write_text(config.path.read_text().replace('log_level = "INFO"', 'log_level = "DEBUG"\n'
                                                           'log_format = "json"'))  # fmt: skip
    config.env["QUINN_TEST_LLM_KEY"] = "sk-test-distinctive-llm-key-4242"
    body = "My bank PIN is 8812 and my diary says CONFIDENTIAL-BODY-PHRASE."

    def respond(request: RecordedRequest):
        if request.purpose == EXTRACTION:
            return Json({"new": [], "updated": [], "contradicted": []})
        return Text("REPLY-BODY-PHRASE, thanks.")

    llm_server.responder = respond
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=60)
    quinn = config.address
    mail_lab.smtp.send(alice, quinn, mail(alice, quinn, "Private", body, "<private-1@x.test>"))
    mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    daemon.wait_for_log("extraction for")
    assert daemon.terminate() == 0
    lines = [json.loads(line) for line in daemon.log().splitlines() if line.strip()]
    assert {"time", "level", "logger", "message"} <= set(lines[0])
    assert any(entry["level"] == "DEBUG" for entry in lines) or any("handle" in e["message"] for e in lines)
    assert any("<private-1@x.test>" in entry["message"] for entry in lines)  # ids are logged
    text = daemon.log()
    for secret in (config.env["QUINN_TEST_IMAP_PASSWORD"], "sk-test-distinctive-llm-key-4242"):
        assert secret not in text
    for private in ("CONFIDENTIAL-BODY-PHRASE", "8812", "REPLY-BODY-PHRASE"):
        assert private not in text
