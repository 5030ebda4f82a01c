"""The first end-to-end slice: a reply that remembers, across a restart, through real servers.

alice mails Quinn through SMTP; ``quinn run`` (a subprocess) fetches it over IMAP from Dovecot, asks the
scripted model (over HTTP, through Mirascope and the OpenAI SDK), replies over SMTP, and extracts memories into
the libSQL file with real embeddings. After a SIGTERM and a restart, a new thread's prompt must carry them.
"""

from __future__ import annotations

import email
import email.policy
import json

from tests.lab.brain import EXTRACTION
from tests.lab.llm_server import REPLY, Json, RecordedRequest, Text
from tests.lab.mails import make_mail


def scripted_model(alice: str):
    """Answers like a model would: JSON for the extraction prompt, text for replies."""

    def respond(request: RecordedRequest) -> Json | Text:
        if request.purpose == EXTRACTION:
            if "Python on Linux" in request.text:
                return Json({
                    "new": [
                        {"content": "Alice prefers answers in Spanish.", "type": "preference", "importance": 0.8},
                        {"content": "Alice runs Python on Linux.", "type": "fact", "importance": 0.7,
                         "tags": ["tech"]},
                    ],
                    "updated": [], "contradicted": [],
                })  # fmt: skip
            return Json({"new": [], "updated": [], "contradicted": []})
        return Text("Hola Alice, gracias por tu correo.")

    return respond


def test_reply_remembers_across_restart(mail_lab, lab_config, llm_server, quinn_daemon):
    alice = mail_lab.new_user("alice")
    config = lab_config()
    quinn = config.address
    llm_server.responder = scripted_model(alice)

    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    first_id = "<first-1@example.test>"
    mail_lab.smtp.send(alice, quinn, make_mail(f"Alice Example <{alice}>", quinn, "Hello", "Hi, I'm Alice. I "
                                               "prefer answers in Spanish and I run Python on Linux.",
                                               message_id=first_id))  # fmt: skip
    [reply_raw] = mail_lab.dovecot.wait_for_messages(alice, 1, timeout_s=60)
    reply = email.message_from_bytes(reply_raw, policy=email.policy.default)
    assert reply["In-Reply-To"] == first_id
    assert first_id in reply["References"]
    assert reply["Subject"] == "Re: Hello"
    assert reply["Auto-Submitted"] == "auto-replied"
    assert "Hola Alice" in reply.get_body(("plain",)).get_content()
    daemon.wait_for_log("extraction for", timeout_s=30)
    assert daemon.terminate() == 0
    # The handled mail was filed away with \Answered, out of the inbox.
    assert mail_lab.dovecot.messages(quinn) == []
    assert len(mail_lab.dovecot.messages(quinn, "Quinn.Processed") or mail_lab.dovecot.messages(
        quinn, "Quinn/Processed")) == 1  # fmt: skip

    first_requests = len(llm_server.requests)
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    mail_lab.smtp.send(alice, quinn, make_mail(f"Alice Example <{alice}>", quinn, "Quick question",
                                               "Which OS do I use?", message_id="<second-1@example.test>"))  # fmt: skip
    replies = mail_lab.dovecot.wait_for_messages(alice, 2, timeout_s=60)
    assert len(replies) == 2
    second = [r for r in llm_server.requests[first_requests:] if "Which OS do I use?" in r.text
              and r.purpose == REPLY]  # fmt: skip
    assert second, "the second email never reached the model"
    prompt = second[0].text
    # Retrieved by search (a fact, not a profile preference) and cited, from the libSQL file across the restart.
    assert "Alice runs Python on Linux." in prompt
    assert "[memory:" in prompt
    assert "Alice prefers answers in Spanish." in prompt  # the profile travels with every prompt
    assert daemon.terminate() == 0
    assert json.loads(json.dumps(second[0].body_json))  # the request was a real JSON body over HTTP
