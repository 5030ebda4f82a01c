"""Documents and knowledge (issue 18): the files people attach, read, kept once per owner and searchable.

``extract`` reads a file into sections with their page, sheet or heading (one function per format in
``formats``), within limits, never raising: a file that cannot be read is a value naming the file and the
reason. ``library`` keeps the file by content hash and indexes its passages for conversation recall.

This is the documents' face: what other packages may use (tests/test_layers.py). It loads each module on first
use (``quinn.faces``): a file is read in a child process that needs only ``extract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quinn.faces import lazy_face

# name -> the module it lives in ("": a module used as a namespace).
HOMES = {
    "knowledge": "",
    "library": "",
    "Extracted": "extract",
    "Section": "sections",
    "display_name": "extract",
    "take_documents": "library",
}
__all__ = [*HOMES]
__getattr__ = lazy_face(__name__, HOMES)

if TYPE_CHECKING:
    from quinn.documents import knowledge as knowledge
    from quinn.documents import library as library
    from quinn.documents.extract import Extracted as Extracted
    from quinn.documents.extract import display_name as display_name
    from quinn.documents.library import take_documents as take_documents
    from quinn.documents.sections import Section as Section
