"""The lab's process helpers, which live in ``quinn.lab.process`` now (the wheel's ``quinn demo`` runs the same
servers); the tests import them from here."""

from quinn.lab.process import LabServer, _group_alive, kill_group, remove_at_exit, stop_all, tail, track, untrack

__all__ = ["LabServer", "_group_alive", "kill_group", "remove_at_exit", "stop_all", "tail", "track", "untrack"]
