"""The console in-process (Starlette's test client over a real libSQL file): login, every route guarded, CSRF,
the read-only role, escaping of attacker-controlled text, and edits that become new versions."""

from __future__ import annotations

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from tests.console.conftest import ALICE, BOB, PASSWORDS, add_mail, csrf_of, log_in, mail_bytes

SAMPLE_PARAMS = {
    "{user}": ALICE,
    "{memory_id:int}": "1",
    "{name}": "reply",
    "{proposal_id:int}": "1",
    "{trace_id:int}": "1",
}
PUBLIC = {"/login", "/static"}  # the login form and its stylesheet; nothing else answers without a session


@pytest.fixture
def client(app):
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client


def test_every_route_needs_a_login(app, client):
    walked = set()
    for route in app.routes:
        path = route.path
        if path in PUBLIC:
            continue
        for pattern, value in SAMPLE_PARAMS.items():
            path = path.replace(pattern, value)
        assert "{" not in path, f"add a sample value for {route.path} to SAMPLE_PARAMS"
        methods = route.methods if isinstance(route, Route) else {"GET"}
        for method in methods - {"HEAD"}:
            response = client.request(method, path, follow_redirects=False, data={"content": "x", "csrf": "x"})
            if method == "GET":
                assert response.status_code == 303 and response.headers["location"] == "/login", (method, path)
            else:
                assert response.status_code == 401, (method, path)
            walked.add((method, route.path))
    assert {path for path in PUBLIC} == {r.path for r in app.routes if r.path in PUBLIC}
    assert not [r for r in app.routes if isinstance(r, Mount) and r.path not in PUBLIC]
    assert len(walked) == 30  # every guarded route: a new one shows up here and must be walked too


def test_login_then_people_with_counts_and_search(client):
    assert client.get("/people", follow_redirects=False).status_code == 303
    response = log_in(client)
    assert response.status_code == 303 and response.headers["location"] == "/people"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = client.get("/people").text
    assert ALICE in page and BOB in page
    found = client.get("/people", params={"q": "bob"}).text
    assert BOB in found and ALICE not in found
    assert "Nobody" in client.get("/people", params={"q": "nobody-like-this"}).text


def test_wrong_password_and_rate_limit(client):
    for _ in range(3):  # login_attempts = 3 in the test config
        response = log_in(client, password="wrong")
        assert response.status_code == 401 and "Wrong name or password" in response.text
    refused = log_in(client)  # even the right password waits now
    assert refused.status_code == 429 and "Too many failed logins" in refused.text
    assert client.get("/people", follow_redirects=False).status_code == 303


def test_logout_ends_the_session(client):
    log_in(client)
    page = client.get("/people").text
    response = client.post("/logout", data={"csrf": csrf_of(page)}, follow_redirects=False)
    assert response.status_code == 303
    assert client.get("/people", follow_redirects=False).status_code == 303


def test_person_memories_search_history_edit_and_forget(world, client):
    log_in(client)
    page = client.get(f"/people/{ALICE}").text
    assert "sister is called Jo" in page and "Prefers short replies" in page and "Bob runs" not in page
    assert "family / fact: 1" in page
    hits = client.get(f"/people/{ALICE}", params={"q": "sister"}).text
    assert "sister is called Jo" in hits and "Prefers short replies" not in hits
    memory_page = client.get(f"/memories/{world.memory_id}").text
    response = client.post(f"/memories/{world.memory_id}/edit", follow_redirects=False,
                           data={"csrf": csrf_of(memory_page), "content": "Alice's sister is called Joanna",
                                 "reason": "she corrected it"})  # fmt: skip
    assert response.status_code == 303
    new_id = int(response.headers["location"].rsplit("/", 1)[1])
    versions = world.store.history(new_id)
    assert [v.content for v in versions] == ["Alice's sister is called Jo", "Alice's sister is called Joanna"]
    reasons = [c.reason for c in world.store.changes(new_id) if c.change == "updated"]
    assert reasons == ["edited in the console by root: she corrected it"]
    shown = client.get(f"/memories/{new_id}").text
    assert "Joanna" in shown and "edited in the console by root" in shown and "Version 2" in shown
    forgot = client.post(f"/memories/{new_id}/forget", data={"csrf": csrf_of(shown)}, follow_redirects=False)
    assert forgot.status_code == 303
    assert not world.store.get(new_id).active
    assert "Joanna" not in client.get(f"/people/{ALICE}").text


def test_bad_form_fields_get_a_clear_error(world, client):
    log_in(client)
    page = client.get(f"/memories/{world.memory_id}").text
    empty = client.post(f"/memories/{world.memory_id}/edit", data={"csrf": csrf_of(page), "content": "  "})
    assert empty.status_code == 400 and "content: the new text is empty" in empty.text
    assert client.get("/memories/999999").status_code == 404
    old = world.store.update(world.memory_id, "changed elsewhere")
    stale = client.post(f"/memories/{world.memory_id}/edit", data={"csrf": csrf_of(page), "content": "x"})
    assert stale.status_code == 400 and "is not current" in stale.text
    assert world.store.get(old).current


def test_csrf_token_is_required_on_every_form(world, client):
    anonymous = client.post("/login", data={"name": "root", "password": PASSWORDS["root"]}, follow_redirects=False)
    assert anonymous.status_code == 403  # the login form too: no logging a browser in from another site
    log_in(client)
    for data in ({"content": "forged"}, {"content": "forged", "csrf": "not-the-token"}):
        response = client.post(f"/memories/{world.memory_id}/edit", data=data, follow_redirects=False)
        assert response.status_code == 403 and "CSRF" in response.text
        forget = client.post(f"/memories/{world.memory_id}/forget", data=data, follow_redirects=False)
        assert forget.status_code == 403
    assert world.store.get(world.memory_id).current
    assert len(world.store.history(world.memory_id)) == 1
    page = client.get("/people").text
    assert client.post("/logout", data={"csrf": "wrong"}, follow_redirects=False).status_code == 403
    assert client.post("/logout", data={"csrf": csrf_of(page)}, follow_redirects=False).status_code == 303


def test_read_only_role_may_look_not_change(world, client):
    assert log_in(client, "viewer").status_code == 303
    page = client.get(f"/memories/{world.memory_id}").text
    assert "sister is called Jo" in page and 'action="/memories' not in page  # no edit or forget form
    token = csrf_of(page)  # the logout form's: a valid token for this session
    for action in ("edit", "forget"):
        response = client.post(f"/memories/{world.memory_id}/{action}", data={"csrf": token, "content": "x"})
        assert response.status_code == 403 and "read-only" in response.text
    assert world.store.get(world.memory_id).current and len(world.store.history(world.memory_id)) == 1
    assert "failed" in client.get("/mail").text


def test_attacker_text_renders_inert(world, client):
    script = "<script>alert('x')</script>"
    mid = world.store.add(ALICE, f"likes {script} and <img src=x onerror=alert(1)>")
    add_mail(world.store.db, 3, mail_bytes(f"Re: {script}", "m3@example.org"), ALICE, "quarantined",
             f"parse error near {script}")  # fmt: skip
    log_in(client)
    pages = [
        client.get(f"/memories/{mid}"),
        client.get(f"/people/{ALICE}"),
        client.get("/mail"),
        client.get(f"/people/{ALICE}", params={"q": script}),
        client.get("/people", params={"q": script}),
    ]
    for response in pages:
        assert response.status_code == 200
        assert "<script>" not in response.text and "<img src=x" not in response.text, response.url
        assert "script-src" not in response.headers["content-security-policy"]  # no script may run at all
        assert "default-src 'none'" in response.headers["content-security-policy"]
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in pages[0].text
    assert "Re: &lt;script&gt;" in pages[2].text  # the subject, escaped
    assert "parse error near &lt;script&gt;" in pages[2].text


def test_mail_ledger_by_state_and_person(client):
    log_in(client)
    page = client.get("/mail").text
    assert "Dinner on Friday?" in page and "smtp 550 mailbox unavailable" in page
    failed = client.get("/mail", params={"state": "failed"}).text
    assert "smtp 550" in failed and "Dinner on Friday?" not in failed
    mine = client.get("/mail", params={"user": ALICE}).text
    assert "Dinner on Friday?" in mine and "smtp 550" not in mine


def test_cookie_is_secure_behind_tls(world, app):
    world.console.config.secure_cookies = True
    with TestClient(app, base_url="https://127.0.0.1") as tls:  # as the proxy in front speaks to browsers
        response = log_in(tls)
        cookie = response.headers["set-cookie"].lower()
        assert response.status_code == 303 and "secure" in cookie and "samesite=strict" in cookie
        assert tls.get("/people").status_code == 200


def test_login_page_views_never_push_out_an_admin_session(client, monkeypatch):
    monkeypatch.setattr("quinn.console.auth.MAX_ANONYMOUS", 3)
    log_in(client)
    with TestClient(client.app, base_url="http://127.0.0.1") as stranger:
        for _ in range(10):
            stranger.cookies.clear()
            assert stranger.get("/login").status_code == 200
    assert client.get("/people").status_code == 200


def test_odd_search_text_and_filters_are_answered_not_crashed(client):
    log_in(client)
    for params in ({"q": '"unbalanced'}, {"q": "AND OR NOT ("}, {"q": "*"}, {"q": "x" * 2000},
                   {"type": "two words"}, {"domain": "%"}, {"all": "1", "q": "sister"}):  # fmt: skip
        response = client.get(f"/people/{ALICE}", params=params)
        assert response.status_code in (200, 400), (params, response.status_code)
    assert client.get("/mail", params={"state": "<b>", "user": "'; DROP TABLE x"}).status_code == 200


def test_an_oversized_form_is_refused(world, client):
    log_in(client)
    page = client.get(f"/memories/{world.memory_id}").text
    response = client.post(f"/memories/{world.memory_id}/edit",
                           data={"csrf": csrf_of(page), "content": "x" * 70_000})  # fmt: skip
    assert response.status_code == 400 and "larger than 64 kB" in response.text
    assert world.store.get(world.memory_id).current


def test_people_come_a_page_at_a_time(client, monkeypatch):
    monkeypatch.setattr("quinn.console.pages.PEOPLE_LIMIT", 1)
    log_in(client)
    first = client.get("/people").text
    assert 'id="next-page"' in first and (ALICE in first) != (BOB in first)
    second = client.get("/people", params={"page": "2"}).text
    assert 'rel="prev"' in second and 'id="next-page"' not in second
    assert {ALICE, BOB} == {who for who in (ALICE, BOB) if who in first or who in second}
    assert client.get("/people", params={"page": "x"}).status_code == 200  # not a number: the first page
