"""decide() and its helpers: fixtures for the named cases, small built emails for the variants."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from quinn.errors import ConfigError
from quinn.mailbox.message import Address, InboundEmail
from quinn.mailbox.parse import parse_email
from quinn.mailbox.policy import (
    Decision,
    Rules,
    aligned,
    authenticated,
    authserv_id,
    decide,
    normalise_address,
    normalise_subject,
    parse_authentication_results,
    parse_results_fallback,
    reply_subject,
    user_for,
)

MAIL = Path(__file__).parent / "fixtures" / "mail"
QUINN = "quinn@quinn.test"
OURS = "mx.quinn.test"
RULES = Rules(own_address=QUINN, authserv_id=OURS)
STRICT = replace(RULES, require_authentication=True)


def fixture(name: str) -> InboundEmail:
    return parse_email((MAIL / name).read_bytes())


def mail(
    headers: dict[str, str | list[str]] | None = None,
    *,
    sender: str | None = "alice@example.com",
    to: tuple[str, ...] = (QUINN,),
    cc: tuple[str, ...] = (),
    content_type: str = "text/plain",
    message_id: str = "<m1@example.com>",
) -> InboundEmail:
    """An InboundEmail as parse_email would build it, with only what the policy reads."""
    fields: dict[str, tuple[str, ...]] = {}
    if sender is not None:
        fields["from"] = (sender,)
    for name, value in (headers or {}).items():
        fields[name.lower()] = tuple(value) if isinstance(value, list) else (value,)
    return InboundEmail(
        message_id=message_id,
        in_reply_to=None,
        references=(),
        from_=Address("", sender) if sender else None,
        to=tuple(Address("", a) for a in to),
        cc=tuple(Address("", a) for a in cc),
        reply_to=(),
        subject="Hello",
        date=None,
        text="Hi",
        full_text="Hi",
        headers=fields,
        content_type=content_type,
    )


def ar(*values: str) -> dict[str, str | list[str]]:
    return {"Authentication-Results": list(values)}


# --- the fixtures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "action", "reason"),
    [
        ("plain.eml", "handle", "authentication not required"),
        ("reply_de.eml", "handle", "authentication not required"),
        ("auto_reply.eml", "ignore", "auto-submitted: auto-replied"),
        ("vacation.eml", "ignore", "autoreply header: X-Autoreply"),
        ("bounce.eml", "ignore", "bounce: null Return-Path"),
        ("list.eml", "ignore", "list mail: List-Id"),
        ("bulk.eml", "ignore", "precedence: bulk"),
        ("mailer_daemon.eml", "ignore", "automated sender: mailer-daemon@mx.example.com"),
        ("noreply.eml", "ignore", "automated sender: no-reply-orders+123@shop.example.com"),
    ],
)
def test_fixture_decisions(name: str, action: str, reason: str) -> None:
    decision = decide(fixture(name), RULES)
    assert decision.action == action
    assert decision.reason.startswith(reason)
    assert (decision.user_id is not None) == (action == "handle")


def test_handle_carries_the_user_and_memory() -> None:
    decision = decide(fixture("plain.eml"), RULES)
    assert decision == Decision(
        "handle", decision.reason, user_id="alice@example.com", authenticated=False, use_memory=True
    )


# --- our own mail and loops --------------------------------------------------------------------------


@pytest.mark.parametrize("sender", [QUINN, "Quinn@Quinn.TEST", "quinn+notes@quinn.test"])
def test_own_mail_is_ignored(sender: str) -> None:
    decision = decide(mail({"Auto-Submitted": "auto-replied"}, sender=sender), RULES)
    assert decision.action == "ignore" and decision.reason == "own mail: From is quinn"  # checked first


def test_loop_header_is_ignored() -> None:
    assert decide(mail({"X-Quinn-Loop": QUINN}), RULES).reason == "own mail: X-Quinn-Loop present"
    custom = replace(RULES, loop_header="X-Other-Loop")
    assert decide(mail({"x-other-loop": "1"}), custom).action == "ignore"


def test_message_id_in_our_domain() -> None:
    with_domain = replace(RULES, own_message_id_domain="Quinn.Test")
    assert decide(mail(message_id="<abc@quinn.test>"), with_domain).reason == "own mail: Message-ID in our domain"
    # Without the setting only Quinn's own id shape counts: users of the same domain are not Quinn.
    assert decide(mail(message_id="<abc@quinn.test>"), RULES).action == "handle"
    ours = "<quinn." + "0123456789abcdef" * 2 + "@quinn.test>"
    assert decide(mail(message_id=ours), RULES).reason == "own mail: Message-ID is one of ours"


# --- never reply (RFC 3834 and practice) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("auto-generated", "auto-submitted: auto-generated"),
        ("auto-notified", "auto-submitted: auto-notified"),
        ("AUTO-REPLIED (vacation)", "auto-submitted: auto-replied"),
        ("auto-replied;owner-email=a@b", "auto-submitted: auto-replied"),
        ("", "auto-submitted: empty"),
    ],
)
def test_auto_submitted(value: str, reason: str) -> None:
    assert decide(mail({"Auto-Submitted": value}), RULES) == Decision("ignore", reason)


@pytest.mark.parametrize("value", ["no", "No", " no (human)"])
def test_auto_submitted_no_is_a_person(value: str) -> None:
    assert decide(mail({"Auto-Submitted": value}), RULES).action == "handle"


@pytest.mark.parametrize(("value", "action"), [("bulk", "ignore"), ("List", "ignore"), ("junk", "ignore"),
                                               ("first-class", "handle")])  # fmt: skip
def test_precedence(value: str, action: str) -> None:
    assert decide(mail({"Precedence": value}), RULES).action == action


@pytest.mark.parametrize("name", ["List-Id", "List-Unsubscribe", "List-Post", "Feedback-ID"])
def test_list_headers(name: str) -> None:
    assert decide(mail({name: "x"}), RULES) == Decision("ignore", f"list mail: {name}")


@pytest.mark.parametrize(("value", "action"), [("<>", "ignore"), ("< >", "ignore"), ("<alice@example.com>", "handle")])
def test_return_path(value: str, action: str) -> None:
    assert decide(mail({"Return-Path": value}), RULES).action == action


def test_multipart_report_is_a_bounce() -> None:
    decision = decide(mail(content_type="multipart/report"), RULES)
    assert decision == Decision("ignore", "bounce: multipart/report")


@pytest.mark.parametrize(
    "local",
    ["MAILER-DAEMON", "postmaster", "no-reply", "noreply", "do-not-reply", "donotreply", "bounce", "bounces",
     "bounces+abc=example.com", "no-reply-xyz", "noreply+tag", "github-noreply", "noreply.billing", "no_reply"],
)  # fmt: skip
def test_robot_senders(local: str) -> None:
    decision = decide(mail(sender=f"{local.lower()}@example.com"), RULES)
    assert decision.action == "ignore" and decision.reason.startswith("automated sender: ")


@pytest.mark.parametrize("local", ["alice", "reply", "replyall", "bouncer", "noreplyx", "norbert", "alice+bounce2"])
def test_people_are_not_robots(local: str) -> None:
    assert decide(mail(sender=f"{local}@example.com"), RULES).action == "handle"


@pytest.mark.parametrize(("value", "action"), [("All", "ignore"), ("OOF, AutoReply", "ignore"),
                                               ("DR, NDR", "handle"), ("OOF", "handle")])  # fmt: skip
def test_x_auto_response_suppress(value: str, action: str) -> None:
    assert decide(mail({"X-Auto-Response-Suppress": value}), RULES).action == action


@pytest.mark.parametrize("name", ["X-Autoreply", "X-Autorespond"])
def test_autoreply_headers(name: str) -> None:
    assert decide(mail({name: "yes"}), RULES) == Decision("ignore", f"autoreply header: {name}")


def test_received_loop() -> None:
    assert decide(mail({"Received": ["by x"] * 30}), RULES).action == "handle"
    assert decide(mail({"Received": ["by x"] * 31}), RULES) == Decision("ignore", "mail loop: 31 Received headers")


def test_no_from() -> None:
    assert decide(mail(sender=None), RULES) == Decision("ignore", "no From")


# --- addressing and allowlist ------------------------------------------------------------------------


def test_not_addressed_to_quinn() -> None:
    assert decide(mail(to=("bob@example.com",)), RULES) == Decision("ignore", "not addressed to quinn")
    assert decide(mail(to=("bob@example.com",), cc=(QUINN,)), RULES).action == "handle"
    assert decide(mail(to=("quinn+work@quinn.test",)), RULES).action == "handle"


def test_allowlist() -> None:
    rules = replace(RULES, allow=("alice@example.com", "friends.test", "@Club.Test"))
    assert decide(mail(sender="bob@evil.test"), rules) == Decision("reject", "not allowed: bob@evil.test")
    assert decide(mail(sender="alice@example.com"), rules).action == "handle"
    assert decide(mail(sender="carol@friends.test"), rules).action == "handle"
    assert decide(mail(sender="dave@club.test"), rules).action == "handle"
    assert decide(mail(sender="eve@sub.friends.test"), rules).action == "reject"  # no subdomains
    assert decide(mail(sender="eve@evilfriends.test"), rules).action == "reject"


def test_aliases_map_to_the_main_user_and_the_allowlist() -> None:
    rules = replace(RULES, allow=("alice@home.test",), aliases={"alice@home.test": ["Alice@Work.test"]})
    decision = decide(mail(sender="alice@work.test"), rules)
    assert decision.action == "handle" and decision.user_id == "alice@home.test"


def test_user_for_and_normalise_address() -> None:
    aliases = {"alice@home.test": ["alice@work.test", "a@old.test"]}
    assert user_for("A@Old.Test", aliases) == "alice@home.test"
    assert user_for("alice@home.test", aliases) == "alice@home.test"
    assert user_for("bob@x.test", aliases) == "bob@x.test"
    assert normalise_address(" Alice <Alice+Tag@Example.COM> ") == "alice+tag@example.com"
    assert normalise_address("BOB@X.TEST") == "bob@x.test"


def test_rules_validate_their_choices() -> None:
    with pytest.raises(ConfigError, match="unauthenticated"):
        Rules(own_address=QUINN, unauthenticated="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="not an email address"):
        Rules(own_address="quinn")


# --- authentication (RFC 8601) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ok", "why"),
    [
        ("forged_ar.eml", False, "no pass aligned with example.com (dkim=fail, spf=fail, dmarc=fail)"),
        ("wrong_authserv.eml", False, "no Authentication-Results from mx.quinn.test"),
        ("dkim_aligned.eml", True, "dkim=pass header.d=mail.example.com"),
        ("dkim_unaligned.eml", False, "no pass aligned with example.com (dkim=pass, spf=pass)"),
        ("dmarc_pass.eml", True, "dmarc=pass header.from=example.com"),
        ("plain.eml", False, "no Authentication-Results from mx.quinn.test"),
    ],
)
def test_authentication_fixtures(name: str, ok: bool, why: str) -> None:
    assert authenticated(fixture(name), STRICT) == (ok, why)


def test_unauthenticated_gets_no_memory_or_is_rejected() -> None:
    forged = fixture("forged_ar.eml")
    decision = decide(forged, STRICT)
    assert (decision.action, decision.user_id, decision.authenticated, decision.use_memory) == (
        "handle", "alice@example.com", False, False
    )  # fmt: skip
    assert decision.reason.startswith("sender not authenticated")
    rejected = decide(forged, replace(STRICT, unauthenticated="reject"))
    assert rejected.action == "reject" and rejected.reason.startswith("sender not authenticated")
    good = decide(fixture("dkim_aligned.eml"), STRICT)
    assert (good.action, good.authenticated, good.use_memory) == ("handle", True, True)
    assert good.reason == "authenticated: dkim=pass header.d=mail.example.com"


def test_authentication_is_reported_when_not_required() -> None:
    decision = decide(fixture("dmarc_pass.eml"), RULES)
    assert (decision.action, decision.authenticated, decision.use_memory) == ("handle", True, True)
    assert decide(fixture("dmarc_pass.eml"), replace(RULES, authserv_id=None)).authenticated is False


def test_only_the_topmost_of_ours_counts() -> None:
    fail, good = f"{OURS}; dkim=fail header.d=example.com", f"{OURS}; dkim=pass header.d=example.com"
    assert authenticated(mail(ar(fail, good)), STRICT)[0] is False  # a pass below ours is forged
    assert authenticated(mail(ar(good, fail)), STRICT)[0] is True
    # A foreign field above ours (say a later filter) is skipped; ours still decides, either way.
    foreign_pass = "mx.evil.test; dkim=pass header.d=example.com; dmarc=pass header.from=example.com"
    assert authenticated(mail(ar(foreign_pass, fail)), STRICT)[0] is False
    assert authenticated(mail(ar("mx.evil.test; dkim=fail", good)), STRICT)[0] is True
    assert authenticated(mail(ar("MX.Quinn.Test 1; dkim=pass header.d=example.com")), STRICT)[0] is True


def test_unreadable_field_of_ours_fails_closed() -> None:
    # Our topmost field cannot be read: never fall through to one further down.
    assert authenticated(mail(ar(f"{OURS}", f"{OURS}; dkim=pass header.d=example.com")), STRICT)[0] is False


@pytest.mark.parametrize(
    ("results", "ok"),
    [
        ("dkim=pass header.i=@example.com", True),
        ("dkim=pass header.i=alice@mail.example.com", True),
        ("dkim=pass header.d=evil.test header.i=@evil.test", False),
        ("dkim=pass header.d=com", False),
        ("dkim=pass header.d=notexample.com", False),
        ("spf=pass smtp.mailfrom=bounce@mail.example.com", True),
        ("spf=pass smtp.mailfrom=example.com", True),
        ("spf=pass smtp.mailfrom=bounce@esp.test", False),
        ("spf=fail smtp.mailfrom=example.com", False),
        ("dmarc=pass header.from=other.test", False),
        ("dmarc=fail header.from=example.com", False),
        ('dkim=pass header.d=example.com reason="ok"', True),
        ("none", False),
    ],
)
def test_alignment_rules(results: str, ok: bool) -> None:
    assert authenticated(mail(ar(f"{OURS}; {results}")), STRICT)[0] is ok


def test_several_from_addresses_never_authenticate() -> None:
    email = mail({"From": ["alice@example.com", "mallory@evil.test"], **ar(f"{OURS}; dkim=pass header.d=example.com")})
    assert authenticated(email, STRICT) == (False, "not exactly one From address")


def test_no_authserv_id_configured() -> None:
    rules = replace(STRICT, authserv_id=None)
    assert authenticated(fixture("dkim_aligned.eml"), rules) == (False, "no authserv_id configured")
    assert decide(fixture("dkim_aligned.eml"), rules).use_memory is False


@pytest.mark.parametrize(
    ("aligned_domain", "from_domain", "ok"),
    [
        ("example.com", "example.com", True),
        ("Mail.Example.com", "example.com", True),
        ("example.com", "sub.example.com", True),
        ("evil.test", "example.com", False),
        ("notexample.com", "example.com", False),
        ("com", "example.com", False),
        ("", "example.com", False),
    ],
)
def test_aligned(aligned_domain: str, from_domain: str, ok: bool) -> None:
    assert aligned(aligned_domain, from_domain) is ok


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("mx.quinn.test; none", "mx.quinn.test"),
        ("MX.Quinn.Test 1; dkim=pass", "mx.quinn.test"),
        ("(filter) mx.quinn.test (comment); spf=pass", "mx.quinn.test"),
        ('"mx.quinn.test"; spf=pass', "mx.quinn.test"),
        ("", ""),
    ],
)
def test_authserv_id(value: str, expected: str) -> None:
    assert authserv_id(value) == expected


# Real shapes (Gmail, Microsoft, Fastmail, OpenDKIM): authres reads them, and the fallback must agree.
REAL_FIELDS = [
    "mx.google.com;\t dkim=pass header.i=@example.com header.s=20230601 header.b=Kx7Qw3Ab;\t spf=pass "
    "(google.com: domain of alice@example.com designates 209.85.220.41 as permitted sender) "
    "smtp.mailfrom=alice@example.com;\t dmarc=pass (p=NONE sp=NONE dis=NONE) header.from=example.com",
    "mx.microsoft.com 1; spf=pass (sender ip is 1.2.3.4) smtp.mailfrom=example.com; dkim=pass (signature was "
    "verified) header.d=example.com;dmarc=pass action=none header.from=example.com;compauth=pass reason=100",
    "mx.messagingengine.com; dkim=pass (2048-bit rsa key sha256) header.d=example.com header.i=@example.com "
    "header.b=Abc header.a=rsa-sha256 header.s=fm1 x-bits=2048; iprev=pass smtp.remote-ip=1.2.3.4 "
    "(mail.example.com); spf=pass smtp.mailfrom=alice@example.com smtp.helo=mail.example.com",
    'mx.quinn.test; dkim=fail reason="signature verification failed" header.d=example.com header.b=abc+/=',
]


@pytest.mark.parametrize("value", REAL_FIELDS)
def test_authres_and_fallback_agree_on_real_fields(value: str) -> None:
    with_authres = parse_authentication_results(value)
    assert with_authres, "authres should read this shape"
    assert parse_results_fallback(value) == with_authres


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # authres refuses both of these (a trailing ";" and an angle-bracketed mailfrom); the fallback reads them.
        (f"{OURS}; dkim=pass header.d=example.com;", [("dkim", "pass", {"header.d": "example.com"})]),
        (f"{OURS}; spf=pass smtp.mailfrom=<a@example.com>", [("spf", "pass", {"smtp.mailfrom": "<a@example.com>"})]),
        # A quoted reason or a comment can never inject a property.
        (f'{OURS}; dkim=fail reason="header.d=example.com" header.d=evil.test',
         [("dkim", "fail", {"header.d": "evil.test"})]),
        (f"{OURS}; dkim=pass (header.d=example.com) header.d=evil.test", [("dkim", "pass", {"header.d": "evil.test"})]),
        (f"{OURS}; none", []),
    ],
)  # fmt: skip
def test_fallback_parser_shapes(value: str, expected: list[tuple[str, str, dict[str, str]]]) -> None:
    assert parse_authentication_results(value) == expected
    assert parse_results_fallback(value) == expected


def test_fallback_used_end_to_end() -> None:
    email = mail(ar(f"{OURS}; spf=pass smtp.mailfrom=<alice@example.com>;"))
    assert authenticated(email, STRICT) == (True, "spf=pass smtp.mailfrom=example.com")


# --- subjects ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "normalised", "reply"),
    [
        ("Q3 report", "q3 report", "Re: Q3 report"),
        ("Re: Q3 report", "q3 report", "Re: Q3 report"),
        ("RE: re: Fwd: Q3   report", "q3 report", "Re: Q3 report"),
        ("AW: WG: Antw: Q3 report", "q3 report", "Re: Q3 report"),
        ("SV: VS: TR: RV: FW: Q3 report", "q3 report", "Re: Q3 report"),
        ("Re[2]: Re(3): Q3 report", "q3 report", "Re: Q3 report"),
        ("Re : Q3 report", "q3 report", "Re: Q3 report"),
        ("  Re:Re:Q3 report ", "q3 report", "Re: Q3 report"),
        ("Regarding: Q3", "regarding: q3", "Re: Regarding: Q3"),
        ("Aware: of it", "aware: of it", "Re: Aware: of it"),
        ("", "", "Re:"),
    ],
)
def test_subjects(subject: str, normalised: str, reply: str) -> None:
    assert normalise_subject(subject) == normalised
    assert reply_subject(subject) == reply
