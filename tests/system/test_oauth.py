"""OAuth 2.0 for IMAP and SMTP (issue 33) against real servers on 127.0.0.1: Dovecot 2.3 with its ``oauth2``
passdb and the SMTP lab, both validating tokens by RFC 7662 introspection at the lab's authorization server
(tests/lab/oauth.py), which also runs the RFC 8628 device grant that `quinn auth login` goes through.

The daemon answers mail over XOAUTH2 on both sides; tokens that stop working mid-run are renewed without losing
or repeating a mail; a revoked refresh token holds mail (found by the IMAP login: retried until the new token
file appears; found by the SMTP login: quinn/hold.py's setup hold, ended by SIGHUP), `quinn check` says to sign
in again, and after `quinn auth login` the held mail is answered once; no token reaches a log line or output.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest

from quinn.hold import HELD_PREFIX
from quinn.lab.wait import wait_for
from tests.lab.daemon import LabConfig, QuinnProcess
from tests.lab.dovecot import Dovecot
from tests.lab.llm_server import ScriptedLLM
from tests.lab.mails import ledger, make_mail, plain_model, replies_to
from tests.lab.oauth import DEVICE_GRANT, OAuthLab
from tests.lab.smtp import SmtpLab, mx_stamp

QUIET = '[embeddings]\nbackend = "none"\n'
Start = Callable[..., QuinnProcess]


class OAuthSetup(NamedTuple):
    """The authorization server, a Dovecot and SMTP lab that trust it, and a quinn.toml logging in with it."""

    oauth: OAuthLab
    server: Dovecot
    smtp: SmtpLab
    config: LabConfig


@pytest.fixture
def oauth_setup(
    make_dovecot: Callable[..., Dovecot], lab_config: Callable[..., LabConfig], llm_server: ScriptedLLM,
    tmp_path: Path,
) -> Iterator[Callable[..., OAuthSetup]]:  # fmt: skip
    llm_server.responder = plain_model
    started: list[tuple[OAuthLab, SmtpLab]] = []

    def make(mechanism: str = "xoauth2", **config: object) -> OAuthSetup:
        oauth = OAuthLab().start()
        server = make_dovecot(oauth2_introspection_url=oauth.introspection_url)
        smtp = SmtpLab(server, oauth=oauth.check)
        smtp.start()
        started.append((oauth, smtp))
        lab = lab_config(server=server, smtp=smtp, extra=QUIET + oauth.toml(str(tmp_path / "token.json")) +
                         f'mechanism = "{mechanism}"\n', **config)  # fmt: skip
        text = lab.path.read_text().replace('password_env = "QUINN_TEST_IMAP_PASSWORD"\n', 'auth = "oauth2"\n')
        smtp_login = f'username = "{lab.address}"\nauth = "oauth2"\n'
        text = text.replace(f'from_address = "{lab.address}"\n', f'from_address = "{lab.address}"\n{smtp_login}')
        lab.path.write_text(text)
        env = {k: v for k, v in lab.env.items() if k != "QUINN_TEST_IMAP_PASSWORD"}  # no password anywhere
        return OAuthSetup(oauth, server, smtp, LabConfig(lab.path, env, lab.address, lab.db_path))

    try:
        yield make
    finally:
        for oauth, smtp in started:
            smtp.stop()
            oauth.stop()


def quinn(config: LabConfig, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **config.env, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "quinn", *args, "-c", str(config.path)], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip


def auth_login(setup: OAuthSetup) -> subprocess.CompletedProcess[str]:
    """`quinn auth login` through the device grant; the test signs in as Quinn's account when the code appears."""
    approved: list[str] = []
    person = threading.Thread(target=lambda: approved.append(setup.oauth.approve(setup.config.address)))
    person.start()
    done = quinn(setup.config, "auth", "login")
    person.join(timeout=35)
    assert done.returncode == 0, done.stdout + done.stderr
    assert approved and f"enter the code {approved[0]}" in done.stdout  # the code the person typed was printed
    return done


def deliver(setup: OAuthSetup, sender: str, subject: str) -> str:
    message_id = f"<{subject.replace(' ', '-')}@people.test>"
    raw = make_mail(sender, setup.config.address, subject, message_id=message_id)
    setup.server.append(setup.config.address, mx_stamp(raw, sender))
    return message_id


def answered_once(setup: OAuthSetup, user: str, message_ids: list[str], daemon: QuinnProcess) -> None:
    def done() -> bool:
        inbox = setup.server.messages(user)
        counts = [len(replies_to(inbox, mid)) for mid in message_ids]
        assert max(counts, default=0) <= 1, f"a mail was answered twice: {counts}"
        return all(c == 1 for c in counts)

    wait_for(done, f"one reply to each of {message_ids}", timeout_s=90, log=daemon.log)


def test_device_login_mail_over_oauth_expiry_and_revocation(
    oauth_setup: Callable[..., OAuthSetup], users: Callable[[str], str], quinn_daemon: Start
) -> None:
    setup = oauth_setup(imap_extra="login_retry_s = 1\nreconnect_max_s = 1")
    oauth, server, smtp, config = setup
    token_file = config.path.parent / "token.json"
    outputs: list[str] = []

    # Sign in through the device grant (RFC 8628): the CLI prints the URL and code, the test approves it.
    login = auth_login(setup)
    outputs.append(login.stdout + login.stderr)
    assert f"open {oauth.url}/activate" in login.stdout and "mode 0600" in login.stdout
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert oauth.grants == [DEVICE_GRANT]
    status = quinn(config, "auth", "status")
    outputs.append(status.stdout + status.stderr)
    assert status.returncode == 0 and config.address in status.stdout and "mail" in status.stdout, status.stdout
    assert "access token expires" in status.stdout and "held" in status.stdout
    check = quinn(config, "check")  # the token opens IMAP and SMTP before the daemon ever runs
    outputs.append(check.stdout + check.stderr)
    lines = {line.split()[0]: line for line in check.stdout.splitlines() if line.strip()}
    assert all(" ok " in lines[name] for name in ("oauth", "imap", "smtp")), check.stdout
    assert f"{config.address}: access token valid until" in lines["oauth"]

    # Mail answered over OAuth on both sides: Dovecot's oauth2 passdb and the SMTP lab accepted the token.
    alice = users("alice")
    first = deliver(setup, alice, "Question one")
    daemon = quinn_daemon(config)
    daemon.wait_for_log("quinn started", timeout_s=90)
    answered_once(setup, alice, [first], daemon)
    assert ("XOAUTH2", config.address) in smtp.oauth_logins
    assert f"user=<{config.address}>, method=XOAUTH2" in server.log_path.read_text()

    # Mid-run the provider stops honouring the access token (it expired early): the next IMAP login and SMTP AUTH
    # are refused, the token is renewed once, and both go on; no mail is lost or answered twice.
    refreshes = oauth.grants.count("refresh_token")
    oauth.expire_access_tokens()
    server.kick(config.address)
    second = deliver(setup, alice, "Question two")
    answered_once(setup, alice, [first, second], daemon)
    assert oauth.grants.count("refresh_token") == refreshes + 1  # one renewal served IMAP and SMTP
    assert "renewed (refused by the server)" in daemon.log()

    # The user revokes the app: the refresh token is refused, mail is held (not failed), and `quinn check` says why.
    oauth.revoke(config.address)
    server.kick(config.address)
    third = deliver(setup, alice, "Question three")
    daemon.wait_for_log("refresh token for", timeout_s=60)
    daemon.wait_for_log("IMAP login rejected while running", timeout_s=30)
    check = quinn(config, "check")
    outputs.append(check.stdout + check.stderr)
    line = next(x for x in check.stdout.splitlines() if x.startswith("oauth"))
    assert check.returncode == 1 and "FAILED" in line and "refused by the provider" in line, check.stdout
    assert "run `quinn auth login`" in line
    assert replies_to(server.messages(alice), third) == []
    assert daemon.proc is not None and daemon.proc.poll() is None  # held, still running

    # Signing in again resumes the daemon without a restart: the held mail is answered, once.
    again = auth_login(setup)
    outputs.append(again.stdout + again.stderr)
    answered_once(setup, alice, [first, second, third], daemon)

    def all_replied(*mids: str) -> bool:  # the ledger's last step follows the reply's delivery
        return all(ledger(config.db_path)[mid]["state"] == "replied" for mid in mids)

    wait_for(lambda: all_replied(first, second, third), "three replied", timeout_s=30, log=daemon.log)

    # Revoked while the IMAP session stays up: the SMTP login is what finds out. That is quinn/hold.py's setup
    # hold: the mail is deferred (not failed, no attempt counted) until the operator signs in again and reloads.
    oauth.revoke(config.address)
    fourth = deliver(setup, alice, "Question four")
    daemon.wait_for_log("mail is held (deferred, not failed)", timeout_s=60)
    # The log line comes before the ledger row is written: on a loaded box the row was still "handling".
    wait_for(lambda: ledger(config.db_path)[fourth]["state"] != "handling", "the held mail's ledger row",
             timeout_s=30, log=daemon.log)  # fmt: skip
    row = ledger(config.db_path)[fourth]
    assert row["state"] == "deferred" and row["reason"].startswith(HELD_PREFIX) and row["attempts"] == 0, row
    assert "run `quinn auth login`" in row["reason"]
    again = auth_login(setup)
    outputs.append(again.stdout + again.stderr)
    assert daemon.proc is not None
    daemon.proc.send_signal(signal.SIGHUP)  # the operator's "I fixed it": the hold ends at once
    answered_once(setup, alice, [first, second, third, fourth], daemon)
    wait_for(lambda: all_replied(fourth), "the held mail replied", timeout_s=30, log=daemon.log)
    assert daemon.terminate() == 0

    # No token, device code or authorization code in any log line or command output.
    seen = "\n".join([daemon.log(), server.log_path.read_text(), *outputs])
    leaked = [token for token in oauth.issued if token in seen]
    assert not leaked, f"{len(leaked)} tokens in logs"
    assert "Traceback" not in daemon.log()


def test_loopback_login_with_pkce(oauth_setup: Callable[..., OAuthSetup]) -> None:
    """The loopback redirect (RFC 8252 §7.3) with PKCE: the test plays the browser, signing in at /authorize."""
    setup = oauth_setup()
    env = {**os.environ, **setup.config.env}
    proc = subprocess.Popen([sys.executable, "-m", "quinn", "auth", "login", "--flow", "loopback", "-c",
                             str(setup.config.path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if line.startswith(f"{setup.oauth.url}/authorize?"):
                url = line.strip()
                break
        assert "code_challenge_method=S256" in url and "state=" in url and "redirect_uri=http%3A%2F%2F127.0.0.1" in url
        answer = httpx.get(url + f"&login_as={setup.config.address}", follow_redirects=True, timeout=10)
        assert answer.status_code == 200 and "signed in" in answer.text
        rest = proc.stdout.read()
        assert proc.wait(timeout=30) == 0, rest
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert setup.oauth.grants == ["authorization_code"]
    assert re.search(r"signed in as \S+; tokens stored in", rest)
    status = quinn(setup.config, "auth", "status")
    assert status.returncode == 0 and setup.config.address in status.stdout
