"""The systemd notification protocol (sd_notify(3)) over ``$NOTIFY_SOCKET``, without a libsystemd binding.

A notification is one datagram of ``KEY=VALUE`` lines sent to the AF_UNIX socket systemd names in
``$NOTIFY_SOCKET`` (a path, or an abstract socket when it starts with ``@``). Outside systemd the variable is
unset and every method is a no-op, so the daemon runs the same in a terminal, in tests and under the unit.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends READY=1, WATCHDOG=1, STOPPING=1, RELOADING=1 and STATUS= lines to systemd, if it listens."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self._sock: socket.socket | None = None
        self._failed = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Notifier:
        """The notifier systemd asked for through ``NOTIFY_SOCKET`` / ``WATCHDOG_USEC`` / ``WATCHDOG_PID``."""
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET") or None
        return cls(address, watchdog_usec(env))

    @property
    def enabled(self) -> bool:
        """True when systemd (or a test) listens."""
        return self.address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """How often to send WATCHDOG=1: half the timeout, as sd_watchdog_enabled(3) recommends; None when off."""
        if not self.enabled or not self.watchdog_usec:
            return None
        return self.watchdog_usec / 2 / 1_000_000

    def send(self, **fields: str | int) -> bool:
        """Send one notification (``send(READY=1, STATUS="...")``); returns False when nobody listens.

        A failure is logged once and never raised: losing a notification must not stop the mail.
        """
        if self.address is None:
            return False
        payload = "\n".join(f"{key}={_one_line(str(value))}" for key, value in fields.items()).encode()
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(payload, target)
        except OSError as exc:
            if not self._failed:
                log.warning("cannot notify systemd at %s: %s", self.address, exc)
                self._failed = True
            return False
        return True

    def ready(self, status: str) -> bool:
        """Startup is complete: systemd starts dependent units and the watchdog."""
        return self.send(READY=1, STATUS=status)

    def watchdog(self) -> bool:
        """Keep-alive: systemd restarts the service when these stop for WatchdogSec."""
        return self.send(WATCHDOG=1)

    def status(self, status: str) -> bool:
        """Free-form status shown by ``systemctl status``."""
        return self.send(STATUS=status)

    def reloading(self) -> bool:
        """A reload has begun (followed by ``ready``); MONOTONIC_USEC as systemd ≥ 253 requires for reloads."""
        return self.send(RELOADING=1, MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)

    def stopping(self, status: str = "stopping") -> bool:
        """Shutdown has begun."""
        return self.send(STOPPING=1, STATUS=status)

    def close(self) -> None:
        """Close the socket; safe to call twice."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def watchdog_usec(env: Mapping[str, str]) -> int | None:
    """``WATCHDOG_USEC`` when it is meant for this process (``WATCHDOG_PID`` unset or ours), else None."""
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None  # inherited from a parent that systemd watches, not us (sd_watchdog_enabled(3))
    try:
        value = int(raw)
    except ValueError:
        log.warning("ignoring WATCHDOG_USEC=%r: not an integer", raw)
        return None
    return value if value > 0 else None


def _one_line(value: str) -> str:
    """Newlines would start a new KEY=VALUE assignment in the datagram."""
    return " ".join(value.splitlines())
