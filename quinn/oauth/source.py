"""Access tokens on demand: read from the token file, renewed before they expire and when a server refuses one.

One ``TokenSource`` serves the IMAP and the SMTP login of a process (they share the account), from any thread.
A renewal happens under the token file's lock and re-reads the file first, so the daemon, `quinn check` and
`quinn auth login` never undo each other's work, and a provider that rotates refresh tokens (Microsoft) never
sees an old one twice. The file is re-read whenever it changed on disk: after `quinn auth login` the daemon uses
the new tokens at its next login, without a restart.

A refused refresh token (RFC 6749 §5.2 ``invalid_grant``) is written into the file as refused and raised as
``LoginNeeded``, a ``ConfigError``: the daemon treats it as it treats a refused password (mail waits, nothing is
lost) until the operator signs in again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from quinn.config import Config, OAuthConfig
from quinn.errors import ConfigError
from quinn.oauth.endpoints import OAuthClient, TokenRefused
from quinn.oauth.tokens import TokenFile, TokenSet

log = logging.getLogger(__name__)

LOGIN_HINT = "run `quinn auth login` (as the service user) to sign in again; the daemon picks the new token up"


class LoginNeeded(ConfigError):
    """No usable refresh token: none yet, the provider refused it, or it is another account's."""


class TokenSource:
    """Hands out a valid access token for ``account`` (see the module docstring)."""

    def __init__(self, config: OAuthConfig, account: str, *, client_secret: str | None = None,
                 seed_refresh_token: str | None = None, clock: Callable[[], float] = time.time,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.config = config
        self.account = account
        self.file = TokenFile(config.token_file)
        self.client = OAuthClient(config, client_secret, transport)
        self._seed = seed_refresh_token
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens: TokenSet | None = None
        self._stamp = -1.0
        self.refreshes = 0  # renewals done by this process

    def current(self) -> TokenSet | None:
        """The tokens as the file holds them now (re-read when it changed)."""
        stamp = self.file.stamp()
        if stamp != self._stamp:
            self._tokens, self._stamp = self.file.read(), stamp
        return self._tokens

    def access_token(self, rejected: str | None = None) -> str:
        """A valid access token. ``rejected``: the token a server just refused (a 401, or AUTH failing): it is
        renewed even if it looks unexpired, unless someone else renewed it meanwhile."""
        with self._lock, self.file.locked():
            if self.config.flow == "client_credentials":
                return self._app_token(rejected)
            tokens = self._usable_set()
            if rejected is None and tokens.usable(self._clock(), self.config.refresh_before_s):
                return tokens.access_token
            if rejected is not None and tokens.access_token and tokens.access_token != rejected:
                return tokens.access_token  # another process (or thread) renewed it already
            return self._renew(tokens, "refused by the server" if rejected is not None else "expiring").access_token

    def _app_token(self, rejected: str | None) -> str:
        """The client credentials grant: a stored token while it is good (and not the refused one), else a new
        one; kept in the token file too, so every process of this install shares it."""
        tokens = self.current()
        now = self._clock()
        mine = (tokens is not None and tokens.account.lower() == self.account.lower() and bool(tokens.access_token)
                and not self._issued_elsewhere(tokens))  # fmt: skip
        if tokens is not None and mine:
            renewed_meanwhile = rejected is not None and tokens.access_token != rejected
            if renewed_meanwhile or (rejected is None and tokens.usable(now, self.config.refresh_before_s)):
                return tokens.access_token
        body = self.client.client_credentials()
        fresh = TokenSet(account=self.account, refresh_token="", access_token=str(body["access_token"]),
                         expires_at=now + float(body.get("expires_in") or 3600),
                         scope=str(body.get("scope") or " ".join(self.config.scopes)),
                         token_url=self.config.token_url or "", obtained_at=now, refreshed_at=now)  # fmt: skip
        self._save(fresh)
        self.refreshes += 1
        log.info("OAuth app token for %s obtained (client credentials); valid until %s", self.account,
                 datetime.fromtimestamp(fresh.expires_at, UTC).isoformat(timespec="seconds"))  # fmt: skip
        return fresh.access_token

    def _usable_set(self) -> TokenSet:
        tokens = self.current()
        if tokens is None and self._seed:
            tokens = TokenSet(account=self.account, refresh_token=self._seed, token_url=self.config.token_url or "")
        if tokens is None:
            raise LoginNeeded(f"no OAuth token for {self.account} yet ({self.file.path} does not exist)",
                              "run `quinn auth login` (as the service user) to sign in")  # fmt: skip
        if tokens.account.lower() != self.account.lower():
            raise LoginNeeded(f"the token file {self.file.path} is for {tokens.account}, not {self.account}",
                              LOGIN_HINT)  # fmt: skip
        if tokens.refused:
            raise LoginNeeded(f"the OAuth refresh token for {self.account} was refused by the provider "
                              f"({tokens.refused})", LOGIN_HINT)  # fmt: skip
        if self._issued_elsewhere(tokens):
            raise LoginNeeded(f"the token file {self.file.path} was issued by {tokens.token_url}, but [oauth] "
                              f"token_url is now {self.config.token_url}: its tokens go to no other provider",
                              LOGIN_HINT)  # fmt: skip
        return tokens

    def _issued_elsewhere(self, tokens: TokenSet) -> bool:
        """Whether ``tokens`` came from another token endpoint than the one configured now (the provider
        changed, by `quinn init` or by hand): neither its refresh token (to the new endpoint) nor its access
        token (to the new mail servers) may be sent there. A file written before tokens named their issuer
        says nothing, and is used."""
        return bool(tokens.token_url and self.config.token_url) and tokens.token_url != self.config.token_url

    def _renew(self, tokens: TokenSet, why: str) -> TokenSet:
        try:
            body = self.client.refresh(tokens.refresh_token)
        except TokenRefused as exc:
            refused = exc.message.removeprefix("the provider refused the refresh token: ")
            self._save(tokens.with_refused(refused))
            log.error("OAuth: %s; %s", exc.message, LOGIN_HINT)
            raise LoginNeeded(f"the OAuth refresh token for {self.account} was refused by the provider "
                              f"({refused})", LOGIN_HINT) from None  # fmt: skip
        fresh = from_response(body, self.account, self.config, self._clock(), previous=tokens)
        self._save(fresh)
        self.refreshes += 1
        log.info("OAuth access token for %s renewed (%s); valid until %s", self.account, why,
                 datetime.fromtimestamp(fresh.expires_at, UTC).isoformat(timespec="seconds"))  # fmt: skip
        return fresh

    def _save(self, tokens: TokenSet) -> None:
        self.file.write(tokens)
        self._tokens, self._stamp = tokens, self.file.stamp()


def from_response(body: dict[str, Any], account: str, config: OAuthConfig, now: float,
                  previous: TokenSet | None = None) -> TokenSet:  # fmt: skip
    """The token set of a token endpoint response (RFC 6749 §5.1). A response without a refresh token keeps the
    previous one (§6: the server MAY issue a new one); a response without ``expires_in`` is taken to last an
    hour, the usual lifetime, so it is renewed rather than trusted forever."""
    refresh = body.get("refresh_token") or (previous.refresh_token if previous else "")
    if not refresh:
        raise ConfigError(
            "the provider issued no refresh token, so Quinn could not keep working without you",
            "ask for offline access: add offline_access to oauth.scopes (Microsoft), or revoke the app's access in "
            "your Google account and sign in again (Google gives one at first consent)",
        )
    return TokenSet(
        account=account, refresh_token=str(refresh), access_token=str(body["access_token"]),
        expires_at=now + float(body.get("expires_in") or 3600), scope=str(body.get("scope") or (
            previous.scope if previous else " ".join(config.scopes))),
        token_url=config.token_url or "", obtained_at=previous.obtained_at if previous else now,
        refreshed_at=now if previous else 0.0,
    )  # fmt: skip


def token_source(config: Config, transport: httpx.BaseTransport | None = None) -> TokenSource | None:
    """The token source of a config whose IMAP or SMTP login uses ``auth = "oauth2"`` (None otherwise). The
    account is the IMAP login name (or the SMTP one when only SMTP uses OAuth)."""
    if config.imap.auth != "oauth2" and config.smtp.auth != "oauth2":
        return None
    account = config.imap.username if config.imap.auth == "oauth2" else (config.smtp.username or "")
    o = config.oauth
    return TokenSource(o, account, client_secret=o.secret("client_secret"),
                       seed_refresh_token=o.secret("refresh_token"), transport=transport)  # fmt: skip
