"""Logging in and out of the console.

The login form carries a CSRF token too (of an anonymous session made when the page is shown), so another site
cannot log a browser in under its own account. A login makes a new session (the anonymous one ends: its id could
have been planted), and failed attempts are limited per client address (refused) and per name (slowed), counted
before the password is hashed (``LoginLimiter``).
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from quinn.console.app import COOKIE, SECURITY_HEADERS, Console, Endpoint, FormError, audit, read_form
from quinn.console.auth import DECOY, Attempt, csrf_ok


def login_page(console: Console) -> Endpoint:
    """GET /login: the form (a logged-in admin goes on to the people)."""

    async def show_login(request: Request) -> Response:
        session = console.session_of(request)
        if session is not None and session.admin in console.admins:
            return RedirectResponse("/people", status_code=303, headers=SECURITY_HEADERS)
        session = session or console.sessions.new()
        request.scope["console_session"] = session
        return console.session_cookie(console.render(request, "login.html"), session)

    return show_login


def login(console: Console) -> Endpoint:
    """POST /login: check the name and password (or token), then start the admin's session."""

    async def check_login(request: Request) -> Response:
        session = console.session_of(request)
        request.scope["console_session"] = session
        try:
            form = await read_form(request)
        except FormError as exc:
            return console.render(request, "error.html", 400, message=str(exc))
        if not csrf_ok(session, form):
            return console.render(request, "error.html", 403, message="The login form is stale (no valid CSRF "
                                  "token): open the login page again.")  # fmt: skip
        assert session is not None  # csrf_ok is False without one
        name = form.get("name", "").strip().lower()
        client = request.client.host if request.client else "unknown"
        # The slot is taken before the password is hashed: attempts at once count as they arrive (auth.py).
        attempt = console.limiter.take(f"address:{client}", f"name:{name}")
        if not isinstance(attempt, Attempt):
            log_attempt(name, client, "refused: too many failed attempts")
            return console.render(request, "login.html", 429, login_name=name,
                                  error=f"Too many failed logins: try again in {int(attempt) + 1} s.")  # fmt: skip
        admin = console.admins.get(name)
        checked = ok = False
        try:
            if attempt.delay_s:  # the name had too many failures (maybe a stranger's): slowed, not locked
                await asyncio.sleep(attempt.delay_s)
            # scrypt takes ~0.1 s of CPU: off the event loop. An unknown name is checked against a decoy hash, and
            # a token against the decoy too (auth.Token.matches), so every name costs the same.
            ok = await asyncio.to_thread((admin.credential if admin else DECOY).matches, form.get("password", ""))
            checked = True
        finally:  # a request dropped before its check counts as no attempt
            console.limiter.done(attempt, failed=checked and not (ok and admin))
        if not (ok and admin):
            log_attempt(name, client, "failed")
            return console.render(request, "login.html", 401, login_name=name, error="Wrong name or password.")
        console.sessions.end(session.id)
        fresh = console.sessions.new(admin.name)
        log_attempt(name, client, f"ok ({admin.role})")
        return console.session_cookie(RedirectResponse("/people", status_code=303, headers=SECURITY_HEADERS), fresh)

    return check_login


def logout(console: Console) -> Endpoint:
    """POST /logout: end the session."""

    async def end_session(request: Request) -> Response:
        session = request.scope["console_session"]
        console.sessions.end(session.id)
        audit.info("console: %s logged out", session.admin)
        response = RedirectResponse("/login", status_code=303, headers=SECURITY_HEADERS)
        response.delete_cookie(COOKIE, path="/")
        return response

    return end_session


def log_attempt(name: str, client: str, outcome: str) -> None:
    """One audit line per login attempt (the name as typed, never the password)."""
    audit.info("console: login as %r from %s %s", name[:64], client, outcome)
