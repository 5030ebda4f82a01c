"""The console's core: one ``Console`` (the store, the ledger, the admins, the sessions) and what every page uses.

Every route but the login page and the stylesheet goes through ``guarded``: no session, no page (a test walks
every route anonymously). Every POST needs the session's CSRF token, and the changing ones the admin role.
Templates are Jinja2 with autoescaping on for everything: memory text and subjects are attacker-controlled. The
pages have no script at all, and the Content-Security-Policy says so, so even a slip in escaping stays inert.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from quinn.agent import PromptStore, TemplateTrials, TrialsBusy, sample_variables, usage
from quinn.clock import Clock
from quinn.config import ConsoleConfig, SchedulerConfig
from quinn.console.auth import Admin, LoginLimiter, Session, Sessions, admins_from, csrf_ok
from quinn.errors import QuinnError
from quinn.mailbox import MailKey, MailLedger
from quinn.memory import MemoryStore

log = logging.getLogger(__name__)
audit = logging.getLogger("quinn.console.audit")  # one line per change: who did what (also in memory_versions)

HERE = Path(__file__).parent
COOKIE = "quinn_console"
MAX_FORM_BYTES = 64 * 1024
SECURITY_HEADERS = {
    # No script, no frames, no third party: the console's pages need nothing but its own stylesheet.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

Endpoint = Callable[[Request], Awaitable[Response]]


class FormError(QuinnError):
    """A form field is missing or wrong: shown to the admin on the page, with what to do."""


@dataclass
class Console:
    """What the console serves from: built from the validated ``[console]`` section and an open store."""

    config: ConsoleConfig
    store: MemoryStore
    admins: dict[str, Admin] = field(default_factory=dict)
    #: The templates of ``[prompts] dir`` (this thread's own store; without one, the packaged defaults only and
    #: no saving), and the preview's variables: (template, person, email text, subject) -> variables, on the DB
    #: thread (``serve.prompt_parts``); without it a preview uses the sample variables.
    prompts: PromptStore = field(default_factory=lambda: PromptStore(None, samples=sample_variables))
    preview: Callable[[str, str, str, str], dict[str, Any]] | None = None
    #: Where template text typed here (a check, a preview, a save, a proposal accepted) is rendered: in a child
    #: process with limits, at most ``TRIAL_SLOTS`` at a time (agent/trials.py); never on a loop or the DB thread.
    trials: TemplateTrials = field(default_factory=TemplateTrials)
    #: The jobs' settings (intervals, disabled) and "run now": a job's name -> its outcome, the runner's
    #: ``run_job(force=True)`` (``serve.job_parts``); without it the Jobs page only reads.
    job_settings: SchedulerConfig = field(default_factory=SchedulerConfig)
    run_job: Callable[[str], Awaitable[Any]] | None = None
    job_tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # runs started here, by job
    #: Retry of a failed or quarantined mail (``engine/retry.py``, as ``quinn mail status --retry``), on the DB
    #: thread; it needs the IMAP settings (``serve.mail_parts``). Without it the Mail page offers no retry.
    retry_mail: Callable[[MailKey], dict[str, Any]] | None = None
    #: A purge's mailbox part: the person's mail out of Quinn's folders (as ``quinn memory purge --mailbox``),
    #: returns how many went; needs IMAP. Without it a purge deletes what the database holds and says the rest.
    purge_mailbox: Callable[[str], int] | None = None
    #: What a million tokens of each model cost (``[llm] price_*_per_mtok``, ``usage.prices_from``); without
    #: them the pages show tokens, and "—" for cost. ``clock``: what "this month" is.
    prices: dict[str, usage.Price] = field(default_factory=dict)
    clock: Clock = field(default_factory=Clock)
    #: ``[smtp] reply_mode``: in draft mode the Mail page always shows its drafts awaiting review (otherwise only
    #: when some are left from a time it was on).
    reply_mode: str = "send"

    def __post_init__(self) -> None:
        if not self.admins:
            self.admins = admins_from(self.config)
        self.ledger = MailLedger(self.store.db)
        self.sessions = Sessions(self.config.session_hours * 3600)
        self.limiter = LoginLimiter(self.config.login_attempts, self.config.login_window_s)
        self.templates = Environment(
            loader=FileSystemLoader(HERE / "templates"), autoescape=True, undefined=StrictUndefined
        )
        self.templates.filters["path"] = lambda text: quote(str(text), safe="@")  # one URL path segment
        self.templates.filters["money"] = lambda cost: "—" if cost is None else f"{cost:,.4f}"  # no price: a dash
        self.templates.filters["count"] = lambda number: f"{number:,}"
        self.templates.filters["shell"] = shlex.quote  # an address in a command to copy: one word, inert

    # -- responses ---------------------------------------------------------------------------------------

    def render(self, request: Request, template: str, status_code: int = 200, **values: Any) -> HTMLResponse:
        """A page from ``templates/<template>`` with the session's admin and CSRF token, and the security headers."""
        session: Session | None = request.scope.get("console_session")
        admin = self.admins.get(session.admin) if session and session.admin else None
        html = self.templates.get_template(template).render(
            admin=admin, csrf=session.csrf if session else "", error=values.pop("error", None), **values
        )
        return HTMLResponse(html, status_code=status_code, headers=SECURITY_HEADERS)

    def session_cookie(self, response: Response, session: Session) -> Response:
        """Set the session cookie: HttpOnly, SameSite=Strict, Secure when a TLS proxy is in front."""
        response.set_cookie(COOKIE, session.id, max_age=int(self.config.session_hours * 3600), path="/",
                            httponly=True, samesite="strict", secure=self.config.secure_cookies)  # fmt: skip
        return response

    def session_of(self, request: Request) -> Session | None:
        """The request's live session, if any."""
        return self.sessions.get(request.cookies.get(COOKIE))

    def admin_of(self, request: Request) -> Admin:
        """The logged-in admin of a guarded request."""
        session: Session = request.scope["console_session"]
        return self.admins[session.admin or ""]

    def guarded(self, endpoint: Endpoint, *, changes: bool = False) -> Endpoint:
        """``endpoint`` for logged-in admins only; a POST needs the CSRF token, ``changes`` also the admin role."""

        async def guard(request: Request) -> Response:
            session = self.session_of(request)
            if session is None or session.admin not in self.admins:
                if request.method == "GET":
                    return RedirectResponse("/login", status_code=303, headers=SECURITY_HEADERS)
                return Response("log in first", status_code=401, headers=SECURITY_HEADERS)
            request.scope["console_session"] = session
            try:
                if request.method == "POST":
                    form = await read_form(request)
                    request.scope["console_form"] = form
                    if not csrf_ok(session, form):
                        return self.render(request, "error.html", 403, message="The form is stale or forged (no "
                                           "valid CSRF token). Reload the page and try again.")  # fmt: skip
                    if changes and not self.admins[session.admin or ""].may_change:
                        return self.render(request, "error.html", 403, message="Your role is read-only: you may "
                                           "look, not change.")  # fmt: skip
                return await endpoint(request)
            except TrialsBusy as exc:  # every template trial slot is taken: a moment, not a mistake
                response = self.render(request, "error.html", 503, message=str(exc.message), hint=exc.hint)
                response.headers["Retry-After"] = "5"
                return response
            except QuinnError as exc:  # a bad form field, or the store refusing (an immutable or old version)
                return self.render(request, "error.html", 400, message=str(exc), hint=exc.hint)

        guard.__name__ = endpoint.__name__
        return guard


async def read_form(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body (all the console's forms send): one value per field, the last."""
    too_large = FormError(f"the form is larger than {MAX_FORM_BYTES // 1024} kB")
    if int(request.headers.get("content-length") or 0) > MAX_FORM_BYTES:
        raise too_large
    body = b""
    async for chunk in request.stream():  # read no further than the limit, whatever the header claimed
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise too_large
    try:
        return dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50))
    except (UnicodeDecodeError, ValueError):
        return {}


def form_of(request: Request) -> dict[str, str]:
    """The form a guarded POST already read."""
    return request.scope["console_form"]
