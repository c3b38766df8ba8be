"""The files `service install` puts in place come from the source tree (systemd/, config/)."""

from __future__ import annotations

import sys
from pathlib import Path

import edge_agent
from edge_agent.errors import ConfigError


def template(relative: str) -> str:
    """A file of the source tree (systemd/, config/): next to the package (a checkout, an
    editable install), under <prefix>/share/edge-agent (where the wheel installs them), or in
    the current directory."""
    package_root = Path(edge_agent.__file__).resolve().parent.parent
    places = [package_root / relative, Path(sys.prefix) / "share" / "edge-agent" / relative,
              Path.cwd() / relative]
    for place in places:
        try:
            return place.read_text(encoding="utf-8")
        except OSError:
            continue
    raise ConfigError(relative, "", "not found (looked at " + ", ".join(map(str, places))
                      + "): the package ships it under <prefix>/share/edge-agent; reinstall "
                        "edge-agent, or run `edge-agent service install` in its source "
                        "checkout, where systemd/ and config/ are")
