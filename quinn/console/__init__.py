"""The admin console (issue 20): a small server-rendered web UI over Quinn's database, off by default.

``app.py`` builds the Starlette app over a ``Console`` (store, ledger, admins, sessions); ``auth.py`` holds the
password hashes, sessions, CSRF and the login rate limit; ``login.py`` and ``pages.py`` the routes; ``serve.py``
runs it under uvicorn for ``quinn console``. It reads and writes only through the store and the ledger.
"""
