"""Free loopback ports: ``quinn.lab.ports`` (shared with ``quinn demo``), imported by the tests from here."""

from quinn.lab.ports import free_port

__all__ = ["free_port"]
