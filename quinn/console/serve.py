"""Running the console: uvicorn on the configured address, over the configured database (``quinn console``).

uvicorn and starlette come with the ``console`` extra; without them the command says which extra to install.
Behind a reverse proxy on the same host, uvicorn takes the client's address from X-Forwarded-For (it trusts
127.0.0.1 only), so the login rate limit counts per real client, not per proxy.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from typing import Any

from quinn.config import Config
from quinn.errors import ConfigError

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXTRA_HINT = "install the console extra: pip install 'quinn-mail[console]'"


def build_server(app: Any, host: str, port: int) -> Any:
    """A uvicorn server for ``app`` (not started); its own logs at warning, no access log (paths name users)."""
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("the console needs uvicorn, which is not installed", EXTRA_HINT) from None
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                            server_header=False)  # fmt: skip
    return uvicorn.Server(config)


def serve(config: Config) -> int:
    """``quinn console``: serve until SIGINT/SIGTERM (uvicorn handles both), then close the store."""
    if not config.console.enabled:
        raise ConfigError("the console is off (console.enabled = false)",
                          "set enabled = true in [console] and add a [[console.admins]] table")  # fmt: skip
    try:
        from quinn.console.app import Console, build_app
    except ImportError:
        raise ConfigError("the console needs starlette, which is not installed", EXTRA_HINT) from None
    from quinn.commands.database import open_database
    from quinn.memory.embed import embedder_for
    from quinn.memory.store import MemoryStore

    store = MemoryStore(open_database(config), embedder_for(config.embeddings))
    try:
        console = Console(config.console, store)
        server = build_server(build_app(console), config.console.host, config.console.port)
        log.info("console on http://%s:%s/ for %d admins", config.console.host, config.console.port,
                 len(console.admins))  # fmt: skip
        # uvicorn stops gracefully on SIGINT/SIGTERM, then raises the signal again for the handler it found:
        # a quiet one here, so a stop is exit 0 (as for `quinn run`), not death by SIGTERM.
        stopped: list[int] = []
        previous = {sig: signal.signal(sig, lambda number, _frame: stopped.append(number)) for sig in STOP_SIGNALS}
        try:
            asyncio.run(server.serve())
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        log.info("console stopped%s", f" by signal {stopped[0]}" if stopped else "")
    finally:
        store.close()
    return 0


class ServerThread:
    """A console server on a background thread (tests, and later the daemon): ``start()`` returns once it listens."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        self.server = build_server(app, host, port)
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self.server.run, name="quinn-console", daemon=True)

    def start(self, timeout_s: float = 10.0) -> None:
        """Start serving; raise when it does not listen within ``timeout_s``."""
        self._thread.start()
        for _ in range(int(timeout_s * 50)):
            if self.server.started:
                return
            if not self._thread.is_alive():
                break
            time.sleep(0.02)
        raise RuntimeError(f"the console did not start on {self.url}")

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        self.server.should_exit = True
        self._thread.join(timeout=10)
