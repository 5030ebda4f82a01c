"""[console]: off by default, strict about its admins, and each mistake named in one line."""

from __future__ import annotations

import tomllib

import pytest

from quinn.cli import main
from quinn.config import load_config
from quinn.console.auth import PasswordHash, Token, admins_from, hash_password
from quinn.errors import ConfigError
from tests.console.conftest import CONFIG, PASSWORDS, TEST_COST

BASE = CONFIG.split("[console]")[0]


def load(tmp_path, text: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "quinn.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, env={"Q_IMAP": "x", **(env or {})})


def test_off_and_on_loopback_by_default(tmp_path):
    config = load(tmp_path, BASE)
    assert not config.console.enabled and config.console.host == "127.0.0.1" and config.console.admins == []


@pytest.mark.parametrize(
    ("console", "env", "error"),
    [
        ("[console]\nenabled = true\n", {}, "the console is enabled but has no admins"),
        ('[console]\n[[console.admins]]\nname = "a"\nrole = "boss"\npassword_hash_env = "H"\n', {"H": "x"},
         "console.admins.0.role"),
        ('[console]\n[[console.admins]]\nname = "a"\npassword_hash_env = "H"\n[[console.admins]]\nname = "a"\n'
         'password_hash_env = "H"\n', {"H": "x"}, "admin names must be distinct: a appears more than once"),
        ('[console]\n[[console.admins]]\nname = "Alice Smith"\npassword_hash_env = "H"\n', {"H": "x"},
         "console.admins.0.name"),
        ('[console]\n[[console.admins]]\nname = "a"\npassword_hash_env = "H_MISSING"\n', {},
         "console.admins[0].password_hash_env names the environment variable H_MISSING, which is not set"),
        ('[console]\n[[console.admins]]\nname = "a"\npassword_hash_env = "H"\ntoken_env = "T"\n', {"H": "x", "T": "y"},
         "admin a sets both password_hash_env and token_env: keep one (password_hash_env for a password hash"),
        ('[console]\n[[console.admins]]\nname = "a"\nrole = "read-only"\n', {},
         "admin a sets no way to log in: add password_hash_env for a password hash made by `quinn console "
         "hash-password`, or token_env for a random token of 32+ characters"),
        ('[console]\n[[console.admins]]\nname = "a"\ntoken_env = "T_MISSING"\n', {},
         "console.admins[0].token_env names the environment variable T_MISSING, which is not set"),
        ("[console]\nport = 70000\n", {}, "console.port"),
        ('[console]\n[[console.admins]]\nname = "a"\npasswrd_hash_env = "H"\n', {},
         "did you mean console.admins.0.password_hash_env"),
    ],
)  # fmt: skip
def test_mistakes_are_named(tmp_path, console, env, error):
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, BASE + console, env)
    assert error in str(caught.value)


def test_a_malformed_hash_names_the_admin_not_the_value(tmp_path):
    config = load(tmp_path, BASE + '[console]\n[[console.admins]]\nname = "a"\npassword_hash_env = "H"\n',
                  {"H": "hunter2-plain-password"})  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        admins_from(config.console)
    message = str(caught.value)
    assert "console.admins[0].password_hash_env (H, admin a) is not a password hash" in message
    assert "hunter2" not in message and "hash-password" in (caught.value.hint or "")


def test_a_short_token_is_refused_at_start_naming_how_to_make_one(tmp_path):
    config = load(tmp_path, BASE + '[console]\n[[console.admins]]\nname = "ops"\ntoken_env = "T"\n',
                  {"T": "letmein-letmein-letmein-letmein"})  # 31 characters  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        admins_from(config.console)
    message = str(caught.value)
    assert message.startswith("console.admins[0].token_env (T, admin ops) holds a token of 31 characters, fewer "
                              "than 32")  # fmt: skip
    assert "letmein" not in message
    assert 'python -c "import secrets; print(secrets.token_urlsafe(32))"' in (caught.value.hint or "")
    long_enough = load(tmp_path, BASE + '[console]\n[[console.admins]]\nname = "ops"\ntoken_env = "T"\n',
                       {"T": "x" * 32})  # fmt: skip
    (ops,) = admins_from(long_enough.console).values()
    assert isinstance(ops.credential, Token) and ops.credential.matches("x" * 32)
    assert not ops.credential.matches("x" * 31) and not ops.credential.matches("x" * 33)
    assert "x" * 32 not in repr(ops)


def test_hash_password_round_trip(capsys, monkeypatch):
    parsed = PasswordHash.parse(hash_password("s3cret", **TEST_COST), owner="test")
    assert parsed.matches("s3cret") and not parsed.matches("s3cret ")
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("from a pipe, long enough\n"))
    assert main(["console", "hash-password"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("scrypt$32768$8$1$") and PasswordHash.parse(printed, owner="cli").matches(
        "from a pipe, long enough"
    )


def test_quinn_console_refuses_while_disabled(tmp_path, capsys):
    path = tmp_path / "quinn.toml"
    path.write_text(BASE, encoding="utf-8")
    assert main(["console", "-c", str(path)]) == 2
    assert "the console is off (console.enabled = false)" in capsys.readouterr().err


def test_admins_hashes_are_redacted_from_logs(tmp_path):
    from quinn.logs import secret_values

    config = load(tmp_path, CONFIG, {"Q_CONSOLE_ROOT": "hash-of-root", "Q_CONSOLE_VIEWER": "hash-of-viewer"})
    assert {"hash-of-root", "hash-of-viewer"} <= set(secret_values(config))


def test_login_limiter_window_slides():
    from quinn.console.auth import Attempt, LoginLimiter

    now = [1000.0]
    limiter = LoginLimiter(attempts=2, window_s=60, clock=lambda: now[0])

    def fail(address: str, name: str) -> None:
        attempt = limiter.take(address, name)
        assert isinstance(attempt, Attempt)
        limiter.done(attempt, failed=True)

    fail("address:a", "name:x")
    now[0] += 10
    fail("address:a", "name:y")
    assert limiter.take("address:a", "name:z") == 50  # seconds until the first failure leaves the window
    assert isinstance(limiter.take("address:b", "name:x"), Attempt)
    now[0] += 50
    assert isinstance(limiter.take("address:a", "name:z"), Attempt)  # the first failure left the window


def test_login_limiter_counts_attempts_in_flight_and_slows_a_name_never_locks_it():
    from quinn.console.auth import NAME_DELAY_S, Attempt, LoginLimiter

    now = [1000.0]
    limiter = LoginLimiter(attempts=3, window_s=300, clock=lambda: now[0])
    taken = [limiter.take("address:a", "name:root") for _ in range(5)]  # five at once, none checked yet
    assert [isinstance(t, Attempt) for t in taken] == [True, True, True, False, False]
    for attempt in taken[:3]:
        assert isinstance(attempt, Attempt)
        limiter.done(attempt, failed=True)
    assert not isinstance(limiter.take("address:a", "name:root"), Attempt)  # the stranger's address: refused
    first = limiter.take("address:b", "name:root")  # the admin elsewhere: slowed, not locked
    second = limiter.take("address:c", "name:root")
    assert isinstance(first, Attempt) and first.delay_s == NAME_DELAY_S
    assert isinstance(second, Attempt) and second.delay_s == 2 * NAME_DELAY_S  # one slot after the other
    limiter.done(first, failed=False)  # a dropped request counts as no attempt
    ok = limiter.take("address:b", "name:other")
    assert isinstance(ok, Attempt) and ok.delay_s == 0


def test_without_the_extra_the_console_names_it(world, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "uvicorn", None)  # as if the console extra were not installed
    from quinn.console.serve import ConsoleServer

    with pytest.raises(ConfigError) as caught:
        ConsoleServer(world.console.config, world.store)
    assert "the console needs uvicorn, which is not installed" in str(caught.value)
    assert "pip install 'quinn-mail[console]'" in (caught.value.hint or "")


def test_a_port_in_use_is_one_clear_error(world):
    from quinn.console.serve import ConsoleServer, bind

    taken = bind("127.0.0.1", 0)
    try:
        world.console.config.port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            ConsoleServer(world.console.config, world.store)
        assert f"console 127.0.0.1:{world.console.config.port}: Address already in use" in str(caught.value)
    finally:
        taken.close()


def test_hash_password_refuses_a_short_password(capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO("hunt2\n"))
    assert main(["console", "hash-password"]) == 2
    assert "the password has 5 characters, fewer than 12" in capsys.readouterr().err


def test_console_enable_edits_the_config_init_wrote_and_keeps_it_loading(tmp_path, capsys):
    """Issue 34: the README's snippet, appended, broke the file (``[console]`` twice); the command edits it."""
    from quinn.packaged import packaged_file

    path = tmp_path / "quinn.toml"
    example = packaged_file("quinn.example.toml").read_text(encoding="utf-8")
    path.write_text(BASE + example[example.index("[console]") :], encoding="utf-8")  # as init writes it
    path.chmod(0o640)
    before = path.read_text()
    assert main(["console", "enable", "-c", str(path), "--admin", "Alice"]) == 0
    said = capsys.readouterr().out
    assert "QUINN_CONSOLE_ALICE=$(quinn console hash-password)" in said
    after = path.read_text()
    assert [line for line in before.splitlines() if line not in after.splitlines()] == ["enabled = false"]
    assert (path.stat().st_mode & 0o777) == 0o640  # the file's mode is kept
    config = load_config(path, env={"QUINN_CONSOLE_ALICE": hash_password(PASSWORDS["root"], **TEST_COST)},
                         secrets_of=("console",))  # fmt: skip
    assert config.console.enabled and [(a.name, a.role) for a in config.console.admins] == [("alice", "admin")]
    # A second admin joins the first; the same one again changes nothing.
    assert main(["console", "enable", "-c", str(path), "--admin", "bob", "--role", "read-only"]) == 0
    assert main(["console", "enable", "-c", str(path), "--admin", "bob"]) == 2
    assert "bob is already an admin" in capsys.readouterr().err
    names = [a["name"] for a in tomllib.loads(path.read_text())["console"]["admins"]]
    assert names == ["alice", "bob"]
    # A file without [console] gets one; a file that is not TOML is left alone.
    bare = tmp_path / "bare.toml"
    bare.write_text(BASE, encoding="utf-8")
    assert main(["console", "enable", "-c", str(bare), "--admin", "alice"]) == 0
    assert tomllib.loads(bare.read_text())["console"]["enabled"] is True
    broken = tmp_path / "broken.toml"
    broken.write_text("[imap\n", encoding="utf-8")
    assert main(["console", "enable", "-c", str(broken), "--admin", "alice"]) == 2
    assert broken.read_text() == "[imap\n" and "nothing was changed" in capsys.readouterr().err
    # quinn check names every missing variable at once, not one per run (issue 34).
    with pytest.raises(ConfigError) as caught:
        load_config(bare, env={})
    assert "2 environment variables are not set: Q_IMAP (named by imap.password_env), QUINN_CONSOLE_ALICE" in str(
        caught.value
    )
    assert "export Q_IMAP=... QUINN_CONSOLE_ALICE=..." in (caught.value.hint or "")
