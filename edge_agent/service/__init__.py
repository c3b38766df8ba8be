"""edge-agent while it runs as a systemd service: readiness, status and watchdog (notify.py),
the STATUS= words (status.py), and log lines for the journal (journal.py). Installing the unit
is `edge_agent.installer`'s."""
