"""Model names -> files on disk: fetched into the data dir, or shipped in an installed wheel.

A fetched copy comes first, but only while it matches the hash record written when it was
fetched: a damaged copy must not shadow a good one from a wheel (it is used instead, with a
warning), and with no wheel it is an error that says how to get a good copy.
"""

from __future__ import annotations

import base64
import functools
import importlib.metadata
import importlib.resources
import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from edge_agent.config.tomlfile import parse_toml, read_text
from edge_agent.errors import ConfigError, ModelFileError, ModelMissingError
from edge_agent.models import hashrecord
from edge_agent.models.hashrecord import sha256_of
from edge_agent.models.manifest_schema import (
    HASHES_FILE,
    KINDS,
    Download,
    ModelSpec,
    WheelSource,
    parse_manifest,
)

__all__ = ["HASHES_FILE", "KINDS", "Catalog", "Download", "ModelSpec", "ModelStatus",
           "WheelSource", "load_catalog", "sha256_of"]

log = logging.getLogger("edge_agent")
_WARNED: set[str] = set()
"""Warnings already given in this process (a model resolves several times)."""


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    path: Path | None
    """Where the model resolves, or None when it is missing."""
    source: str
    """"fetched"; "unverified" (fetched, but no hash record); "wheel"; "damaged->wheel" (the
    fetched copy fails its hash record, the wheel's is used); "damaged" (it fails and there is
    no wheel: `path` is the damaged copy, which resolve() refuses); or "missing"."""
    size: int
    """Bytes on disk (0 when missing)."""
    problem: str = ""
    """Why the fetched copy is not used ("damaged..."), or why it is unverified."""


class Catalog:
    def __init__(self, specs: dict[str, ModelSpec], models_dir: Path,
                 config_source: str = "config") -> None:
        self.specs = specs
        self.models_dir = models_dir
        self.config_source = config_source
        """The config file that set data_dir, for errors about it."""

    def spec(self, name: str) -> ModelSpec:
        try:
            return self.specs[name]
        except KeyError:
            known = ", ".join(sorted(self.specs))
            raise ConfigError("models", name, f"no such model (known: {known})") from None

    def model_dir(self, spec: ModelSpec) -> Path:
        return self.models_dir / spec.name

    def fetched_path(self, spec: ModelSpec) -> Path:
        return self.model_dir(spec) / spec.entry

    def make_models_dir(self) -> None:
        """Create the models dir; a data_dir that is a file or unwritable is a config error."""
        try:
            self.models_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(self.config_source, "data_dir", self._why_not(exc)) from None

    def _why_not(self, exc: OSError) -> str:
        data_dir = self.models_dir.parent
        blocker = next((p for p in (self.models_dir, *self.models_dir.parents)
                        if p.exists() and not p.is_dir()), None)
        if blocker == self.models_dir:
            return (f"{blocker} is a file, not a directory: move it away (models are kept in "
                    "<data_dir>/models), or point data_dir at another directory")
        if blocker is not None:
            what = "" if blocker == data_dir else f", so data_dir {data_dir} cannot be created"
            return f"{blocker} is a file, not a directory{what}: point data_dir at a directory"
        if isinstance(exc, PermissionError):
            return (f"cannot create {self.models_dir}: permission denied: point data_dir at a "
                    "directory you can write to, or fix its permissions")
        return (f"cannot create {self.models_dir}: {exc.strerror or exc}: point data_dir at a "
                "writable directory")

    def status(self, name: str) -> ModelStatus:
        spec = self.spec(name)
        fetched = self.fetched_path(spec)
        if fetched.exists():
            problems = self._fetched_problems(spec)
            if problems is None:
                return ModelStatus(spec, fetched, "unverified", _size(fetched),
                                   f"no hash record {self.model_dir(spec) / HASHES_FILE}")
            if not problems:
                return ModelStatus(spec, fetched, "fetched", _size(fetched))
            problem = "damaged: " + "; ".join(problems[:3])
            wheel_path = _wheel_path(spec.wheel)
            if wheel_path is not None:
                return ModelStatus(spec, wheel_path, "damaged->wheel", _size(wheel_path), problem)
            return ModelStatus(spec, fetched, "damaged", _size(fetched), problem)
        wheel_path = _wheel_path(spec.wheel)
        if wheel_path is not None:
            return ModelStatus(spec, wheel_path, "wheel", _size(wheel_path))
        return ModelStatus(spec, None, "missing", 0)

    def _fetched_problems(self, spec: ModelSpec) -> list[str] | None:
        """The cheap load-time check of the fetched copy; None when it has no hash record."""
        record = hashrecord.read_record(self.model_dir(spec))
        if record is None:
            return None
        return [*record.problems, *hashrecord.check(self.model_dir(spec), record.lines, False)]

    def resolve(self, reference: str, kind: str, config_key: str, source: str) -> Path:
        """A config value (catalog name or path) -> an existing path, or a clear error."""
        if reference in self.specs:
            spec = self.specs[reference]
            if spec.kind != kind:
                raise ConfigError(source, config_key,
                                  f"'{reference}' is a {spec.kind} model, not a {kind} model")
            status = self.status(reference)
            if status.path is None:
                raise ModelMissingError(reference, str(self.fetched_path(spec)), self.fetch_hint(spec))
            self._check_usable(status)
            return status.path
        path = Path(reference).expanduser()
        if path.exists():
            return path
        if "/" in reference or path.suffix:
            raise ModelMissingError(
                reference, str(path),
                "Fix the path in the config, or use a name from `edge-agent models list`.")
        names = ", ".join(n for n, s in sorted(self.specs.items()) if s.kind == kind)
        raise ConfigError(source, config_key,
                          f"'{reference}' is neither a model name ({names}) nor an existing path")

    def _check_usable(self, status: ModelStatus) -> None:
        """Refuse a damaged copy; warn (once per process) about one that is not the fetched one
        as it should be."""
        spec, model_dir = status.spec, self.model_dir(status.spec)
        if spec.downloads:
            fix = f"run `edge-agent models fetch {spec.name}` again, or delete {model_dir}"
        else:
            fix = f"delete {model_dir}" + (f" and run `{spec.wheel.install}`" if spec.wheel else "")
        if status.source == "wheel" and spec.wheel is not None and status.path is not None and (
                _size(status.path) <= WHEEL_HASH_AT_LOAD_MAX):
            checked = _wheel_mismatches(spec.wheel, status.path)
            if checked is not None and checked[1]:  # a wheel without hashes cannot be checked
                reinstall = spec.wheel.install.replace("pip install", "pip install "
                                                       "--force-reinstall", 1)
                fetch = f", or `edge-agent models fetch {spec.name}`" if spec.downloads else ""
                raise ModelFileError(status.path, "the installed file differs from its wheel's "
                                     "RECORD (sha256): it was changed or damaged after install",
                                     f"Fix: `{reinstall}`{fetch}")
        if status.source == "damaged":
            raise ModelFileError(model_dir, f"the fetched copy is {status.problem}",
                                 f"Fix: {fix}")
        if status.source == "damaged->wheel":
            _warn_once(f"model {spec.name}: the fetched copy in {model_dir} is {status.problem}; "
                       f"using the wheel's copy {status.path} instead. Fix: {fix}")
        elif status.source == "unverified":
            _warn_once(f"model {spec.name}: {model_dir} has no hash record (an interrupted or "
                       f"old fetch), so it is used unverified. Fix: {fix}")

    def fetch_hint(self, spec: ModelSpec) -> str:
        hints = []
        if spec.downloads:
            hints.append(f"edge-agent models fetch {spec.name}")
        if spec.wheel is not None:
            hints.append(spec.wheel.install)
        return "Get it with: " + "  or  ".join(hints) if hints else "It cannot be fetched."

    def verify(self, name: str) -> list[str]:
        """Check a present model's files against their recorded hashes; returns problems."""
        status = self.status(name)
        if status.path is None:
            return [f"missing: {self.fetch_hint(status.spec)}"]
        if status.spec.wheel is not None and status.source == "wheel":
            return _verify_wheel(status.spec.wheel, status.path)
        model_dir = self.model_dir(status.spec)
        problems = _verify_fetched(model_dir)
        if status.source == "damaged->wheel":
            return [*(f"fetched copy {model_dir}: {p}" for p in problems),
                    f"the wheel's copy {status.path} is used until the fetched copy is fetched "
                    f"again or deleted"]
        return problems


WHEEL_HASH_AT_LOAD_MAX = 16 << 20
"""A model taken from an installed wheel is checked against the wheel's RECORD at load when it
is this small (the VAD, the end-of-turn model: milliseconds, once per process); bigger ones by
`edge-agent models verify`."""


def load_catalog(models_dir: Path, manifest: Path | None = None,
                 config_source: str = "config") -> Catalog:
    """The catalog of `manifest` (default: the built-in one), every key checked."""
    if manifest is None:
        text = importlib.resources.files("edge_agent.models").joinpath("manifest.toml").read_text(
            encoding="utf-8")
        source = "edge_agent/models/manifest.toml"
    else:
        text = read_text(manifest, "manifest")
        source = str(manifest)
    return Catalog(parse_manifest(parse_toml(text, source), source), models_dir, config_source)


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


def _wheel_path(wheel: WheelSource | None) -> Path | None:
    if wheel is None:
        return None
    # find_spec, not import: some model wheels run heavy code (or fail) on import.
    try:
        spec = importlib.util.find_spec(wheel.package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / wheel.path
    return path if path.exists() else None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _verify_fetched(model_dir: Path) -> list[str]:
    record = hashrecord.read_record(model_dir)
    if record is None:
        return [f"no hash record {model_dir / HASHES_FILE}; fetch the model again"]
    return [*record.problems, *hashrecord.check(model_dir, record.lines, thorough=True)]


def _verify_wheel(wheel: WheelSource, path: Path) -> list[str]:
    """Check the wheel's files under `path` against the sha256s in its RECORD."""
    checked = _wheel_mismatches(wheel, path)
    if checked is None:
        return [f"cannot find the installed distribution of {wheel.package}"]
    listed, problems = checked
    return problems if listed else [f"{path}: not listed in the wheel's RECORD"]


def _wheel_mismatches(wheel: WheelSource, path: Path) -> tuple[int, list[str]] | None:
    """How many of the wheel's files under `path` its RECORD lists with a hash, and those whose
    sha256 differs; None when the distribution is not found."""
    distribution = _distribution_of(wheel.package)
    if distribution is None:
        return None
    problems = []
    listed = 0
    for file in distribution.files or []:
        located = Path(str(file.locate()))
        if file.hash is None or not (located == path or path in located.parents):
            continue
        listed += 1
        actual = base64.urlsafe_b64encode(bytes.fromhex(sha256_of(located))).rstrip(b"=").decode()
        if actual != file.hash.value:
            problems.append(f"{located}: sha256 differs from the wheel's RECORD")
    return listed, problems


@functools.cache
def _distribution_of(package: str) -> importlib.metadata.Distribution | None:
    for name in importlib.metadata.packages_distributions().get(package, []):
        return importlib.metadata.distribution(name)
    return None
