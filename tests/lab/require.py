"""What a lab test needs from the machine. A missing server or tool fails the test with how to install it (CI
must never pass by skipping what it did not run), or skips it where the developer asked (QUINN_ALLOW_SKIP=1)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def missing(what: str, hint: str) -> NoReturn:
    """Fail (skip under QUINN_ALLOW_SKIP=1): ``what`` is not installed, ``hint`` says how to install it."""
    unavailable(f"{what} is not installed: {hint}")


def unavailable(message: str) -> NoReturn:
    """Fail (skip under QUINN_ALLOW_SKIP=1) with ``message``, which says what is missing and how to get it."""
    if os.environ.get("QUINN_ALLOW_SKIP") == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)
