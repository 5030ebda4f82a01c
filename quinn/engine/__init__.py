"""The mail engine: what turns a Config into a running Quinn and feeds mail through it.

``parts`` is the composition root (every long-lived part is built there, by the daemon, the CLI and the tests
alike, and rebuilt there on reload); ``states`` is the per-mail state machine as data; ``mail`` takes one mail
along it; ``conversation`` answers a mail and learns from it; ``digests`` and ``purges`` are the two things the
daemon does after each folder pass. ``quinn.app`` is the loop that feeds mail to them.
"""
