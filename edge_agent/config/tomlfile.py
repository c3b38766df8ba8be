"""Reading the TOML files a user writes (config, call files, scripts, manifests)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError
from edge_agent.files import TEXT_FILE_LIMIT, read_capped


def read_text(path: Path, what: str, limit: int = TEXT_FILE_LIMIT) -> str:
    """The text of `path`, read whole up to `limit` bytes; ConfigError naming `what` otherwise."""
    try:
        return read_capped(path, limit).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(str(path), "", f"{what} not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(str(path), "", f"cannot read {what}: {reason}") from None


def parse_toml(text: str, source: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, "", f"not valid TOML: {exc}") from None
    except RecursionError:
        raise ConfigError(source, "", "not valid TOML here: tables or arrays nested too deeply "
                          "(thousands of levels); no edge-agent file nests more than three") from None
