"""edge-agent as a systemd service: readiness, status and watchdog (notify.py), the STATUS= words
(status.py), and `edge-agent service install | uninstall` (install.py)."""
