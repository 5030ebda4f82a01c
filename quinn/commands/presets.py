"""Mail provider presets for ``quinn init --provider gmail|microsoft365|outlook|fastmail|generic`` (issue 33).

A preset fills what a provider fixes: hosts, ports and TLS; how Quinn logs in (OAuth 2.0 where the provider
requires it: its endpoints and scopes); and where the provider's own Authentication-Results stamp sits (its
authserv-id, and how many of its own Received fields are above the stamp), so that trust works from the first
start. `quinn check` keeps measuring the stamp on real mail and says when a preset is wrong.

Sources (each provider's documentation, read for this issue; see deploy/README.md):

- Google: IMAP imap.gmail.com:993 and SMTP smtp.gmail.com:465 with XOAUTH2; the scope https://mail.google.com/
  covers both. Google's device flow ("TVs and Limited Input devices") allows only a short list of scopes (OpenID,
  Drive file, YouTube), not mail, so the preset uses the loopback redirect (RFC 8252) of a "Desktop app" client,
  which comes with a client secret. Gmail puts two Received fields above ``Authentication-Results:
  mx.google.com`` (its internal hop ``Received: by 2002:...``, then ``Received: from ... by mx.google.com``).
- Microsoft identity platform: the device code flow (RFC 8628) at login.microsoftonline.com/{tenant}/oauth2/v2.0/
  devicecode; scopes https://outlook.office.com/IMAP.AccessAsUser.All and .../SMTP.Send, with offline_access for a
  refresh token. Work accounts use the tenant "organizations" (or your tenant id, required for a single-tenant
  app registration), outlook.com accounts "consumers". Exchange Online writes its Authentication-Results without
  an authserv-id (Microsoft's "Anti-spam message headers" page shows the field so), so the presets set
  policy.idless_stamp: the topmost field, id-less, at exactly the preset's Received count, read by position alone
  (quinn/mailbox/authresults.py). The counts come from public raw headers, not from Microsoft's documentation:
  a Microsoft 365 mailbox had three Received fields above the stamp (the mailbox server's "with HTTPS" hop, a
  "with Microsoft SMTP Server" hop, and the front door's "via Frontend Transport" hop that received it from the
  protection server), an outlook.com mailbox two. `quinn check` measures the count on real mail. Not ARC: the
  ARC-Authentication-Results of mx.microsoft.com is written by every tenant's outbound path too, so the id names
  Microsoft, not our mailbox's server.
- Fastmail: imap.fastmail.com:993, smtp.fastmail.com:465; OAuth only for approved partner apps, so an app password.
- generic: your own Postfix (with OpenDKIM/OpenDMARC milters) delivering through Dovecot LMTP, which puts its own
  Received field on top (lmtp_add_received_header = yes, the default): one Received field above the stamp.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

Values = dict[tuple[str, str], str | int | list[str] | None]

GOOGLE_AUTH = "https://accounts.google.com/o/oauth2/v2/auth"
GOOGLE_TOKEN = "https://oauth2.googleapis.com/token"
MICROSOFT = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/"
OUTLOOK_SCOPES = [
    "https://outlook.office.com/IMAP.AccessAsUser.All",
    "https://outlook.office.com/SMTP.Send",
    "offline_access",
]
CLIENT_SECRET_ENV = "QUINN_OAUTH_CLIENT_SECRET"


@dataclass(frozen=True)
class MailPreset:
    """What ``quinn init --provider NAME`` writes for a mail provider."""

    imap: tuple[str, int, str] | None  # host, port, tls; None: from the address's domain
    smtp: tuple[str, int, str] | None
    auth: str = "password"
    oauth: dict[str, str | list[str]] = field(default_factory=dict)
    authserv_id: str | None = None
    received_above_stamp: int = 0
    idless_stamp: bool = False  # Exchange Online: a stamp without an authserv-id, read by position alone
    note: str = ""


def _microsoft(tenant: str) -> dict[str, str | list[str]]:
    base = MICROSOFT.format(tenant=tenant)
    return {"flow": "device", "device_authorization_url": base + "devicecode", "token_url": base + "token",
            "scopes": OUTLOOK_SCOPES}  # fmt: skip


MAIL_PRESETS: dict[str, MailPreset] = {
    "gmail": MailPreset(
        ("imap.gmail.com", 993, "ssl"),
        ("smtp.gmail.com", 465, "ssl"),
        "oauth2",
        {
            "flow": "loopback",
            "authorization_url": GOOGLE_AUTH,
            "token_url": GOOGLE_TOKEN,
            "scopes": ["https://mail.google.com/"],
            "client_secret_env": CLIENT_SECRET_ENV,
        },
        authserv_id="mx.google.com",
        received_above_stamp=2,
        note="Google allows no mail scope in its device flow: `quinn auth login` prints a URL to open in a browser "
        "on this machine (or through ssh -L); create a Desktop app client (deploy/README.md, Google).",
    ),
    "microsoft365": MailPreset(
        ("outlook.office365.com", 993, "ssl"),
        ("smtp.office365.com", 587, "starttls"),
        "oauth2",
        _microsoft("organizations"),
        received_above_stamp=3,
        idless_stamp=True,
        note="a single-tenant app registration needs your tenant id in place of 'organizations' in the two "
        "[oauth] URLs; Exchange Online stamps no authserv-id, so trust reads its stamp by position: run "
        "`quinn check` once mail has arrived (deploy/README.md, Microsoft).",
    ),
    "outlook": MailPreset(
        ("outlook.office365.com", 993, "ssl"),
        ("smtp-mail.outlook.com", 587, "starttls"),
        "oauth2",
        _microsoft("consumers"),
        received_above_stamp=2,
        idless_stamp=True,
        note="register the app for personal Microsoft accounts; trust reads Exchange's id-less stamp by position: "
        "run `quinn check` once mail has arrived (deploy/README.md, Microsoft).",
    ),
    "fastmail": MailPreset(
        ("imap.fastmail.com", 993, "ssl"),
        ("smtp.fastmail.com", 465, "ssl"),
        note="Fastmail offers OAuth to approved partner apps only: make an app password (Settings, Privacy & "
        "Security) for the password variable.",
    ),
    "generic": MailPreset(
        None,
        None,
        received_above_stamp=1,
        note="policy.received_above_stamp = 1 fits Postfix delivering through Dovecot LMTP; `quinn check` "
        "measures it on your mail.",
    ),
}


def add_preset_flag(p: argparse.ArgumentParser) -> None:
    """Add ``--mail-provider`` (``--provider`` also takes these names: they differ from the model providers')."""
    p.add_argument("--mail-provider", choices=sorted(MAIL_PRESETS),
                   help="fill hosts, ports, TLS, OAuth and the trust stamp for a mail provider")  # fmt: skip
    p.add_argument("--oauth-client-id", help="the client id of your app registration (OAuth presets)")


def chosen_preset(args: argparse.Namespace) -> MailPreset | None:
    """The preset the flags name; ``--provider gmail`` is taken as ``--mail-provider gmail`` (the model provider
    then keeps its default). Hosts, ports and TLS of the preset become the defaults of the questions."""
    if getattr(args, "provider", None) in MAIL_PRESETS:
        args.mail_provider, args.provider = args.provider, "openai"
    preset = MAIL_PRESETS.get(args.mail_provider) if getattr(args, "mail_provider", None) else None
    if preset is None:
        return None
    for proto in ("imap", "smtp"):
        server = getattr(preset, proto)
        if server is None:
            continue
        host, port, tls = server
        if getattr(args, f"{proto}_host") is None:
            setattr(args, f"{proto}_host", host)
        if getattr(args, f"{proto}_tls") is None:
            setattr(args, f"{proto}_tls", tls)
            if getattr(args, f"{proto}_port") is None:
                setattr(args, f"{proto}_port", port)
    return preset


def preset_values(preset: MailPreset, values: Values, authserv_id_given: bool, client_id: str | None) -> Values:
    """The keys the preset sets on top of the answers in ``values``: the login method, [oauth], and the stamp."""
    out: Values = {}
    if preset.auth == "oauth2":
        for proto in ("imap", "smtp"):
            out[(proto, "auth")] = "oauth2"
            out[(proto, "password_env")] = None
            out[(proto, "username")] = values.get(("imap", "username")) or values.get(("smtp", "from_address"))
        out |= {("oauth", key): value for key, value in preset.oauth.items()}
        # Beside the database: the one directory the service may write (deploy/quinn.service), as refreshes must.
        database = str(values.get(("database", "url")) or "quinn.db")
        out[("oauth", "token_file")] = str(Path(database).parent / "oauth-token.json")
        out[("oauth", "client_id")] = client_id or "REPLACE-WITH-YOUR-CLIENT-ID"
    if not authserv_id_given and preset.authserv_id is not None:
        out[("policy", "authserv_id")] = preset.authserv_id
    if not authserv_id_given and preset.idless_stamp:  # an id given says the stamp is not Exchange's
        out[("policy", "idless_stamp")] = True
    out[("policy", "received_above_stamp")] = preset.received_above_stamp
    return out
