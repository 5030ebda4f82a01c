"""`quinn auth login`: getting the first tokens, by the device grant (RFC 8628) or the loopback redirect (RFC 8252).

Device: the provider gives a URL and a short code; the operator opens the URL in any browser (a laptop, a phone)
and types the code, while Quinn polls the token endpoint. Works over ssh on a headless server.

Loopback: for providers that do not allow the mail scope in the device grant (Google): Quinn listens on
127.0.0.1 (RFC 8252 §7.3), prints the authorization URL with a PKCE challenge (RFC 7636) and a random ``state``,
and takes the code from the browser's redirect. On a headless server, an ssh tunnel (``ssh -L PORT:127.0.0.1:PORT``)
brings the redirect back.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlencode, urlsplit

from quinn.config import OAuthConfig
from quinn.errors import ConfigError
from quinn.oauth.endpoints import LoginRefused, OAuthClient
from quinn.oauth.source import from_response
from quinn.oauth.tokens import TokenFile, TokenSet

Say = Callable[[str], None]


def device_login(client: OAuthClient, account: str, say: Say, sleep: Callable[[float], None] = time.sleep) -> TokenSet:
    """Run the device grant; the caller writes the result."""
    grant = client.device_authorization()
    say(f"To let Quinn read and send mail as {account}, open {grant.verification_uri}")
    say(f"and enter the code {grant.user_code}  (it expires in {grant.expires_in / 60:.0f} minutes)")
    if grant.verification_uri_complete:
        say(f"(or open {grant.verification_uri_complete} directly)")
    say(f"Sign in there as {account}. Waiting for the approval ...")
    body = client.poll_device(grant, sleep=sleep)
    return from_response(body, account, client.config, time.time())


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636 §4.1, §4.2)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


class _Redirect(BaseHTTPRequestHandler):
    """Takes the one redirect the browser brings back to 127.0.0.1."""

    server: _LoopbackServer

    def do_GET(self) -> None:
        query = parse_qs(urlsplit(self.path).query)
        self.server.answer = {k: v[0] for k, v in query.items() if v}
        ok = "code" in self.server.answer
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        self.wfile.write(b"Quinn is signed in; you can close this tab." if ok else b"Sign-in failed; see the terminal.")
        self.server.done.set()

    def log_message(self, format: str, *args: object) -> None:  # the query holds the code: never log it
        return


class _LoopbackServer(HTTPServer):
    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _Redirect)
        self.answer: dict[str, str] = {}
        self.done = threading.Event()


def loopback_login(client: OAuthClient, account: str, say: Say, port: int = 0, timeout_s: float = 600.0,
                   open_url: Callable[[str], object] | None = None) -> TokenSet:  # fmt: skip
    """Run the authorization code grant with a loopback redirect and PKCE; the caller writes the result."""
    config = client.config
    server = _LoopbackServer(port)
    redirect_uri = f"http://127.0.0.1:{server.server_address[1]}/"
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(16)
    params = {
        "response_type": "code", "client_id": config.client_id or "", "redirect_uri": redirect_uri,
        "scope": " ".join(config.scopes), "state": state, "code_challenge": challenge,
        "code_challenge_method": "S256",
        # Google issues a refresh token only with offline access, and again only when consent is asked anew.
        "access_type": "offline", "prompt": "consent", "login_hint": account,
    }  # fmt: skip
    url = f"{config.authorization_url}?{urlencode(params)}"
    thread = threading.Thread(target=server.serve_forever, name="quinn-oauth-loopback", daemon=True)
    thread.start()
    try:
        say(f"To let Quinn read and send mail as {account}, open this URL in a browser on this machine:")
        say(url)
        say(f"(on a server without a browser: ssh -L {server.server_address[1]}:127.0.0.1:{server.server_address[1]} "
            "to it first, then open the URL on your own machine)")  # fmt: skip
        if open_url is not None:
            open_url(url)
        if not server.done.wait(timeout_s):
            raise LoginRefused("no answer came back from the browser in time", "run `quinn auth login` again")
    finally:
        server.shutdown()
        server.server_close()
    answer = server.answer
    if answer.get("state") != state:
        raise ConfigError("the browser's answer did not carry our state: not the sign-in Quinn started",
                          "run `quinn auth login` again")  # fmt: skip
    if "code" not in answer:
        raise LoginRefused(f"the provider answered {answer.get('error', 'no code')}", "run `quinn auth login` again")
    body = client.exchange_code(answer["code"], redirect_uri, verifier)
    return from_response(body, account, config, time.time())


def save_login(config: OAuthConfig, tokens: TokenSet) -> TokenFile:
    """Write the new tokens (0600) under the file's lock."""
    file = TokenFile(config.token_file)
    with file.locked():
        file.write(tokens)
    return file
