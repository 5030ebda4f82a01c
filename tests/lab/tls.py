"""A self-signed certificate for TLS tests (FACTS.md: openssl, ~0.6 s; made once per test session)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def openssl_available() -> bool:
    """Tell whether the openssl command is installed."""
    return shutil.which("openssl") is not None


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """Write ``cert.pem`` and ``key.pem`` for localhost and 127.0.0.1 into `directory`; return their paths."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    key.chmod(0o644)  # Dovecot's master reads it as root; aiosmtpd in this process
    return cert, key
