"""Command groups of the ``quinn`` CLI (memory, prompts, jobs, mail, users, ...).

Each module defines ``register(subparsers)``, which adds its subcommands and sets ``handler`` on each parser
via ``set_defaults(handler=fn)``; a handler takes the parsed args and a loaded ``Config`` and returns an exit code.
``quinn.cli`` collects the groups in ``GROUPS``; errors are still turned into exit codes only in ``cli.main``.
"""
