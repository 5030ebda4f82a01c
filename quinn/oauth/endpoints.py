"""Talking to the provider's OAuth 2.0 endpoints (RFC 6749, RFC 8628 device grant, RFC 7636 PKCE) over httpx.

Every request is a form POST; the client secret, when the provider issued one, goes in the body
(client_secret_post, RFC 6749 §2.3.1), as Google and Microsoft both accept. Nothing here logs a token: errors name
the endpoint and the provider's ``error`` code, never the body we sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from quinn.config import OAuthConfig
from quinn.errors import ConfigError, ConnectError, RetryLater

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"  # RFC 8628 §3.4


class TokenRefused(ConfigError):
    """The provider refused the refresh token (RFC 6749 §5.2 ``invalid_grant``): revoked, expired, or the
    password changed. Only a new consent helps: `quinn auth login`."""


class LoginRefused(ConfigError):
    """The person declined, or the device code expired before they approved it (RFC 8628 §3.5)."""


@dataclass(frozen=True)
class DeviceGrant:
    """The device authorization response (RFC 8628 §3.2)."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    expires_in: float
    interval: float


class OAuthClient:
    """The token, device and authorization endpoints of ``[oauth]``."""

    def __init__(self, config: OAuthConfig, client_secret: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:  # fmt: skip
        self.config = config
        self.client_secret = client_secret
        self._transport = transport

    def _client_auth(self) -> dict[str, str]:
        auth = {"client_id": self.config.client_id or ""}
        if self.client_secret:
            auth["client_secret"] = self.client_secret
        return auth

    def post(self, url: str, form: Mapping[str, str]) -> tuple[int, dict[str, Any]]:
        """POST ``form`` (with the client's credentials) and return the status and the JSON body."""
        try:
            with httpx.Client(timeout=self.config.timeout_s, transport=self._transport) as client:
                response = client.post(url, data={**self._client_auth(), **form},
                                       headers={"Accept": "application/json"})  # fmt: skip
        except httpx.HTTPError as exc:
            raise ConnectError(f"OAuth endpoint {url} unreachable: {type(exc).__name__}",
                               "check the network, and the [oauth] URLs") from None  # fmt: skip
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return response.status_code, body

    def device_authorization(self) -> DeviceGrant:
        """Ask for a device code and a user code (RFC 8628 §3.1)."""
        url = self.config.device_authorization_url or ""
        status, body = self.post(url, {"scope": " ".join(self.config.scopes)})
        if status != 200 or "device_code" not in body:
            raise ConfigError(f"the device authorization endpoint {url} answered {status} {_error(body)}",
                              "check oauth.client_id, oauth.scopes, and that the app allows it")  # fmt: skip
        # Google names it verification_url (before RFC 8628 was final); the RFC and Microsoft verification_uri.
        uri = body.get("verification_uri") or body.get("verification_url") or ""
        return DeviceGrant(
            device_code=str(body["device_code"]), user_code=str(body.get("user_code", "")),
            verification_uri=str(uri), verification_uri_complete=body.get("verification_uri_complete"),
            expires_in=float(body.get("expires_in", 900)), interval=float(body.get("interval", 5)),
        )  # fmt: skip

    def poll_device(self, grant: DeviceGrant, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> dict[str, Any]:  # fmt: skip
        """Poll the token endpoint until the person approves (RFC 8628 §3.4, §3.5): ``authorization_pending``
        waits, ``slow_down`` adds 5 seconds to the interval, ``access_denied`` and ``expired_token`` end it."""
        interval = max(grant.interval, 1.0)
        deadline = clock() + grant.expires_in
        while clock() < deadline:
            sleep(interval)
            status, body = self.post(self.config.token_url or "", {"grant_type": DEVICE_GRANT,
                                                                   "device_code": grant.device_code})  # fmt: skip
            if status == 200 and "access_token" in body:
                return body
            error = body.get("error")
            if error == "authorization_pending":
                continue
            if error == "slow_down":
                interval += 5
                continue
            if error in ("access_denied", "authorization_declined"):
                raise LoginRefused("the sign-in was declined in the browser", "run `quinn auth login` again")
            if error in ("expired_token", "code_expired"):
                break
            raise ConfigError(f"the token endpoint answered {status} {_error(body)} during the device grant",
                              "check oauth.token_url and oauth.client_id")  # fmt: skip
        raise LoginRefused("the code expired before it was approved", "run `quinn auth login` again")

    def client_credentials(self) -> dict[str, Any]:
        """An app-only access token for the client's own secret (RFC 6749 §4.4): no person, no refresh token."""
        url = self.config.token_url or ""
        status, body = self.post(url, {"grant_type": "client_credentials", "scope": " ".join(self.config.scopes)})
        if status == 200 and "access_token" in body:
            return body
        if status >= 500 or status == 429:
            raise RetryLater(f"the token endpoint {url} answered {status}; trying again later")
        raise ConfigError(f"the token endpoint {url} refused the app's own credentials: {status} {_error(body)}",
                          "check oauth.client_id, the client secret (it may have expired) and the app's "
                          "application permissions and admin consent")  # fmt: skip

    def refresh(self, refresh_token: str) -> dict[str, Any]:
        """New tokens for the refresh token (RFC 6749 §6); ``TokenRefused`` when the provider will not."""
        url = self.config.token_url or ""
        status, body = self.post(url, {"grant_type": "refresh_token", "refresh_token": refresh_token})
        if status == 200 and "access_token" in body:
            return body
        if body.get("error") in ("invalid_grant", "unauthorized_client", "invalid_client"):
            raise TokenRefused(f"the provider refused the refresh token: {_error(body)}",
                               "run `quinn auth login` again (as the service user) to sign in anew")  # fmt: skip
        if status >= 500 or status == 429:
            raise RetryLater(f"the token endpoint {url} answered {status}; trying again later")
        raise ConfigError(f"the token endpoint {url} answered {status} {_error(body)}",
                          "check oauth.token_url, oauth.client_id and the client secret")  # fmt: skip

    def exchange_code(self, code: str, redirect_uri: str, verifier: str) -> dict[str, Any]:
        """Tokens for an authorization code (RFC 6749 §4.1.3, with the PKCE verifier of RFC 7636 §4.5)."""
        url = self.config.token_url or ""
        status, body = self.post(url, {"grant_type": "authorization_code", "code": code,
                                       "redirect_uri": redirect_uri, "code_verifier": verifier})  # fmt: skip
        if status == 200 and "access_token" in body:
            return body
        raise ConfigError(f"the token endpoint {url} refused the authorization code: {status} {_error(body)}",
                          "run `quinn auth login` again")  # fmt: skip


def _error(body: Mapping[str, Any]) -> str:
    """The provider's error code and description (RFC 6749 §5.2), bounded; never the request."""
    error = str(body.get("error", "")) or "(no error code)"
    description = str(body.get("error_description", ""))[:200]
    return f"{error}: {description}" if description else error
