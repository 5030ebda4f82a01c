"""The lab's Dovecot, which lives in ``quinn.lab.dovecot`` now (``quinn demo`` starts the same server for a
newcomer); the tests import it from here."""

from quinn.lab.dovecot import Dovecot, DovecotError, dovecot_available

__all__ = ["Dovecot", "DovecotError", "dovecot_available"]
