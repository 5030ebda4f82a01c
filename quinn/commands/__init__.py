"""Command groups of the ``quinn`` CLI (memory, prompts, jobs, mail, users, ...).

Each module defines ``register(subparsers, with_config)``, which adds its subcommands and sets ``handler`` on each
parser via ``set_defaults(handler=fn)``; a handler takes the parsed args and a loaded ``Config`` and returns an exit
code. A command that only reads the database also sets ``secrets_of=("database",)`` (``DATABASE_ONLY`` in
``quinn.commands.database``), so it runs without the IMAP password or the API key in the environment.
``quinn.cli`` collects the groups in ``GROUPS``; errors are still turned into exit codes only in ``cli.main``.
Output: ``quinn.commands.output`` (a rich table for people, ``--json`` for scripts).
"""
