"""`quinn check`'s oauth line: is there a token, is it this account's, does the provider still honour it."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from quinn.config import Config
from quinn.oauth.source import LoginNeeded, token_source


def check_tokens(config: Config) -> str:
    """One line on the stored tokens; ``LoginNeeded`` (saying to run `quinn auth login`) when they are missing,
    another account's, or refused. An access token about to expire is renewed, which proves the refresh token."""
    source = token_source(config)
    assert source is not None
    loose = source.file.loose_mode()
    if loose:
        raise LoginNeeded(f"the token file {source.file.path} has {loose}", f"chmod 600 {source.file.path}")
    source.access_token()  # renews when due; raises LoginNeeded with the hint when the provider refuses
    tokens = source.current()
    assert tokens is not None
    left_min = (tokens.expires_at - time.time()) / 60
    until = datetime.fromtimestamp(tokens.expires_at, UTC).isoformat(timespec="seconds")
    renewed = "renewed just now, " if source.refreshes else ""
    return (f"{tokens.account}: {renewed}access token valid until {until} ({left_min:.0f} min), "
            f"scopes {tokens.scope or '(as granted)'}; {source.file.path}")  # fmt: skip
