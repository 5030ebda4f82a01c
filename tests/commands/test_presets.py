"""`quinn init --provider gmail|microsoft365|outlook|fastmail|generic` (issue 33): each preset writes a config
that validates and names the provider's hosts, login method, OAuth endpoints and scopes, and the stamp that makes
trust work on the first start; a raw Gmail-style and a Postfix+Dovecot-LMTP-style header block authenticate
with their preset, so does an Exchange Online one (Microsoft 365, Outlook.com: a stamp without an authserv-id)
while forged variants do not, and `quinn check`'s trust line says when the Received count is wrong."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from quinn import cli
from quinn.commands import init
from quinn.config import Config, load_config
from quinn.engine import parts
from quinn.mailbox import check_trust, parse_email
from quinn.mailbox.policy import authenticated, decide

MS = "https://login.microsoftonline.com/{}/oauth2/v2.0/"
OUTLOOK_SCOPES = ["https://outlook.office.com/IMAP.AccessAsUser.All", "https://outlook.office.com/SMTP.Send",
                  "offline_access"]  # fmt: skip


def init_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *flags: str, address: str) -> Config:
    # Reachability is what init says as it goes, not what is tested: no connection leaves the machine here.
    monkeypatch.setattr(init, "reachable", lambda host, port: "not tried in tests")
    path = tmp_path / "quinn.toml"
    code = cli.main(["init", "-c", str(path), "--non-interactive", "--address", address, "--state-dir",
                     str(tmp_path), "--force", *flags])  # fmt: skip
    assert code == 0
    return load_config(path, env={}, secrets_of=())


EXPECTED: dict[str, dict[str, Any]] = {
    "gmail": {
        "imap": ("imap.gmail.com", 993, "ssl"), "smtp": ("smtp.gmail.com", 465, "ssl"), "auth": "oauth2",
        "oauth": {"flow": "loopback", "authorization_url": "https://accounts.google.com/o/oauth2/v2/auth",
                  "token_url": "https://oauth2.googleapis.com/token", "scopes": ["https://mail.google.com/"],
                  "client_secret_env": "QUINN_OAUTH_CLIENT_SECRET", "device_authorization_url": None},
        "stamp": ("mx.google.com", 2, False),
    },
    "microsoft365": {
        "imap": ("outlook.office365.com", 993, "ssl"), "smtp": ("smtp.office365.com", 587, "starttls"),
        "auth": "oauth2",
        "oauth": {"flow": "device", "device_authorization_url": MS.format("organizations") + "devicecode",
                  "token_url": MS.format("organizations") + "token", "scopes": OUTLOOK_SCOPES,
                  "client_secret_env": None},
        "stamp": (None, 3, True),  # Exchange Online stamps no authserv-id: its topmost field, by position
    },
    "outlook": {
        "imap": ("outlook.office365.com", 993, "ssl"), "smtp": ("smtp-mail.outlook.com", 587, "starttls"),
        "auth": "oauth2",
        "oauth": {"flow": "device", "device_authorization_url": MS.format("consumers") + "devicecode",
                  "token_url": MS.format("consumers") + "token", "scopes": OUTLOOK_SCOPES},
        "stamp": (None, 2, True),
    },
    "fastmail": {
        "imap": ("imap.fastmail.com", 993, "ssl"), "smtp": ("smtp.fastmail.com", 465, "ssl"), "auth": "password",
        "oauth": {}, "stamp": (None, 0, False),
    },
    "generic": {
        "imap": ("imap.example.org", 993, "ssl"), "smtp": ("smtp.example.org", 465, "ssl"), "auth": "password",
        "oauth": {}, "stamp": (None, 1, False),
    },
}  # fmt: skip


@pytest.mark.parametrize("preset", sorted(EXPECTED))
def test_each_preset_writes_a_valid_config_naming_the_providers_endpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preset: str
) -> None:
    expected = EXPECTED[preset]
    config = init_with(tmp_path, monkeypatch, "--mail-provider", preset, "--provider", "ollama",
                       "--oauth-client-id", "my-app", address="quinn@example.org")  # fmt: skip
    for name, section in (("imap", config.imap), ("smtp", config.smtp)):
        assert (section.host, section.port, section.tls) == expected[name]
        assert section.auth == expected["auth"]
    if expected["auth"] == "oauth2":
        assert config.imap.password_env is None and config.smtp.password_env is None
        assert config.smtp.username == "quinn@example.org" and config.oauth.client_id == "my-app"
        assert config.oauth.token_file == tmp_path / "oauth-token.json"  # beside the database, writable
    else:
        assert config.imap.password_env == "QUINN_IMAP_PASSWORD"
    for key, value in expected["oauth"].items():
        assert getattr(config.oauth, key) == value, key
    policy = config.policy
    assert (policy.authserv_id, policy.received_above_stamp, policy.idless_stamp) == expected["stamp"]


@pytest.mark.lab  # runs git
def test_the_token_file_where_init_puts_it_its_lock_and_a_writes_temporary_file_stay_out_of_git() -> None:
    """The README's quick start runs `quinn init` in the source folder, so the OAuth token file lands beside the
    database there: a `git add -A` must not publish a refresh token."""
    root = Path(__file__).resolve().parents[2]
    names = ["oauth-token.json", "oauth-token.json.lock", ".oauth-k3j2h1", "state/oauth-token.json", "quinn.db"]
    done = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=root, capture_output=True, text=True)
    assert sorted(done.stdout.split()) == sorted(names), done.stdout + done.stderr


def test_provider_takes_a_mail_providers_name_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = init_with(tmp_path, monkeypatch, "--provider", "gmail", address="quinn@gmail.com")
    assert config.imap.host == "imap.gmail.com" and config.imap.auth == "oauth2"
    assert config.llm.model == "openai/gpt-4.1-mini"  # the model provider keeps its default
    assert config.oauth.client_id == "REPLACE-WITH-YOUR-CLIENT-ID"  # loads, and quinn init said to set it


# A message as Gmail's IMAP serves it ("Show original"): Gmail's internal hop and its MX's Received field sit
# above its Authentication-Results; the sender's own Received field (and anything it wrote) is below.
GMAIL = """\
Delivered-To: quinn@gmail.com
Received: by 2002:a05:7300:5b8d:b0:1a1:3c1a:2b5e with SMTP id h13csp1043581dyc;
        Mon, 23 Nov 2026 02:14:09 -0800 (PST)
X-Received: by 2002:a17:907:7b94:b0:a8d:2ec3:94f4 with SMTP id kx20mr1;
        Mon, 23 Nov 2026 02:14:09 -0800 (PST)
ARC-Seal: i=1; a=rsa-sha256; t=1795428849; cv=none; d=google.com; s=arc-20240605; b=AbC
ARC-Authentication-Results: i=1; mx.google.com;
       dkim=pass header.i=@example.org header.s=s1 header.b=AbC;
       spf=pass (google.com: domain of alice@example.org designates 192.0.2.1 as permitted sender)
 smtp.mailfrom=alice@example.org;
       dmarc=pass (p=REJECT sp=REJECT dis=NONE) header.from=example.org
Return-Path: <alice@example.org>
Received: from mail.example.org (mail.example.org. [192.0.2.1])
        by mx.google.com with ESMTPS id a640c23a62f3a-a8d2ec394f4si1
        for <quinn@gmail.com>
        (version=TLS1_3 cipher=TLS_AES_256_GCM_SHA384 bits=256/256);
        Mon, 23 Nov 2026 02:14:09 -0800 (PST)
Received-SPF: pass (google.com: domain of alice@example.org designates 192.0.2.1 as permitted sender)
 client-ip=192.0.2.1;
Authentication-Results: mx.google.com;
       dkim=pass header.i=@example.org header.s=s1 header.b=AbC;
       spf=pass (google.com: domain of alice@example.org designates 192.0.2.1 as permitted sender)
 smtp.mailfrom=alice@example.org;
       dmarc=pass (p=REJECT sp=REJECT dis=NONE) header.from=example.org
Received: by mail.example.org (Postfix, from userid 1000) id 4Zx1; Mon, 23 Nov 2026 10:14:08 +0000 (UTC)
{forged}From: Alice <alice@example.org>
To: quinn@gmail.com
Subject: Lunch
Message-ID: <g1@example.org>
Date: Mon, 23 Nov 2026 10:14:08 +0000

Lunch on Friday?
"""

# Postfix (OpenDKIM and OpenDMARC milters stamp above Postfix's Received field) delivering through Dovecot LMTP,
# which puts its own Received field on top (lmtp_add_received_header = yes, Dovecot's default).
POSTFIX_LMTP = """\
Return-Path: <alice@example.org>
Delivered-To: quinn@example.net
Received: from mail.example.net
	by mail.example.net with LMTP
	id 8Bq1Ahvb4mZ2CwAA2H1vXw
	(envelope-from <alice@example.org>)
	for <quinn@example.net>; Mon, 23 Nov 2026 10:14:09 +0000
Authentication-Results: mail.example.net; dmarc=pass (p=reject dis=none) header.from=example.org
Authentication-Results: mail.example.net;
	dkim=pass (2048-bit key; unprotected) header.d=example.org header.i=@example.org header.b="AbC";
	dkim-atps=neutral
Received: from mail.example.org (mail.example.org [192.0.2.1])
	(using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits))
	by mail.example.net (Postfix) with ESMTPS id 4Zx1234
	for <quinn@example.net>; Mon, 23 Nov 2026 10:14:08 +0000 (UTC)
From: Alice <alice@example.org>
To: quinn@example.net
Subject: Lunch
Message-ID: <p1@example.org>
Date: Mon, 23 Nov 2026 10:14:08 +0000

Lunch on Friday?
"""


def mail(text: str) -> Any:
    return parse_email(text.replace("\n", "\r\n").encode())


def test_a_gmail_header_block_authenticates_with_the_gmail_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = init_with(tmp_path, monkeypatch, "--mail-provider", "gmail", "--provider", "ollama",
                       address="quinn@gmail.com")  # fmt: skip
    rules = parts.rules(config)
    assert authenticated(mail(GMAIL.format(forged="")), rules)[0]
    assert check_trust(rules, [mail(GMAIL.format(forged=""))])[0]
    # A stamp the sender wrote (below the sender's hop) counts for nothing, even one that says pass.
    forged = "Authentication-Results: mx.google.com; dmarc=pass header.from=example.org\n"
    sender_only = GMAIL.format(forged=forged).replace("dmarc=pass (p=REJECT", "dmarc=fail (p=REJECT")
    assert not authenticated(mail(sender_only), rules)[0]
    # With the count one short, nothing authenticates, and quinn check says what to set.
    short = rules.__class__(**{**rules.__dict__, "received_above_stamp": 1})
    assert not authenticated(mail(GMAIL.format(forged="")), short)[0]
    ok, detail = check_trust(short, [mail(GMAIL.format(forged=""))])
    assert not ok and "set it to 2" in detail


def test_a_postfix_lmtp_header_block_authenticates_with_the_generic_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = init_with(tmp_path, monkeypatch, "--mail-provider", "generic", "--provider", "ollama",
                       "--authserv-id", "mail.example.net", address="quinn@example.net")  # fmt: skip
    rules = parts.rules(config)
    assert (config.policy.authserv_id, config.policy.received_above_stamp) == ("mail.example.net", 1)
    assert authenticated(mail(POSTFIX_LMTP), rules)[0]
    without_preset = rules.__class__(**{**rules.__dict__, "received_above_stamp": 0})  # the default before
    assert not authenticated(mail(POSTFIX_LMTP), without_preset)[0]


# A message as Exchange Online's IMAP serves it to a Microsoft 365 mailbox, after a public raw header (2020; names
# and addresses replaced): three Received fields of Exchange above its Authentication-Results, which has no
# authserv-id; the front door's Received field below it, then what the sender wrote; Exchange's own
# X-MS-Exchange-Organization-* fields at the end of the header block.
EXO = """\
Received: from MW4PR11MB5887.namprd11.prod.outlook.com (2603:10b6:303:16c::9) by
 SA1PR11MB8396.namprd11.prod.outlook.com with HTTPS; Mon, 23 Nov 2026 10:14:11 +0000
Received: from DM6PR02CA0063.namprd02.prod.outlook.com (2603:10b6:5:177::40) by
 MW4PR11MB5887.namprd11.prod.outlook.com (2603:10b6:303:16c::9) with Microsoft
 SMTP Server (version=TLS1_2, cipher=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384) id
 15.20.8182.20; Mon, 23 Nov 2026 10:14:10 +0000
Received: from DS3PEPF000099D4.namprd04.prod.outlook.com
 (2603:10b6:5:177:cafe::2a) by DM6PR02CA0063.outlook.office365.com
 (2603:10b6:5:177::40) with Microsoft SMTP Server (version=TLS1_3,
 cipher=TLS_AES_256_GCM_SHA384) id 15.20.8182.20 via Frontend Transport; Mon,
 23 Nov 2026 10:14:10 +0000
{stamp}Received-SPF: Pass (protection.outlook.com: domain of example.org designates
 192.0.2.1 as permitted sender) receiver=protection.outlook.com;
 client-ip=192.0.2.1; helo=mail.example.org; pr=C
Received: from mail.example.org (192.0.2.1) by
 DS3PEPF000099D4.mail.protection.outlook.com (10.167.17.5) with Microsoft SMTP
 Server (version=TLS1_3, cipher=TLS_AES_256_GCM_SHA384) id 15.20.8182.20 via
 Frontend Transport; Mon, 23 Nov 2026 10:14:09 +0000
{forged}Received: by mail.example.org (Postfix, from userid 1000) id 4Zx1; Mon, 23 Nov 2026 10:14:08 +0000 (UTC)
From: Alice <alice@example.org>
To: quinn@example.net
Subject: Lunch
Message-ID: <x1@example.org>
Date: Mon, 23 Nov 2026 10:14:08 +0000
X-MS-Exchange-Organization-AuthSource: DS3PEPF000099D4.namprd04.prod.outlook.com
X-MS-Exchange-Organization-AuthAs: {auth_as}
X-Forefront-Antispam-Report: CIP:192.0.2.1;CTRY:;LANG:en;SCL:1;SRV:;IPV:NLI;SFV:NSPM;H:mail.example.org;CAT:NONE;

Lunch on Friday?
"""
EXO_STAMP = """\
Authentication-Results: spf=pass (sender IP is 192.0.2.1)
 smtp.mailfrom=example.org; dkim=pass (signature was verified)
 header.d=example.org;dmarc=pass action=none header.from=example.org;compauth=pass
 reason=100
"""


INSIDE = "submitted inside the tenant (AuthAs {}): Exchange stamps none"


def exo(stamp: str = EXO_STAMP, forged: str = "", auth_as: str = "Anonymous") -> Any:
    return mail(EXO.format(stamp=stamp, forged=forged, auth_as=auth_as))


def test_an_exchange_online_header_block_authenticates_with_the_microsoft365_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = init_with(tmp_path, monkeypatch, "--mail-provider", "microsoft365", "--provider", "ollama",
                       address="quinn@example.net")  # fmt: skip
    rules = parts.rules(config)
    assert authenticated(exo(), rules) == (True, "dmarc=pass header.from=example.org")
    ok, detail = check_trust(rules, [exo()])
    assert ok and "1 of the 1 newest mails stamped there" in detail
    failed = EXO_STAMP.replace("dmarc=pass", "dmarc=fail")
    forged = EXO_STAMP  # what the sender writes itself: a passing id-less stamp, below Exchange's front door
    refused = {
        "dmarc=fail": exo(failed),
        "compauth=fail": exo(EXO_STAMP.replace("compauth=pass", "compauth=fail")),
        "sender's stamp below Exchange's": exo(failed, forged),
        "sender's stamp, Exchange's missing": exo("", forged),
        "submitted inside the tenant": exo("", "", auth_as="Internal"),
        "inside the tenant, with a stamp on top": exo(EXO_STAMP, "", auth_as="Internal"),
        "a second AuthAs the sender added": exo(EXO_STAMP, "X-MS-Exchange-Organization-AuthAs: Anonymous\n",
                                                auth_as="Internal"),
    }  # fmt: skip
    # Exchange's dmarc=fail is also what keeps Quinn from answering a forged From at all (no backscatter).
    assert decide(exo(failed, forged), rules).reason.startswith("sender failed authentication (dmarc=fail)")
    assert decide(exo("", forged, auth_as="Internal"), rules).action == "handle"  # a colleague: no verdict
    reasons = {case: authenticated(email, rules) for case, email in refused.items()}
    assert reasons == {
        "dmarc=fail": (False, "dmarc=fail"),
        "compauth=fail": (False, "compauth=fail"),
        "sender's stamp below Exchange's": (False, "dmarc=fail"),
        "sender's stamp, Exchange's missing": (
            False,
            "no Authentication-Results from our server (the topmost "
            "field sits below 4 Received field(s), not 3 "
            "(policy.received_above_stamp))",
        ),
        "submitted inside the tenant": (False, INSIDE.format("internal")),
        "inside the tenant, with a stamp on top": (False, INSIDE.format("internal")),
        "a second AuthAs the sender added": (False, INSIDE.format("anonymous, internal")),
    }


def test_quinn_check_measures_the_exchange_stamp_and_says_when_the_preset_is_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = init_with(tmp_path, monkeypatch, "--mail-provider", "outlook", "--provider", "ollama",
                       address="quinn@outlook.com")  # fmt: skip
    rules = parts.rules(config)
    assert (rules.idless_stamp, rules.received_above_stamp) == (True, 2)
    assert not authenticated(exo(), rules)[0]  # three Received above, not two: fails closed
    ok, detail = check_trust(rules, [exo(), exo()])
    assert not ok and "set it to 3" in detail
    fixed = rules.__class__(**{**rules.__dict__, "received_above_stamp": 3})
    assert authenticated(exo(), fixed)[0] and check_trust(fixed, [exo()])[0]
    ok, detail = check_trust(fixed, [exo(""), exo("")])  # mail without Exchange's stamp on top
    assert not ok and "nothing will authenticate" in detail
    # Without the preset, the check points at the setting instead of suggesting an id.
    plain = rules.__class__(**{**rules.__dict__, "idless_stamp": False})
    ok, detail = check_trust(plain, [exo()])
    assert not ok and "set idless_stamp = true and received_above_stamp = 3" in detail
