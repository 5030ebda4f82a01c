"""``quinn auth login`` and ``quinn auth status``: OAuth 2.0 sign-in for IMAP and SMTP (issue 33).

``login`` gets the first tokens (the device grant, or the loopback redirect where the provider requires it) and
writes them to ``oauth.token_file`` with mode 0600; run it as the service user, so the daemon can read the file.
A running daemon picks the new tokens up at its next login: after a revoked refresh token, mail that waited is
answered without a restart. ``status`` shows the account, scopes and expiry, never a token, and asks nothing of
the provider.
"""

from __future__ import annotations

import argparse
from typing import Any

from quinn.commands.output import add_json_flag, answer
from quinn.config import Config
from quinn.errors import ConfigError

OAUTH_ONLY = ("oauth",)  # secrets needed: the client secret or seed refresh token, never the mail password


def register(sub: Any, with_config: Any) -> None:
    """Add ``quinn auth login`` and ``quinn auth status``."""
    group = sub.add_parser("auth", help='OAuth 2.0 sign-in for IMAP and SMTP (auth = "oauth2")')
    commands = group.add_subparsers(dest="auth_command", metavar="COMMAND", required=True)
    what = "sign in at the provider and store the tokens (device code, or a loopback redirect)"
    login = with_config(commands.add_parser("login", help=what))
    login.add_argument("--flow", choices=("device", "loopback", "client_credentials"),
                       help="override oauth.flow for this sign-in")  # fmt: skip
    login.add_argument("--port", type=int, default=0, help="loopback: the port to listen on (default: any free one)")
    login.add_argument("--browser", action="store_true", help="loopback: open the URL in this machine's browser")
    login.set_defaults(handler=auth_login, secrets_of=OAUTH_ONLY)
    status = with_config(add_json_flag(commands.add_parser(
        "status", help="the account, scopes and expiry of the stored token (never the token)")))  # fmt: skip
    status.set_defaults(handler=auth_status, secrets_of=OAUTH_ONLY)


def oauth_account(config: Config) -> str:
    """The account the token is for: the IMAP login, or the SMTP one; ``ConfigError`` when neither uses OAuth."""
    if config.imap.auth == "oauth2":
        return config.imap.username
    if config.smtp.auth == "oauth2" and config.smtp.username:
        return config.smtp.username
    raise ConfigError("neither [imap] nor [smtp] logs in with OAuth",
                      'set auth = "oauth2" in [imap] and [smtp] (quinn init --provider gmail|microsoft365|outlook '
                      "writes it), then sign in")  # fmt: skip


def auth_login(args: argparse.Namespace, config: Config) -> int:
    """Sign in and write the token file."""
    from quinn.oauth import OAuthClient, device_login, loopback_login, save_login, token_source

    account = oauth_account(config)
    o = config.oauth
    client = OAuthClient(o, o.secret("client_secret"))
    flow = args.flow or o.flow
    if flow == "loopback" and not o.authorization_url:
        raise ConfigError("oauth.authorization_url is not set, so the loopback sign-in cannot start",
                          "set it (quinn init --provider fills it), or use --flow device")  # fmt: skip
    if flow == "device" and not o.device_authorization_url:
        raise ConfigError("oauth.device_authorization_url is not set, so the device sign-in cannot start",
                          "set it, or use --flow loopback")  # fmt: skip
    if flow == "client_credentials":  # no person signs in: prove the app's credentials by getting a token
        source = token_source(config)
        assert source is not None
        source.access_token()
        say(f"app-only access for {account}: a token was issued for the app's own credentials")
        say(f"it is kept in {source.file.path} (mode 0600); the daemon gets new ones itself; next: quinn check")
        return 0
    if flow == "device":
        tokens = device_login(client, account, say)
    else:
        import webbrowser

        tokens = loopback_login(client, account, say, port=args.port,
                                open_url=webbrowser.open if args.browser else None)  # fmt: skip
    file = save_login(o, tokens)
    say(f"signed in as {account}; tokens stored in {file.path} (mode 0600, readable by this user only)")
    say(f"scopes: {tokens.scope or ' '.join(o.scopes)}")
    say("a running daemon uses them at its next login; next: quinn check")
    return 0


def auth_status(args: argparse.Namespace, config: Config) -> int:
    """Print what the token file holds, without the tokens; exit 1 when a sign-in is needed."""
    from quinn.oauth import TokenFile

    account = oauth_account(config)
    file = TokenFile(config.oauth.token_file)
    tokens = file.read()
    if tokens is None:
        raise ConfigError(f"no OAuth token for {account} yet ({file.path} does not exist)",
                          "run `quinn auth login` as the service user")  # fmt: skip
    data = {"token file": str(file.path), **tokens.described()}
    if tokens.account.lower() != account.lower():
        data["problem"] = f"the file is for {tokens.account}, the config logs in as {account}: run quinn auth login"
    loose = file.loose_mode()
    if loose:
        data["problem"] = f"{file.path} has {loose}: chmod 600 it"
    answer(args, data, lambda out: out.print("\n".join(f"{key:22} {value}" for key, value in data.items())))
    return 1 if tokens.refused or "problem" in data else 0


def say(line: str) -> None:
    """One line to the person at the terminal."""
    print(line, flush=True)
