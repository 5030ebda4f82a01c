"""What a format reader takes and gives (``formats``): the ``Limits`` of one file, the ``Deadline`` checked between
units of work, the ``Section`` it yields, ``Unreadable`` with the reason, and the zip-bomb guard ``check_zip``.

Kept apart from ``extract`` so that the readers and the dispatcher each import it at the top, with no circle.
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from io import BytesIO


class Unreadable(Exception):
    """Why a file cannot be read, in words for the person who sent it; caught in ``extract``."""


@dataclass(frozen=True)
class Limits:
    """What one file may cost to read (``[documents]`` in the config)."""

    max_file_bytes: int = 10 * 1024 * 1024
    max_pages: int = 200
    max_text_chars: int = 256 * 1024
    timeout_s: float = 20.0
    max_zip_members: int = 2000
    max_unzipped_bytes: int = 100 * 1024 * 1024


@dataclass(frozen=True)
class Section:
    """A piece of a document's text and where it is: ``p.3``, ``sheet Budget``, ``Introduction``, ``event 1``."""

    ref: str
    text: str


@dataclass
class Deadline:
    """Extraction's time limit, checked between units of work (pages, rows, parts)."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    def check(self) -> None:
        """Raise ``Unreadable`` once the time is up."""
        if time.monotonic() - self.start > self.seconds:
            raise Unreadable(f"reading it took longer than the {self.seconds:g} s limit")


Reader = Callable[[bytes, Limits, Deadline], tuple[list[Section], list[str]]]


def check_zip(data: bytes, limits: Limits) -> None:
    """Refuse a zip whose members are too many or would unpack too big, before anything is unpacked. The sizes
    are the archive's own claims; zipfile never yields more than a member claims (it stops and fails its CRC)."""
    try:
        with zipfile.ZipFile(BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise Unreadable(f"the file is damaged (not a readable zip archive: {exc})") from exc
    if len(members) > limits.max_zip_members:
        raise Unreadable(f"it holds {len(members)} parts, more than the limit of {limits.max_zip_members}")
    unpacked = sum(m.file_size for m in members)
    if unpacked > limits.max_unzipped_bytes:
        raise Unreadable(
            f"it would unpack to {unpacked // 1_000_000} MB, more than the limit of "
            f"{limits.max_unzipped_bytes // 1_000_000} MB (a zip bomb?)"
        )
