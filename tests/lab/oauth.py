"""The lab's OAuth 2.0 authorization server: a small stdlib HTTP server on 127.0.0.1 that the tests start.

It speaks the parts of the RFCs Quinn and Dovecot use, and no more:

- RFC 8628 device authorization grant: ``POST /device`` gives a device code and a user code; ``POST /token`` with
  ``grant_type=urn:ietf:params:oauth:grant-type:device_code`` answers ``authorization_pending`` (§3.5) until the
  test approves the user code (`approve`, the stand-in for a person signing in), ``access_denied`` after `deny`.
- RFC 6749 refresh (§6) with rotation, as Microsoft does: each refresh issues a new refresh token and retires the
  old one; a revoked or retired one gets ``invalid_grant`` (§5.2). `revoke` plays the user removing the app.
- RFC 6749 authorization code with PKCE (RFC 7636) for the loopback redirect (RFC 8252): ``GET /authorize``
  redirects at once to the client's 127.0.0.1 ``redirect_uri`` as the account in ``login_as`` (the browser step).
- RFC 6749 §4.4 client credentials: an app-only token (no refresh token) for the client secret, good for the
  mailbox in `app_account` (Microsoft's IMAP.AccessAsApp with the mailbox permission an admin grants).
- RFC 7662 introspection: ``POST /introspect`` (HTTP Basic as the resource server, §2.1) answers
  ``{"active": true, "username": ..., "scope": ..., "exp": ...}`` for a live access token, ``{"active": false}``
  otherwise. Dovecot's oauth2 passdb and the lab's SMTP server both ask it.

Access tokens live ``access_ttl_s`` (the tests shorten it to expire one mid-run). Every token issued is kept in
`issued`, so a test can look for it in logs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from quinn.lab.process import track, untrack

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
RESOURCE_ID = "dovecot"


@dataclass
class _Device:
    user_code: str
    scope: str
    expires_at: float
    account: str | None = None
    denied: bool = False
    polls: int = 0


@dataclass
class _Grant:
    account: str
    scope: str
    revoked: bool = False


@dataclass
class _Access:
    account: str
    scope: str
    expires_at: float


@dataclass
class OAuthLab:
    """The server's state and the tests' handles on it; `start()` runs it, `stop()` ends it."""

    client_id: str = "quinn-lab-client"
    client_secret: str = field(default_factory=lambda: secrets.token_hex(8))  # for the client credentials grant
    app_account: str = ""  # the mailbox an app-only token may open (as Add-MailboxPermission grants it)
    access_ttl_s: float = 3600.0
    interval_s: int = 1
    rotate: bool = True
    resource_secret: str = field(default_factory=lambda: secrets.token_hex(8))
    devices: dict[str, _Device] = field(default_factory=dict)
    refresh_tokens: dict[str, _Grant] = field(default_factory=dict)
    access_tokens: dict[str, _Access] = field(default_factory=dict)
    codes: dict[str, tuple[str, str, str, str]] = field(default_factory=dict)  # code -> account, scope, challenge, uri
    issued: list[str] = field(default_factory=list)  # every token and code handed out
    grants: list[str] = field(default_factory=list)  # grant_type of each successful token request
    introspections: list[tuple[str, bool]] = field(default_factory=list)  # (account or "", active)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> OAuthLab:
        lab = self

        class Handler(_Handler):
            oauth = lab

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, name="oauth-lab", daemon=True).start()
        track(self)
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        untrack(self)

    close = stop

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def introspection_url(self) -> str:
        """With the resource server's credentials in it, as Dovecot's introspection_url takes them."""
        return f"http://{RESOURCE_ID}:{self.resource_secret}@{self.url.removeprefix('http://')}/introspect"

    def toml(self, token_file: str, scopes: tuple[str, ...] = ("mail",)) -> str:
        """The ``[oauth]`` section of a quinn.toml pointing here."""
        return (f'[oauth]\nflow = "device"\ndevice_authorization_url = "{self.url}/device"\n'
                f'authorization_url = "{self.url}/authorize"\ntoken_url = "{self.url}/token"\n'
                f'client_id = "{self.client_id}"\nscopes = {json.dumps(list(scopes))}\ntoken_file = "{token_file}"\n'
                "timeout_s = 5\n")  # fmt: skip

    # -- what a person, or the provider's admin, does ---------------------------------------------------

    def approve(self, account: str, timeout_s: float = 30.0) -> str:
        """Sign in as ``account`` for the newest pending device code (waits until one is asked for); its code."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                pending = [d for d in self.devices.values() if d.account is None and not d.denied]
                if pending:
                    pending[-1].account = account
                    return pending[-1].user_code
            time.sleep(0.05)
        raise TimeoutError("no device code was asked for")

    def deny(self) -> None:
        with self._lock:
            for device in self.devices.values():
                if device.account is None:
                    device.denied = True

    def revoke(self, account: str) -> int:
        """Revoke every refresh token and access token of ``account`` (the user removed the app); how many."""
        with self._lock:
            grants = [g for g in self.refresh_tokens.values() if g.account == account and not g.revoked]
            for grant in grants:
                grant.revoked = True
            for token in [t for t, a in self.access_tokens.items() if a.account == account]:
                del self.access_tokens[token]
            return len(grants)

    def expire_access_tokens(self) -> None:
        """Every access token stops working now (the provider's clock ran out early)."""
        with self._lock:
            self.access_tokens.clear()

    def introspect(self, token: str) -> dict[str, Any]:
        """RFC 7662 §2.2 for ``token``; what ``/introspect`` answers."""
        with self._lock:
            access = self.access_tokens.get(token)
            active = access is not None and access.expires_at > time.time()
            self.introspections.append((access.account if access else "", active))
            if not active or access is None:
                return {"active": False}
            return {"active": True, "username": access.account, "scope": access.scope, "client_id": self.client_id,
                    "token_type": "Bearer", "exp": int(access.expires_at)}  # fmt: skip

    def check(self, user: str, token: str) -> bool:
        """The SMTP lab's validation: ask /introspect over HTTP, as Dovecot does."""
        response = httpx.post(f"{self.url}/introspect", data={"token": token},
                              auth=(RESOURCE_ID, self.resource_secret), timeout=5)  # fmt: skip
        body = response.json()
        return bool(body.get("active")) and body.get("username") == user

    # -- the endpoints ----------------------------------------------------------------------------------

    def _issue(self, account: str, scope: str, refresh: bool = True) -> dict[str, Any]:
        access = "at-" + secrets.token_urlsafe(24)
        self.access_tokens[access] = _Access(account, scope, time.time() + self.access_ttl_s)
        self.issued.append(access)
        body: dict[str, Any] = {"access_token": access, "token_type": "Bearer", "expires_in": self.access_ttl_s,
                                "scope": scope}  # fmt: skip
        if refresh:
            token = "rt-" + secrets.token_urlsafe(24)
            self.refresh_tokens[token] = _Grant(account, scope)
            self.issued.append(token)
            body["refresh_token"] = token
        return body

    def token(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != self.client_id:
            return 401, {"error": "invalid_client"}
        grant = form.get("grant_type")
        with self._lock:
            if grant == DEVICE_GRANT:
                device = self.devices.get(form.get("device_code", ""))
                if device is None:
                    return 400, {"error": "invalid_grant"}
                device.polls += 1
                if device.denied:
                    return 400, {"error": "access_denied"}
                if time.time() > device.expires_at:
                    return 400, {"error": "expired_token"}
                if device.account is None:
                    return 400, {"error": "authorization_pending"}
                del self.devices[form["device_code"]]
                self.grants.append(grant)
                return 200, self._issue(device.account, device.scope)
            if grant == "refresh_token":
                held = self.refresh_tokens.get(form.get("refresh_token", ""))
                if held is None or held.revoked:
                    return 400, {"error": "invalid_grant", "error_description": "the refresh token was revoked"}
                if self.rotate:
                    held.revoked = True
                self.grants.append(grant)
                return 200, self._issue(held.account, held.scope, refresh=self.rotate)
            if grant == "client_credentials":  # RFC 6749 §4.4: the app's own secret, no person, no refresh token
                if form.get("client_secret") != self.client_secret or not self.app_account:
                    return 401, {"error": "invalid_client"}
                self.grants.append(grant)
                return 200, self._issue(self.app_account, form.get("scope", ""), refresh=False)
            if grant == "authorization_code":
                found = self.codes.pop(form.get("code", ""), None)
                if found is None or found[3] != form.get("redirect_uri"):
                    return 400, {"error": "invalid_grant"}
                account, scope, challenge, _uri = found
                verifier = form.get("code_verifier", "")
                digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
                if digest != challenge:
                    return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
                self.grants.append(grant)
                return 200, self._issue(account, scope)
        return 400, {"error": "unsupported_grant_type"}

    def device(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if form.get("client_id") != self.client_id:
            return 401, {"error": "invalid_client"}
        code = secrets.token_urlsafe(24)
        user_code = f"{secrets.randbelow(10**4):04d}-{secrets.randbelow(10**4):04d}"
        with self._lock:
            self.devices[code] = _Device(user_code, form.get("scope", ""), time.time() + 600)
            self.issued.append(code)
        return 200, {"device_code": code, "user_code": user_code, "verification_uri": f"{self.url}/activate",
                     "expires_in": 600, "interval": self.interval_s}  # fmt: skip

    def authorize(self, query: dict[str, str]) -> str:
        """The browser step of the loopback flow: the redirect (with code and state) for ``login_as``."""
        code = secrets.token_urlsafe(16)
        uri = query.get("redirect_uri", "")
        with self._lock:
            self.codes[code] = (query.get("login_as", ""), query.get("scope", ""), query.get("code_challenge", ""), uri)
            self.issued.append(code)
        return f"{uri}?{urlencode({'code': code, 'state': query.get('state', '')})}"


class _Handler(BaseHTTPRequestHandler):
    oauth: OAuthLab

    def _form(self) -> dict[str, str]:
        length = int(self.headers.get("Content-Length") or 0)
        parsed = parse_qs(self.rfile.read(length).decode())
        return {k: v[0] for k, v in parsed.items()}

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        form = self._form()
        if path == "/token":
            self._json(*self.oauth.token(form))
        elif path == "/device":
            self._json(*self.oauth.device(form))
        elif path == "/introspect":
            expected = base64.b64encode(f"{RESOURCE_ID}:{self.oauth.resource_secret}".encode()).decode()
            if self.headers.get("Authorization") != f"Basic {expected}":  # RFC 7662 §2.1: the caller is known
                self._json(401, {"error": "invalid_client"})
                return
            self._json(200, self.oauth.introspect(form.get("token", "")))
        else:
            self._json(404, {"error": "not_found"})

    def do_GET(self) -> None:
        split = urlsplit(self.path)
        if split.path != "/authorize":
            self._json(404, {"error": "not_found"})
            return
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        self.send_response(302)
        self.send_header("Location", self.oauth.authorize(query))
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return
