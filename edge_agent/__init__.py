"""edge-agent: an offline voice agent that remembers what the listener actually heard."""

__version__ = "0.1.0"
