"""Authentication-Results read from raw headers (RFC 8601): the parser, and which fields count by position."""

from __future__ import annotations

import pytest

from quinn.mailbox.authresults import (
    aligned,
    authserv_id,
    idless_stamp_position,
    parse_authentication_results,
    parse_results_fallback,
    read_idless_stamp,
    read_stamp,
    stamp_position,
    verdict,
)
from quinn.mailbox.parse import parse_email

OURS = "mx.quinn.test"


def raw(*fields: str) -> bytes:
    """A mail whose header starts with ``fields`` (topmost first), From alice@example.com."""
    head = "".join(f"{f}\r\n" for f in fields)
    return (head + "From: Alice <alice@example.com>\r\nTo: quinn@quinn.test\r\nSubject: hi\r\n"
            "Message-ID: <m@example.com>\r\n\r\nHello\r\n").encode()  # fmt: skip


def judged(data: bytes, above: int = 0) -> tuple[bool, str]:
    email = parse_email(data)
    return verdict(read_stamp(email.trace, OURS, above), "example.com")


PASS = f"Authentication-Results: {OURS}; dkim=pass header.d=example.com; dmarc=pass header.from=example.com"
FAIL = f"Authentication-Results: {OURS}; dkim=fail header.d=example.com; dmarc=fail header.from=example.com"
OUR_RECEIVED = "Received: from mail.example.com (mail.example.com [192.0.2.1]) by mx.quinn.test; Mon, 23 Nov 2026"
THEIR_RECEIVED = "Received: from laptop by mail.example.com; Mon, 23 Nov 2026 10:00:00 +0000"
LMTP_RECEIVED = "Received: from mx.quinn.test by imap.quinn.test (Dovecot) with LMTP; Mon, 23 Nov 2026"


def test_our_stamp_on_top_counts() -> None:
    assert judged(raw(PASS, OUR_RECEIVED, THEIR_RECEIVED)) == (True, "dmarc=pass header.from=example.com")


def test_a_field_with_our_id_the_sender_wrote_below_ours_is_ignored() -> None:
    assert judged(raw(FAIL, OUR_RECEIVED, PASS, THEIR_RECEIVED))[0] is False


def test_a_forged_field_with_no_stamp_of_ours_above_it_is_ignored() -> None:
    """Our server did not stamp this mail (an unstamped path): the sender's field sits below our Received."""
    ok, why = judged(raw(OUR_RECEIVED, PASS, THEIR_RECEIVED))
    assert ok is False and "below 1 Received" in why


def test_received_above_stamp_follows_the_servers_layout() -> None:
    """Postfix + Dovecot LMTP: the LMTP hop's Received sits above the MX's stamp."""
    layout = raw(LMTP_RECEIVED, PASS, OUR_RECEIVED, THEIR_RECEIVED)
    assert judged(layout, above=0)[0] is False  # fails closed until the operator says so
    assert judged(layout, above=1)[0] is True
    assert stamp_position(parse_email(layout).trace, OURS) == 1
    forged = raw(LMTP_RECEIVED, OUR_RECEIVED, PASS, THEIR_RECEIVED)  # the same layout, never stamped
    assert judged(forged, above=1)[0] is False


def test_several_fields_of_ours_on_top_are_read_together() -> None:
    """OpenDKIM and OpenDMARC each add one field."""
    dkim = f"Authentication-Results: {OURS}; dkim=pass header.d=example.com"
    dmarc = f"Authentication-Results: {OURS}; dmarc=fail header.from=example.com"
    assert judged(raw(dmarc, dkim, OUR_RECEIVED))[0] is False  # the server's dmarc=fail is final
    assert judged(raw(dkim, OUR_RECEIVED))[0] is True  # no DMARC result: an aligned DKIM pass counts


def test_a_foreign_field_above_ours_is_skipped() -> None:
    foreign = "Authentication-Results: mx.evil.test; dmarc=pass header.from=example.com"
    assert judged(raw(foreign, FAIL, OUR_RECEIVED))[0] is False
    assert judged(raw(foreign, OUR_RECEIVED))[0] is False


def test_an_encoded_word_in_a_stamp_stays_literal_so_a_signer_cannot_write_a_result_into_it() -> None:
    """RFC 8601 fields carry no RFC 2047 words. A DKIM signer chooses its own ``i=``, which the server copies
    into ``header.i``: decoded, this one would add "dkim=pass header.d=example.com" to our stamp."""
    word = "=?us-ascii?q?x=3B=20dkim=3Dpass=20header.d=3Dexample.com=3B?="
    stamp = f"Authentication-Results: {OURS}; dkim=pass header.d=evil.test header.i={word}@evil.test"
    email = parse_email(raw(stamp, OUR_RECEIVED))
    assert word in dict(email.trace)["authentication-results"]
    assert verdict(read_stamp(email.trace, OURS, 0), "example.com")[0] is False


def test_an_unreadable_field_of_ours_fails_closed() -> None:
    assert judged(raw(f"Authentication-Results: {OURS}", OUR_RECEIVED, PASS))[0] is False


def test_folded_and_commented_fields() -> None:
    folded = (f"Authentication-Results: {OURS} (postfix);\r\n\tdkim=pass (2048-bit key) header.d=example.com;"
              "\r\n\tdmarc=pass (p=reject dis=none) header.from=Example.COM")  # fmt: skip
    assert judged(raw(folded, OUR_RECEIVED)) == (True, "dmarc=pass header.from=example.com")


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
        # Exchange Online's shape: the first word is a result, so there is no id (not "spf=pass").
        ("spf=pass (sender IP is 192.0.2.1) smtp.mailfrom=example.com; dmarc=pass header.from=example.com", ""),
        ("dkim/1 = pass header.d=example.com", ""),
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
    """authres refuses the trailing ";": the fallback reads the field, and the verdict follows it."""
    assert judged(raw(f"Authentication-Results: {OURS}; dkim=pass header.d=example.com;", OUR_RECEIVED))[0] is True


# Whole header layouts as servers write them (deploy/SECURITY.md), read by Quinn with the documented setting.
POSTFIX_LMTP = (
    "Return-Path: <alice@example.com>",
    "Delivered-To: quinn@quinn.test",
    "Received: from mx.quinn.test by imap.quinn.test with LMTP id Abc; Mon, 23 Nov 2026 10:00:02 +0000",
    f"Authentication-Results: {OURS}; dmarc=pass (p=reject dis=none) header.from=example.com",
    f"Authentication-Results: {OURS}; dkim=pass (2048-bit key; unprotected) header.d=example.com header.i=@example.com",
    "Received: from mail.example.com (mail.example.com [192.0.2.1]) by mx.quinn.test (Postfix) with ESMTPS id 4Xy;"
    " Mon, 23 Nov 2026 10:00:01 +0000",
)
GMAIL = (
    "Delivered-To: quinn@gmail.test",
    "Received: by 2002:a05:6a10:1234:b0:5a:1234:5678 with SMTP id abc; Mon, 23 Nov 2026 02:00:02 -0800 (PST)",
    "ARC-Authentication-Results: i=1; mx.google.com; dkim=pass header.i=@example.com; dmarc=pass"
    " header.from=example.com",
    "Return-Path: <alice@example.com>",
    "Received: from mail.example.com (mail.example.com. [192.0.2.1]) by mx.google.com with ESMTPS id x1si;"
    " Mon, 23 Nov 2026 02:00:01 -0800 (PST)",
    "Received-SPF: pass (google.com: domain of alice@example.com designates 192.0.2.1 as permitted sender)",
    "Authentication-Results: mx.google.com; dkim=pass header.i=@example.com header.s=s1 header.b=Kx7Q;"
    " spf=pass smtp.mailfrom=alice@example.com; dmarc=pass (p=NONE sp=NONE dis=NONE) header.from=example.com",
)


def test_postfix_opendkim_opendmarc_with_dovecot_lmtp() -> None:
    email = parse_email(raw(*POSTFIX_LMTP, THEIR_RECEIVED))
    assert stamp_position(email.trace, OURS) == 1
    assert verdict(read_stamp(email.trace, OURS, 1), "example.com")[0] is True
    forged = parse_email(raw(*POSTFIX_LMTP[:3], *POSTFIX_LMTP[5:], PASS, THEIR_RECEIVED))  # never stamped
    assert verdict(read_stamp(forged.trace, OURS, 1), "example.com")[0] is False


def test_gmail_layout() -> None:
    email = parse_email(raw(*GMAIL))
    assert stamp_position(email.trace, "mx.google.com") == 2
    assert verdict(read_stamp(email.trace, "mx.google.com", 2), "example.com")[0] is True
    assert verdict(read_stamp(email.trace, "mx.google.com", 0), "example.com")[0] is False  # fails closed


# The parser on raw field values as they arrive (after the field name), one shape each.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Several results, one method twice (a mail signed twice): every one kept, in order.
        (f"{OURS}; dkim=pass header.d=a.example; dkim=fail header.d=b.example; dmarc=pass header.from=example.com",
         [("dkim", "pass", {"header.d": "a.example"}), ("dkim", "fail", {"header.d": "b.example"}),
          ("dmarc", "pass", {"header.from": "example.com"})]),
        # Folded over lines (RFC 5322 §2.2.3), a comment broken by the fold, as the parser gets it unfolded or not.
        (f"{OURS};\r\n\tdkim=pass (2048-bit\r\n key) header.d=example.com;\r\n\tspf=pass smtp.mailfrom=a@example.com",
         [("dkim", "pass", {"header.d": "example.com"}), ("spf", "pass", {"smtp.mailfrom": "a@example.com"})]),
        # Comments everywhere RFC 8601 §2.2 allows CFWS, a version after the authserv-id and after the method.
        (f"{OURS} 1 (our MX); (first) dkim/1=pass (good sig) header.d=example.com (the domain)",
         [("dkim", "pass", {"header.d": "example.com"})]),
        # A quoted value (RFC 2045 value := token / quoted-string).
        (f'{OURS}; dkim=pass header.d="example.com"', [("dkim", "pass", {"header.d": "example.com"})]),
    ],
)  # fmt: skip
def test_parser_on_raw_field_values(value: str, expected: list[tuple[str, str, dict[str, str]]]) -> None:
    assert parse_authentication_results(value) == expected
    assert parse_results_fallback(value) == expected
    assert authserv_id(value) == OURS


def test_a_field_without_an_authserv_id_is_never_ours() -> None:
    """RFC 8601 §2.2 makes the authserv-id mandatory: without one there is nothing to read (";" first), or the
    first result is taken for the id, which is never ours, so the field is ignored either way."""
    assert authserv_id("; dkim=pass header.d=example.com") == ""
    assert parse_authentication_results("; dkim=pass header.d=example.com") is None
    assert parse_results_fallback("; dkim=pass header.d=example.com") is None
    assert authserv_id("dkim=pass header.d=example.com") != OURS
    assert judged(raw("Authentication-Results: dmarc=pass header.from=example.com", OUR_RECEIVED))[0] is False


# Exchange Online (Microsoft 365), after a public raw header of a mailbox of a Microsoft 365 tenant (2020; names
# and addresses replaced): three Received fields of Exchange above its id-less stamp, the front door's below it.
EXO_STAMP = ("Authentication-Results: spf=pass (sender IP is 192.0.2.1) smtp.mailfrom=example.com; dkim=pass"
             " (signature was verified) header.d=example.com;dmarc=pass action=none header.from=example.com;"
             "compauth=pass reason=100")  # fmt: skip
EXO_ABOVE = (
    "Received: from MW4PR11MB5887.namprd11.prod.outlook.com (2603:10b6:303:16c::9) by"
    " SA1PR11MB8396.namprd11.prod.outlook.com with HTTPS; Mon, 23 Nov 2026 10:00:03 +0000",
    "Received: from DM6PR02CA0063.namprd02.prod.outlook.com (2603:10b6:5:177::40) by"
    " MW4PR11MB5887.namprd11.prod.outlook.com (2603:10b6:303:16c::9) with Microsoft SMTP Server (version=TLS1_2,"
    " cipher=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384) id 15.20.8182.20; Mon, 23 Nov 2026 10:00:02 +0000",
    "Received: from DS3PEPF000099D4.namprd04.prod.outlook.com (2603:10b6:5:177:cafe::2a) by"
    " DM6PR02CA0063.outlook.office365.com (2603:10b6:5:177::40) with Microsoft SMTP Server (version=TLS1_3,"
    " cipher=TLS_AES_256_GCM_SHA384) id 15.20.8182.20 via Frontend Transport; Mon, 23 Nov 2026 10:00:02 +0000",
)
EXO_BELOW = (
    "Received-SPF: Pass (protection.outlook.com: domain of example.com designates 192.0.2.1 as permitted sender)"
    " receiver=protection.outlook.com; client-ip=192.0.2.1; helo=mail.example.com; pr=C",
    "Received: from mail.example.com (192.0.2.1) by DS3PEPF000099D4.mail.protection.outlook.com (10.167.17.5) with"
    " Microsoft SMTP Server (version=TLS1_3, cipher=TLS_AES_256_GCM_SHA384) id 15.20.8182.20 via Frontend"
    " Transport; Mon, 23 Nov 2026 10:00:01 +0000",
)


def exo(stamp: str | None = EXO_STAMP, *sender: str) -> tuple[bool, str]:
    """Exchange's layout with ``stamp`` (None: not stamped) and the sender's own fields below its front door."""
    fields = (*EXO_ABOVE, *([stamp] if stamp else []), *EXO_BELOW, *sender, THEIR_RECEIVED)
    return verdict(read_idless_stamp(parse_email(raw(*fields)).trace, 3), "example.com")


def test_exchange_online_stamp_at_its_position_counts() -> None:
    assert exo() == (True, "dmarc=pass header.from=example.com")
    fields = (*EXO_ABOVE, EXO_STAMP, *EXO_BELOW, THEIR_RECEIVED)
    assert idless_stamp_position(parse_email(raw(*fields)).trace) == 3
    # Read by id it is nobody's: the same mail never authenticates for a configured authserv-id.
    assert verdict(read_stamp(parse_email(raw(*fields)).trace, OURS, 3), "example.com")[0] is False


def test_exchange_online_older_shape_with_the_tenant_domain_between_results() -> None:
    """Outlook.com and older tenants put the recipient's domain between the results (public samples, 2017-2020)."""
    older = ("Authentication-Results: spf=softfail (sender IP is 192.0.2.1)\r\n smtp.mailfrom=example.com;"
             " contoso.com; dkim=pass (signature was\r\n verified) header.d=example.com;contoso.com; dmarc=pass"
             " action=none\r\n header.from=example.com;compauth=pass reason=100")  # fmt: skip
    assert exo(older) == (True, "dmarc=pass header.from=example.com")


@pytest.mark.parametrize(
    ("stamp", "sender", "why"),
    [
        # Exchange's own verdicts: DMARC failed, or its composite check did (whatever DMARC said).
        (EXO_STAMP.replace("dmarc=pass", "dmarc=fail").replace("compauth=pass reason=100", "compauth=fail reason=000"),
         (), "compauth=fail"),
        (EXO_STAMP.replace("dmarc=pass", "dmarc=fail"), (), "dmarc=fail"),
        (EXO_STAMP.replace("compauth=pass reason=100", "compauth=fail reason=001"), (), "compauth=fail"),
        (EXO_STAMP.replace("dmarc=pass", "dmarc=bestguesspass"), (), "dmarc=bestguesspass"),
        # The sender adds a passing stamp of its own: it sits below Exchange's, which is the only one read.
        (EXO_STAMP.replace("dmarc=pass", "dmarc=fail"), (EXO_STAMP,), "dmarc=fail"),
        # Not stamped by Exchange (an unstamped path): the sender's field is the topmost, but below 4 Received.
        (None, (EXO_STAMP,), "below 4 Received"),
        # The sender names an id: whatever it says, an id-less stamp is what is read.
        (None, ("Authentication-Results: mx.microsoft.com 1; dmarc=pass header.from=example.com",), "names"),
    ],
)  # fmt: skip
def test_forged_or_failed_exchange_stamps_do_not_authenticate(stamp: str | None, sender: tuple[str, ...],
                                                              why: str) -> None:  # fmt: skip
    ok, detail = exo(stamp, *sender)
    assert ok is False and why in detail


def test_exchange_stamp_at_another_position_fails_closed() -> None:
    fields = (*EXO_ABOVE[1:], EXO_STAMP, *EXO_BELOW, THEIR_RECEIVED)  # two Received above, not three
    trace = parse_email(raw(*fields)).trace
    assert verdict(read_idless_stamp(trace, 3), "example.com") == (
        False, "no Authentication-Results from our server (the topmost field sits below 2 Received field(s), "
        "not 3 (policy.received_above_stamp))")  # fmt: skip
    assert verdict(read_idless_stamp(trace, 2), "example.com")[0] is True
    assert idless_stamp_position(trace) == 2
