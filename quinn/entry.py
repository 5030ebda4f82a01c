"""The ``quinn`` console script's entry point, free of imports.

Each mail is parsed in a child forked from multiprocessing's fork server (``quinn.confined``), and such a child
runs the main script's top level again (as ``__mp_main__``; Python 3.11 does not hand the script to the server's
``__main__`` preload, so the server cannot run it once for all). With the entry point in ``quinn.cli`` that top
level imported the whole CLI: 1.1-1.5 s for every mail parsed under the ``quinn`` script (issue 32's import), 0.03 s
under ``python -m quinn``. Importing this module costs nothing; the CLI is imported when the script runs.
"""

from __future__ import annotations


def console() -> int:
    """The ``quinn`` console script: ``quinn.cli.console``."""
    from quinn.cli import console as run

    return run()
