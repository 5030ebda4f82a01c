"""OAuth 2.0 tokens on disk and in text (issue 33), in process: the token file's mode and content, a refused or
foreign token raising the hint to sign in again without asking the provider, `quinn auth status`, the SASL
strings (RFC 7628 §3.1), and the redaction of tokens in log lines."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from quinn import cli
from quinn.config import load_config
from quinn.logs import RedactingFilter
from quinn.oauth import LoginNeeded, TokenFile, TokenSet, TokenSource, oauthbearer, xoauth2

CONFIG = """
[imap]
host = "imap.example.org"
username = "quinn@example.org"
auth = "oauth2"

[smtp]
host = "smtp.example.org"
from_address = "quinn@example.org"
username = "quinn@example.org"
auth = "oauth2"

[llm]
model = "ollama/llama3.2"

[oauth]
device_authorization_url = "https://login.example.org/device"
token_url = "https://login.example.org/token"
client_id = "abc"
scopes = ["mail", "offline_access"]
token_file = "state/token.json"
"""
TOKENS = TokenSet(account="quinn@example.org", refresh_token="rt-SECRET-REFRESH", access_token="at-SECRET-ACCESS",
                  expires_at=4_102_444_800.0, scope="mail offline_access", obtained_at=1_800_000_000.0)  # fmt: skip


def no_network(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"the provider was asked: {request.url}")


def test_the_token_file_is_0600_and_written_whole(tmp_path: Path) -> None:
    file = TokenFile(tmp_path / "state" / "token.json")
    old = os.umask(0)  # even with a permissive umask
    try:
        file.write(TOKENS)
    finally:
        os.umask(old)
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert file.read() == TOKENS and sorted(p.name for p in file.path.parent.iterdir()) == ["token.json"]
    assert "SECRET" not in repr(TOKENS) and "SECRET" not in str(TOKENS.described())
    file.path.chmod(0o644)
    assert file.loose_mode() == "mode 644: others than its owner may read it"


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (TOKENS.with_refused("invalid_grant: revoked"), "was refused by the provider (invalid_grant: revoked)"),
        (TokenSet(account="someone@example.org", refresh_token="rt"), "is for someone@example.org"),
        (None, "no OAuth token for quinn@example.org yet"),
        # The provider changed under a token file: neither token may go to the new one (the refresh token to its
        # endpoint, the access token to its mail servers), expired or not.
        (
            replace(TOKENS, token_url="https://oauth2.googleapis.com/token"),
            "was issued by https://oauth2.googleapis.com/token, but [oauth] token_url is now",
        ),
        (replace(TOKENS, token_url="https://oauth2.googleapis.com/token", expires_at=0.0), "was issued by"),
    ],
)
def test_a_refused_foreign_or_missing_token_says_to_sign_in(
    tmp_path: Path, tokens: TokenSet | None, expected: str
) -> None:
    (tmp_path / "q.toml").write_text(CONFIG)
    config = load_config(tmp_path / "q.toml", env={})
    assert config.oauth.token_file == tmp_path / "state" / "token.json"  # relative to the config file
    if tokens is not None:
        TokenFile(config.oauth.token_file).write(tokens)
    source = TokenSource(config.oauth, "quinn@example.org", transport=httpx.MockTransport(no_network))
    with pytest.raises(LoginNeeded, match=re.escape(expected)) as info:
        source.access_token()
    assert info.value.hint is not None and "quinn auth login" in info.value.hint


def test_auth_status_shows_everything_but_the_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.toml"
    path.write_text(CONFIG)
    TokenFile(tmp_path / "state" / "token.json").write(TOKENS)
    assert cli.main(["auth", "status", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert "quinn@example.org" in out and "mail offline_access" in out and "2100-01-01T00:00:00+00:00" in out
    assert "SECRET" not in out
    TokenFile(tmp_path / "state" / "token.json").write(TOKENS.with_refused("invalid_grant"))
    assert cli.main(["auth", "status", "-c", str(path)]) == 1
    assert "refused: invalid_grant" in capsys.readouterr().out


def test_auth_commands_need_an_oauth_login(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "q.toml"
    path.write_text(CONFIG.replace('auth = "oauth2"\n', 'auth = "password"\npassword_env = "X"\n', 1).replace(
        'username = "quinn@example.org"\nauth = "oauth2"\n[llm]', "[llm]"))  # fmt: skip
    text = path.read_text().replace('from_address = "quinn@example.org"\nusername = "quinn@example.org"\nauth = '
                                    '"oauth2"\n', 'from_address = "quinn@example.org"\n')  # fmt: skip
    path.write_text(text)
    assert cli.main(["auth", "status", "-c", str(path)]) == 2
    assert 'neither [imap] nor [smtp] logs in with OAuth (hint: set auth = "oauth2"' in capsys.readouterr().err


def test_config_asks_for_what_oauth_needs(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text(CONFIG.replace('token_url = "https://login.example.org/token"\n', ""))
    with pytest.raises(Exception, match=r"\[oauth\] lacks token_url"):
        load_config(path, env={})
    path.write_text(CONFIG.replace('auth = "oauth2"\n', 'auth = "oauth2"\npassword_env = "X"\n', 1))
    with pytest.raises(Exception, match="logs in with a token: remove password_env"):
        load_config(path, env={"X": "x"})


def test_sasl_strings() -> None:
    assert xoauth2("a@b.c", "T") == "user=a@b.c\x01auth=Bearer T\x01\x01"
    # RFC 7628 §3.1: gs2 header with the authzid escaped (RFC 5801), host and port, then the bearer token
    assert oauthbearer("a=b,c@d", "T", "imap.example.org", 993) == (
        "n,a=a=3Db=2Cc@d,\x01host=imap.example.org\x01port=993\x01auth=Bearer T\x01\x01"
    )


def test_tokens_never_survive_a_log_line() -> None:
    redactor = RedactingFilter()
    lines = [
        "auth=Bearer ya29.a0AfB_byC-token_value",
        '{"access_token": "ya29.secret", "refresh_token": "1//0gsecret", "expires_in": 3599}',
        "grant_type=refresh_token&refresh_token=1//0gsecret&client_id=x",
        "C: AUTH XOAUTH2 dXNlcj1hQGIuYwFhdXRoPUJlYXJlciBUAQE=",
        "a1 AUTHENTICATE XOAUTH2 dXNlcj1hQGIuYwFhdXRoPUJlYXJlciBUAQE=",
        "token eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL291dGxvb2sifQ.c2lnbmF0dXJl in a repr",
        "ya29.a0AfB_byC-token_value and 1//0gLongRefreshToken-x_y",
    ]
    cleaned = [redactor.redact(line) for line in lines]
    for secret in ("ya29", "1//0g", "dXNlcj1hQGIuYwFhdXRoPUJlYXJlciBUAQE", "eyJ0eXAi", "c2lnbmF0dXJl"):
        assert not any(secret in line for line in cleaned), cleaned
    assert "expires_in" in cleaned[1] and "client_id=x" in cleaned[2]
