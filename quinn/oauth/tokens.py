"""The token file: where the refresh and access tokens live, mode 0600, written atomically.

Tokens never go into the TOML, the database or a log line. The file is JSON so an operator can see (with
``quinn auth status``, which prints everything but the tokens) which account and scopes it holds and when the
access token expires. A refresh token the provider refused is kept with ``refused`` set, so ``quinn check`` can say
"run quinn auth login" without asking the provider again.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from quinn.errors import ConfigError

FILE_MODE = 0o600


@dataclass(frozen=True)
class TokenSet:
    """What the token endpoint gave us, and for which account."""

    account: str
    refresh_token: str = field(repr=False)
    access_token: str = field(default="", repr=False)
    expires_at: float = 0.0  # Unix time the access token stops working (0: unknown, refresh first)
    scope: str = ""
    token_url: str = ""
    obtained_at: float = 0.0
    refreshed_at: float = 0.0
    refused: str = ""  # why the provider refused the refresh token (then `quinn auth login` is needed)

    def usable(self, now: float, margin_s: float) -> bool:
        """Whether the access token is good for at least ``margin_s`` more seconds."""
        return bool(self.access_token) and self.expires_at - margin_s > now

    def described(self) -> dict[str, str]:
        """Everything but the tokens, for ``quinn auth status``."""

        def when(t: float) -> str:
            return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds") if t else "never"

        return {
            "account": self.account,
            "scopes": self.scope or "(as granted)",
            "access token expires": when(self.expires_at),
            "obtained": when(self.obtained_at),
            "last refreshed": when(self.refreshed_at),
            "refresh token": f"refused: {self.refused}"
            if self.refused
            else ("held" if self.refresh_token else "none (client credentials: the app's secret gets each token)"),
        }

    def with_refused(self, why: str) -> TokenSet:
        """This set with the refresh token marked refused and the access token dropped."""
        return replace(self, refused=why, access_token="", expires_at=0.0)


class TokenFile:
    """The tokens at ``path``: read, written atomically with mode 0600, and locked across processes while a
    refresh is under way (the daemon, `quinn check` and `quinn auth login` may all touch it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> TokenSet | None:
        """The tokens, or None when there is no file yet; ``ConfigError`` when it cannot be read."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"token file {self.path} cannot be read: {exc.strerror or exc}",
                "run Quinn as the user that ran `quinn auth login`, or fix oauth.token_file",
            ) from None
        try:
            data = json.loads(raw)
            return TokenSet(**{k: v for k, v in data.items() if k in TokenSet.__dataclass_fields__})
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"token file {self.path} is damaged ({type(exc).__name__})",
                              "run `quinn auth login` to write it anew") from None  # fmt: skip

    def write(self, tokens: TokenSet) -> None:
        """Replace the file atomically; it is created 0600 and never readable by others, even for a moment."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".oauth-", dir=self.path.parent)
        try:
            os.fchmod(fd, FILE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(asdict(tokens), out, indent=1)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def stamp(self) -> float:
        """The file's modification time (0 when absent): a change means someone else wrote new tokens."""
        try:
            return self.path.stat().st_mtime_ns / 1e9
        except OSError:
            return 0.0

    def loose_mode(self) -> str | None:
        """Why the file's mode is unsafe (group or others may read it), or None."""
        try:
            mode = self.path.stat().st_mode & 0o777
        except OSError:
            return None
        return f"mode {mode:o}: others than its owner may read it" if mode & 0o077 else None

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """An exclusive lock across processes (a sibling ``.lock`` file), held while tokens are renewed."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
