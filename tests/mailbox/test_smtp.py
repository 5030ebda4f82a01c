"""Composing replies (threading headers, RFC 3834 marks, HTML alternative, recipients) and sending them over
SMTP to the lab's aiosmtpd: plain, AUTH, STARTTLS and implicit TLS, temporary and permanent refusals."""

from __future__ import annotations

import email
import email.policy
from collections.abc import Callable
from pathlib import Path

import pytest

from quinn.errors import ConfigError, ConnectError, RetryLater
from quinn.mailbox.parse import MAX_ADDRESSES, parse_email
from quinn.mailbox.smtp import (
    MAX_REFERENCES,
    MaybeSent,
    SmtpSender,
    compose_reply,
    reply_all_cc,
    reply_message_id,
)
from tests.lab.dovecot import Dovecot
from tests.lab.mails import lab_settings, make_mail
from tests.lab.smtp import SmtpLab

QUINN = "quinn@quinn.test"
Users = Callable[[str], str]


def inbound(**kwargs: object) -> email.message.EmailMessage:
    raw = make_mail(kwargs.pop("sender", "Alice <alice@example.test>"), kwargs.pop("to", QUINN), **kwargs)  # type: ignore[arg-type]
    return parse_email(raw)  # type: ignore[return-value]


def parsed(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=email.policy.default)  # type: ignore[return-value]


# --- composing ----------------------------------------------------------------------------------------


def test_reply_headers() -> None:
    mail = inbound(
        subject="AW: Re: Q3 report",
        message_id="<m2@example.test>",
        in_reply_to="<m1@example.test>",
        references=["<m0@example.test>", "<m1@example.test>"],
    )
    reply = compose_reply(mail, "Thanks!", own_address=QUINN, own_name="Quinn")  # type: ignore[arg-type]
    msg = parsed(reply.raw)
    assert msg["Message-ID"] == reply.message_id == reply_message_id("<m2@example.test>", QUINN)
    assert reply.message_id.endswith("@quinn.test>")
    assert msg["In-Reply-To"] == "<m2@example.test>"
    assert msg["References"].split() == ["<m0@example.test>", "<m1@example.test>", "<m2@example.test>"]
    assert msg["Subject"] == "Re: Q3 report"
    assert msg["Auto-Submitted"] == "auto-replied"
    assert msg["X-Auto-Response-Suppress"] == "All"
    assert msg["X-Quinn-Loop"] == QUINN
    assert msg["From"] == f"Quinn <{QUINN}>"


def test_message_id_is_deterministic_so_a_retry_reuses_it() -> None:
    mail = inbound(message_id="<m1@example.test>")
    first = compose_reply(mail, "one", own_address=QUINN)  # type: ignore[arg-type]
    second = compose_reply(mail, "two", own_address=QUINN)  # type: ignore[arg-type]
    assert first.message_id == second.message_id
    assert reply_message_id("<m2@example.test>", QUINN) != first.message_id


def test_plain_text_and_an_escaped_html_alternative() -> None:
    body = "Hello Alice,\n\nuse <b>x & y</b>\nnext line.\n\nQuinn"
    reply = compose_reply(inbound(), body, own_address=QUINN)  # type: ignore[arg-type]
    msg = parsed(reply.raw)
    assert msg.get_content_type() == "multipart/alternative"
    assert msg.get_body(("plain",)).get_content().replace("\r\n", "\n").strip() == body  # type: ignore[union-attr]
    html = msg.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "<p>Hello Alice,</p>" in html
    assert "use &lt;b&gt;x &amp; y&lt;/b&gt;<br>next line.</p>" in html
    assert "<b>" not in html


def test_references_are_trimmed_keeping_the_root() -> None:
    chain = [f"<r{i}@example.test>" for i in range(40)]
    reply = compose_reply(
        inbound(message_id="<last@example.test>", references=chain),
        "x",  # type: ignore[arg-type]
        own_address=QUINN,
    )
    refs = parsed(reply.raw)["References"].split()
    assert len(refs) == MAX_REFERENCES
    assert refs[0] == "<r0@example.test>" and refs[-1] == "<last@example.test>"


@pytest.mark.parametrize(
    ("headers", "to"),
    [
        ({}, ["alice@example.test"]),
        ({"Reply-To": "Team <team@example.test>, alice@example.test"}, ["team@example.test", "alice@example.test"]),
    ],
)
def test_to_is_reply_to_or_from(headers: dict[str, str], to: list[str]) -> None:
    reply = compose_reply(inbound(headers=headers), "x", own_address=QUINN)  # type: ignore[arg-type]
    assert reply.recipients == to
    assert parsed(reply.raw)["To"] == ", ".join(to)
    assert parsed(reply.raw)["Cc"] is None


def test_reply_all_keeps_the_others_on_cc_only_when_configured() -> None:
    mail = inbound(
        to=[QUINN, "bob@example.test"], cc=["Quinn+work@quinn.test", "carol@example.test", "alice@example.test"]
    )
    assert reply_all_cc(mail, QUINN) == ["bob@example.test", "carol@example.test"]  # type: ignore[arg-type]
    plain = compose_reply(mail, "x", own_address=QUINN)  # type: ignore[arg-type]
    assert plain.recipients == ["alice@example.test"] and parsed(plain.raw)["Cc"] is None
    everyone = compose_reply(mail, "x", own_address=QUINN, reply_all=True)  # type: ignore[arg-type]
    assert parsed(everyone.raw)["Cc"] == "bob@example.test, carol@example.test"
    assert everyone.recipients == ["alice@example.test", "bob@example.test", "carol@example.test"]


def test_a_reply_goes_to_at_most_the_cap_and_says_how_many_got_nothing() -> None:
    """Issue 30: 300 Reply-To addresses made one reply to 301 recipients. To first, then Cc, up to the cap; the
    body counts the rest and names none of them."""
    victims = [f"v{i}@victims.test" for i in range(300)]
    mail = inbound(headers={"Reply-To": ", ".join(victims)}, cc=["carol@example.test"])
    reply = compose_reply(mail, "Hello.", own_address=QUINN, reply_all=True, max_recipients=5)  # type: ignore[arg-type]
    # The parser keeps the first MAX_ADDRESSES of a field (issue 30's parsing bounds); the rest never reach a reply.
    kept = MAX_ADDRESSES + 1  # and carol on Cc
    assert reply.recipients == victims[:5] and reply.left_out == kept - 5 and parsed(reply.raw)["Cc"] is None
    assert reply.body.startswith("Hello.") and f"{kept - 5} of them got nothing" in reply.body
    assert not [v for v in victims if v in reply.body]
    few = compose_reply(inbound(cc=["carol@example.test"]), "Hi.", own_address=QUINN, reply_all=True,  # type: ignore[arg-type]
                        max_recipients=5)  # fmt: skip
    assert few.recipients == ["alice@example.test", "carol@example.test"] and few.left_out == 0 and few.body == "Hi."


# --- sending ------------------------------------------------------------------------------------------


def sender_for(dovecot: Dovecot, user: str, lab: SmtpLab, **smtp: object) -> SmtpSender:
    return SmtpSender(lab_settings(dovecot, user, smtp_port=lab.port, smtp=dict(smtp)).smtp)


async def test_plain_send_reaches_the_inbox(dovecot: Dovecot, smtp_lab: SmtpLab, users: Users) -> None:
    quinn, alice = users("quinn"), users("alice")
    raw = make_mail(quinn, alice, subject="plain")
    await sender_for(dovecot, quinn, smtp_lab).send(raw, quinn, [alice])
    [got] = dovecot.messages(alice)
    assert b"Subject: plain" in got


@pytest.mark.parametrize("tls", ["none", "starttls", "ssl"])
async def test_auth_over_each_transport(dovecot: Dovecot, users: Users, tls_cert: tuple[Path, Path], tls: str) -> None:
    quinn, alice = users("quinn"), users("alice")
    with SmtpLab(dovecot, auth=("quinn", "s3cret"), tls=tls, cert=None if tls == "none" else tls_cert) as lab:
        settings = {"tls": tls, "username": "quinn", "password_env": "SMTP_PW", "ca_file": str(tls_cert[0])}
        good = lab_settings(dovecot, quinn, smtp_port=lab.port, smtp=settings, env={"SMTP_PW": "s3cret"}).smtp
        bad = lab_settings(dovecot, quinn, smtp_port=lab.port, smtp=settings, env={"SMTP_PW": "wrong"}).smtp
        await SmtpSender(good).send(make_mail(quinn, alice, subject=f"via {tls}"), quinn, [alice])
        await SmtpSender(good).check()
        with pytest.raises(ConfigError, match="SMTP login as quinn rejected"):
            await SmtpSender(bad).send(make_mail(quinn, alice), quinn, [alice])
        with pytest.raises(ConnectError, match="SMTP login as quinn rejected"):
            await SmtpSender(bad).check()
    assert [b"Subject: via " + tls.encode() in m for m in dovecot.messages(alice)] == [True]


async def test_tls_without_the_ca_is_refused(dovecot: Dovecot, users: Users, tls_cert: tuple[Path, Path]) -> None:
    quinn = users("quinn")
    with SmtpLab(dovecot, tls="ssl", cert=tls_cert) as lab, pytest.raises(RetryLater, match="VERIFY_FAILED") as caught:
        await sender_for(dovecot, quinn, lab, tls="ssl").send(make_mail(quinn, "a@x.test"), quinn, ["a@x.test"])
    assert not isinstance(caught.value, MaybeSent)


async def test_temporary_and_permanent_refusals(dovecot: Dovecot, smtp_lab: SmtpLab, users: Users) -> None:
    quinn, alice = users("quinn"), users("alice")
    sender = sender_for(dovecot, quinn, smtp_lab)
    smtp_lab.fail_next(1, 451)
    with pytest.raises(RetryLater, match="451") as temporary:
        await sender.send(make_mail(quinn, alice), quinn, [alice])
    assert not isinstance(temporary.value, MaybeSent)  # a 4xx answer: certainly not accepted
    smtp_lab.fail_next(1, 554)
    with pytest.raises(ConnectError, match="permanently: 554"):
        await sender.send(make_mail(quinn, alice), quinn, [alice])
    assert dovecot.messages(alice) == []


async def test_server_down_is_retry_later_not_maybe_sent(dovecot: Dovecot, smtp_lab: SmtpLab, users: Users) -> None:
    quinn = users("quinn")
    smtp_lab.down()
    with pytest.raises(RetryLater, match="unreachable") as caught:
        await sender_for(dovecot, quinn, smtp_lab).send(make_mail(quinn, "a@example.test"), quinn, ["a@example.test"])
    assert not isinstance(caught.value, MaybeSent)
