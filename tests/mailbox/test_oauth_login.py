"""The IMAP and SMTP clients' OAuth logins (issue 33), in process against real servers: Dovecot's oauth2 passdb
and the SMTP lab, both checking tokens at the lab's authorization server (RFC 7662 introspection).

The daemon-level proof is tests/system/test_oauth.py; here each path of a login is taken on its own: OAUTHBEARER
on both sides, a token the server refuses renewed on the same SMTP connection, renewal before expiry, and a
first token seeded from a systemd credential."""

from __future__ import annotations

import logging
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quinn.config import Config, load_config
from quinn.engine import parts
from quinn.oauth import TokenFile, TokenSet, token_source
from tests.lab.dovecot import Dovecot
from tests.lab.mails import make_mail
from tests.lab.oauth import OAuthLab
from tests.lab.smtp import SmtpLab


@pytest.fixture
def oauth_lab() -> Iterator[OAuthLab]:
    lab = OAuthLab().start()
    try:
        yield lab
    finally:
        lab.stop()


def write_config(tmp_path: Path, oauth: OAuthLab, server: Dovecot, smtp_port: int, address: str,
                 mechanism: str = "xoauth2", extra: str = "") -> Path:  # fmt: skip
    path = tmp_path / "quinn.toml"
    path.write_text(f"""
[imap]
host = "127.0.0.1"
port = {server.port}
tls = "none"
username = "{address}"
auth = "oauth2"

[smtp]
host = "127.0.0.1"
port = {smtp_port}
tls = "none"
from_address = "{address}"
username = "{address}"
auth = "oauth2"

[llm]
model = "ollama/llama3.2"

{oauth.toml(str(tmp_path / "token.json"))}mechanism = "{mechanism}"
{extra}
""")
    return path


def signed_in(oauth: OAuthLab, config: Config, account: str) -> TokenSet:
    """Tokens as `quinn auth login` leaves them (the device grant itself is tests/system/test_oauth.py's)."""
    with oauth._lock:
        body = oauth._issue(account, "mail")
    tokens = TokenSet(account=account, refresh_token=body["refresh_token"], access_token=body["access_token"],
                      expires_at=time.time() + oauth.access_ttl_s, scope="mail")  # fmt: skip
    TokenFile(config.oauth.token_file).write(tokens)
    return tokens


async def test_oauthbearer_on_imap_and_smtp_and_a_refused_token_renewed(
    tmp_path: Path,
    oauth_lab: OAuthLab,
    make_dovecot: Callable[..., Dovecot],
    users: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the protocol libraries' too: still no token
    server = make_dovecot(oauth2_introspection_url=oauth_lab.introspection_url)
    smtp = SmtpLab(server, oauth=oauth_lab.check)
    smtp.start()
    try:
        quinn, alice = users("quinn"), users("alice")
        config = load_config(write_config(tmp_path, oauth_lab, server, smtp.port, quinn, "oauthbearer"), env={})
        signed_in(oauth_lab, config, quinn)
        source = parts.tokens(config)
        mailbox = parts.mailbox(config, source)
        mailbox.connect()
        mailbox.close()
        assert f"user=<{quinn}>, method=OAUTHBEARER" in server.log_path.read_text()

        # The provider ends the access token early: SMTP AUTH is refused once (RFC 7628 §3.2.2's error
        # challenge), the token renewed, and AUTH tried again on the same connection.
        oauth_lab.expire_access_tokens()
        sender = parts.sender(config, source)
        await sender.send(make_mail(quinn, alice, "Hello"), quinn, [alice])
        assert smtp.oauth_refusals == [("OAUTHBEARER", quinn)] and smtp.oauth_logins == [("OAUTHBEARER", quinn)]
        assert len(server.messages(alice)) == 1
        assert oauth_lab.grants == ["refresh_token"]
        stored = TokenFile(config.oauth.token_file).read()
        assert stored is not None and stored.refresh_token in oauth_lab.refresh_tokens  # the rotated one is kept
        assert not oauth_lab.refresh_tokens[stored.refresh_token].revoked

        # The same on IMAP: AUTHENTICATE refused (a NO), the token renewed, AUTHENTICATE again on the connection.
        oauth_lab.expire_access_tokens()
        mailbox.connect()
        mailbox.close()
        assert oauth_lab.grants == ["refresh_token"] * 2
        log = server.log_path.read_text()
        assert "oauth2 failed: Introspection failed" in log and log.count(f"user=<{quinn}>, method=OAUTHBEARER") == 2
        assert "renewed (refused by the server)" in caplog.text
        logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
        assert not [token for token in oauth_lab.issued if token in logged]
    finally:
        smtp.stop()


async def test_renewed_before_expiry_and_seeded_from_a_systemd_credential(
    tmp_path: Path, oauth_lab: OAuthLab, make_dovecot: Callable[..., Dovecot], users: Callable[[str], str]
) -> None:
    server = make_dovecot(oauth2_introspection_url=oauth_lab.introspection_url)
    quinn = users("quinn")
    # No token file yet: the first refresh token comes from a credential (LoadCredential=quinn:DIR).
    with oauth_lab._lock:
        seed = oauth_lab._issue(quinn, "mail")["refresh_token"]
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "quinn_QUINN_OAUTH_REFRESH_TOKEN").write_text(seed + "\n")
    path = write_config(tmp_path, oauth_lab, server, 1, quinn, extra='refresh_token_env = "QUINN_OAUTH_REFRESH_TOKEN"')
    config = load_config(path, env={"CREDENTIALS_DIRECTORY": str(credentials)})
    mailbox = parts.mailbox(config)
    mailbox.connect()
    mailbox.close()
    file = TokenFile(config.oauth.token_file)
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    first = file.read()
    assert first is not None and first.account == quinn and oauth_lab.grants == ["refresh_token"]

    # An access token within refresh_before_s of its end is renewed before it is used, not after a refusal.
    later = token_source(config)
    assert later is not None
    later._clock = lambda: first.expires_at - config.oauth.refresh_before_s + 1
    token = later.access_token()
    assert token != first.access_token and oauth_lab.grants == ["refresh_token"] * 2
    assert oauth_lab.introspect(token)["active"] is True


async def test_app_only_access_by_client_credentials_for_a_shared_mailbox(
    tmp_path: Path, oauth_lab: OAuthLab, make_dovecot: Callable[..., Dovecot], users: Callable[[str], str]
) -> None:
    """Microsoft's service principal with IMAP.AccessAsApp: no person signs in, the client secret gets each token
    (RFC 6749 §4.4), for the one mailbox the admin granted; no refresh token is ever stored."""
    server = make_dovecot(oauth2_introspection_url=oauth_lab.introspection_url)
    smtp = SmtpLab(server, oauth=oauth_lab.check)
    smtp.start()
    try:
        shared, alice = users("shared"), users("alice")
        oauth_lab.app_account = shared
        extra = 'client_secret_env = "QUINN_OAUTH_CLIENT_SECRET"\n'
        path = write_config(tmp_path, oauth_lab, server, smtp.port, shared, extra=extra)
        path.write_text(path.read_text().replace('flow = "device"', 'flow = "client_credentials"'))
        config = load_config(path, env={"QUINN_OAUTH_CLIENT_SECRET": oauth_lab.client_secret})
        source = parts.tokens(config)
        mailbox = parts.mailbox(config, source)
        mailbox.connect()
        mailbox.close()
        await parts.sender(config, source).send(make_mail(shared, alice, "From the shared mailbox"), shared, [alice])
        assert len(server.messages(alice)) == 1 and smtp.oauth_logins == [("XOAUTH2", shared)]
        assert oauth_lab.grants == ["client_credentials"]  # one token served both logins
        stored = TokenFile(config.oauth.token_file).read()
        assert stored is not None and stored.refresh_token == "" and "client credentials" in str(stored.described())

        oauth_lab.expire_access_tokens()  # refused: a new app token, no person needed
        mailbox.connect()
        mailbox.close()
        assert oauth_lab.grants == ["client_credentials"] * 2
    finally:
        smtp.stop()
