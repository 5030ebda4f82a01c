"""Quinn: a self-hosted email agent with long-term memory."""

__version__ = "0.1.0"
