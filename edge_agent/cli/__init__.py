"""The command line: thin commands over library calls, the only place errors become messages
and exit codes (`main`)."""

from edge_agent.cli.main import main

__all__ = ["main"]
