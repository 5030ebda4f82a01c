"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import socket


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The port is found by binding port 0 and closing the socket, so another process could take it before the
    caller binds it; in practice the kernel does not hand the same ephemeral port out again at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
