"""The console's routes: every URL and the page that answers it, over one ``Console`` (``app``).

Every route but the login page and the stylesheet goes through ``Console.guarded``: no session, no page (a test
walks every route anonymously); ``changes=True`` marks the POSTs that need the admin role.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from quinn.console import draft_pages, job_pages, login, pages, person_pages, prompt_pages, reply_pages
from quinn.console.app import HERE, Console


def build_app(console: Console) -> Starlette:
    """The Starlette app: the login routes, then every page under ``Console.guarded``."""
    guarded = console.guarded
    routes = [
        Route("/login", login.login_page(console), methods=["GET"]),
        Route("/login", login.login(console), methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/logout", guarded(login.logout(console)), methods=["POST"]),
        Route("/", guarded(pages.home(console)), methods=["GET"]),
        Route("/people", guarded(pages.people(console)), methods=["GET"]),
        Route("/people/{user}", guarded(pages.person(console)), methods=["GET"]),
        Route("/people/{user}/export", guarded(person_pages.export(console), changes=True), methods=["POST"]),
        Route("/people/{user}/purge", guarded(person_pages.purge_person(console), changes=True), methods=["POST"]),
        Route("/memories/{memory_id:int}", guarded(pages.memory(console)), methods=["GET"]),
        Route("/memories/{memory_id:int}/pin", guarded(person_pages.pin(console), changes=True), methods=["POST"]),
        Route(
            "/memories/{memory_id:int}/private", guarded(person_pages.private(console), changes=True), methods=["POST"]
        ),
        Route("/memories/{memory_id:int}/edit", guarded(pages.edit(console), changes=True), methods=["POST"]),
        Route("/memories/{memory_id:int}/forget", guarded(pages.forget(console), changes=True), methods=["POST"]),
        Route("/mail", guarded(pages.mail(console)), methods=["GET"]),
        Route("/mail/retry", guarded(pages.retry(console), changes=True), methods=["POST"]),
        *(
            Route(
                f"/mail/drafts/{action}", guarded(draft_pages.decide(console, action), changes=True), methods=["POST"]
            )
            for action in draft_pages.ACTIONS
        ),
        Route("/replies/{trace_id:int}", guarded(reply_pages.why(console)), methods=["GET"]),
        Route("/audit", guarded(pages.audit_page(console)), methods=["GET"]),
        Route("/jobs", guarded(job_pages.jobs(console)), methods=["GET"]),
        Route("/jobs/{name}/run", guarded(job_pages.run_now(console), changes=True), methods=["POST"]),
        Route("/prompts", guarded(prompt_pages.listing(console)), methods=["GET"]),
        Route("/prompts/{name}", guarded(prompt_pages.page(console)), methods=["GET"]),
        Route("/prompts/{name}/diff", guarded(prompt_pages.diff(console)), methods=["GET"]),
        # A preview changes nothing but runs the typed template text (in a child with limits): the admin role's.
        Route("/prompts/{name}/preview", guarded(prompt_pages.preview(console), changes=True), methods=["POST"]),
        Route("/prompts/{name}/save", guarded(prompt_pages.save(console), changes=True), methods=["POST"]),
        Route("/prompts/{name}/rollback", guarded(prompt_pages.rollback(console), changes=True), methods=["POST"]),
        Route("/proposals", guarded(prompt_pages.proposal_list(console)), methods=["GET"]),
        Route("/proposals/{proposal_id:int}", guarded(prompt_pages.proposal_page(console)), methods=["GET"]),
        Route(
            "/proposals/{proposal_id:int}/accept",
            guarded(prompt_pages.decide(console, "accept"), changes=True),
            methods=["POST"],
        ),
        Route(
            "/proposals/{proposal_id:int}/reject",
            guarded(prompt_pages.decide(console, "reject"), changes=True),
            methods=["POST"],
        ),
    ]
    return Starlette(routes=routes)
