"""A network guard for tests: any connection outside the loopback range raises before it is made.

`install_network_guard()` wraps `socket.socket.connect` and `socket.socket.connect_ex`. Everything else that
opens TCP connections from Python (`socket.create_connection`, `ssl.SSLSocket`, asyncio's `sock_connect`,
smtplib, imaplib, http.client, ...) goes through these methods, so one patch covers them. The check is done on
the address as given: a host name other than ``localhost`` is refused outright. `socket.getaddrinfo` is wrapped
too (it is what `create_connection` and asyncio call first), so looking up a remote name raises before a DNS
query could leave the machine.

Not covered: code that does not use Python sockets (the Rust core of the ``libsql`` driver, subprocesses) and
``sendto`` on unconnected UDP sockets.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from typing import Any

_LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


def is_loopback_target(family: int, address: Any) -> bool:
    """Tell whether connecting a socket of `family` to `address` stays on this machine.

    AF_UNIX (and any family other than AF_INET/AF_INET6) is allowed; for internet families only 127.0.0.0/8,
    ::1 (also as an IPv4-mapped address) and the name ``localhost`` are.
    """
    if family not in (socket.AF_INET, socket.AF_INET6):
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    host = host.strip().lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False  # any other host name: refused before it is resolved
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _check(sock: socket.socket, address: Any) -> None:
    if not is_loopback_target(sock.family, address):
        # Close it: callers such as socket.create_connection only close on OSError, and a leaked socket is a
        # ResourceWarning (an error under filterwarnings=error) in some later test.
        sock.close()
        raise RuntimeError(f"test tried to reach {address!r} outside 127.0.0.1")


def _lookup_allowed(host: Any) -> bool:
    """Name lookups that cannot leave the machine: none, a numeric address, localhost or our own hostname."""
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().lower()
    if name in _LOOPBACK_NAMES or name == socket.gethostname().lower():
        return True
    try:
        ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False
    return True


def install_network_guard() -> Callable[[], None]:
    """Refuse every connect outside the loopback range (and every lookup of a remote name) in this process.

    Returns a function that undoes it. Guards nest: each call wraps whatever `connect`/`connect_ex`/`getaddrinfo`
    is current, and undo functions must be called in reverse order.
    """
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    original_getaddrinfo = socket.getaddrinfo

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check(self, address)
        original_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check(self, address)
        return original_connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not _lookup_allowed(host):
            raise RuntimeError(f"test tried to reach {host!r} outside 127.0.0.1 (name lookup)")
        return original_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = guarded_getaddrinfo

    def undo() -> None:
        socket.socket.connect = original_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = original_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = original_getaddrinfo

    return undo
