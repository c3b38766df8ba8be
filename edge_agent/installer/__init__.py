"""`edge-agent service install | uninstall`: the systemd unit rendered for this machine
(unit.py) and the steps that put it in place or take it away (steps.py). Nothing the running
agent imports: that is `edge_agent.service`."""
