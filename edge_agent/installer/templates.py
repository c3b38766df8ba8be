"""The files `service install` puts in place come from the source tree (systemd/, config/)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Verbatim:
    """A `re.sub` replacement that is the text itself (a template would read backslashes and
    group references in it)."""

    text: str

    def __call__(self, _: re.Match[str]) -> str:
        return self.text
