"""Hostile inputs to `edge-agent models`: bad manifests, paths that climb out of the models dir,
servers that stall or trickle, a data_dir that is a file, and damaged fetched copies.

Errors are checked through the real entry point (`python -m edge_agent`, exit code, one stderr
line, no traceback) where a test can drive it; the stall tests call fetch_model in-process
because they pass timeouts of a fraction of a second.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from edge_agent.errors import ConfigError, ModelFetchError, ModelFileError
from edge_agent.models import hashrecord
from edge_agent.models.catalog import HASHES_FILE, load_catalog
from edge_agent.models.fetch import fetch_model
from tests.cli import edge_agent, write_config
from tests.model_server import (
    FETCH_ERROR,
    Server,
    Setup,
    assert_clean_error,
    fetch,
    models_cli,
    part_files,
    random_bytes,
    sha,
    single_file_model,
    write_setup,
)

CONFIG_ERROR = 2
FILE_ERROR = 3
GOOD_SHA = "a" * 64


# --------------------------------------------------------------------------- bad manifests


def _manifest_text(*, model: str = "", files: str = "", name: str = "m",
                   top: str = "") -> str:
    """A valid one-model manifest; `model` and `files` lines replace the defaults they name."""
    model_keys = {"kind": '"vad"', "entry": '"w.bin"'}
    file_keys = {"url": '"http://127.0.0.1:9/w.bin"', "size": "10", "sha256": f'"{GOOD_SHA}"',
                 "save_as": '"w.bin"'}
    extra_model, extra_file = [], []
    for line, keys, extra in ((model, model_keys, extra_model), (files, file_keys, extra_file)):
        for item in filter(None, line.split("\n")):
            key, _, value = item.partition(" = ")
            if value == "DELETE":
                keys.pop(key)
            elif key in keys:
                keys[key] = value
            else:
                extra.append(item)
    lines = [top, f"[models.{name}]", *(f"{k} = {v}" for k, v in model_keys.items()),
             *extra_model, "", f"[[models.{name}.files]]",
             *(f"{k} = {v}" for k, v in file_keys.items()), *extra_file]
    return "\n".join(lines) + "\n"


BAD_MANIFESTS = [
    # (id, manifest text, dotted key the error must name)
    ("models-array", "models = [1, 2]\n", "models"),
    ("models-string", 'models = "x"\n', "models"),
    ("model-not-table", "[models]\nm = 3\n", "models.m"),
    ("top-unknown", _manifest_text(top="colour = 1"), "colour"),
    ("model-unknown", _manifest_text(model="colour = 1"), "models.m.colour"),
    ("kind-int", _manifest_text(model="kind = 5"), "models.m.kind"),
    ("kind-choice", _manifest_text(model='kind = "video"'), "models.m.kind"),
    ("kind-missing", _manifest_text(model="kind = DELETE"), "models.m.kind"),
    ("description-int", _manifest_text(model="description = 3"), "models.m.description"),
    ("entry-missing", _manifest_text(model="entry = DELETE"), "models.m.entry"),
    ("entry-int", _manifest_text(model="entry = 7"), "models.m.entry"),
    ("entry-empty", _manifest_text(model='entry = ""'), "models.m.entry"),
    ("entry-absolute", _manifest_text(model='entry = "/etc/passwd"'), "models.m.entry"),
    ("entry-dotdot", _manifest_text(model='entry = "../other/w.bin"'), "models.m.entry"),
    ("entry-dot", _manifest_text(model='entry = "."'), "models.m.entry"),
    ("files-string", _manifest_text().split("[[")[0] + 'files = "x"\n', "models.m.files"),
    ("files-ints", _manifest_text().split("[[")[0] + "files = [1]\n", "models.m.files"),
    ("file-unknown", _manifest_text(files='colour = "red"'), "models.m.files[0].colour"),
    ("url-int", _manifest_text(files="url = 5"), "models.m.files[0].url"),
    ("url-ftp", _manifest_text(files='url = "ftp://host/w.bin"'), "models.m.files[0].url"),
    ("url-file", _manifest_text(files='url = "file:///etc/passwd"'), "models.m.files[0].url"),
    ("url-no-host", _manifest_text(files='url = "http://"'), "models.m.files[0].url"),
    ("url-missing", _manifest_text(files="url = DELETE"), "models.m.files[0].url"),
    ("size-string", _manifest_text(files='size = "big"'), "models.m.files[0].size"),
    ("size-float", _manifest_text(files="size = 1.5"), "models.m.files[0].size"),
    ("size-bool", _manifest_text(files="size = true"), "models.m.files[0].size"),
    ("size-zero", _manifest_text(files="size = 0"), "models.m.files[0].size"),
    ("size-negative", _manifest_text(files="size = -1"), "models.m.files[0].size"),
    ("sha-short", _manifest_text(files='sha256 = "abc"'), "models.m.files[0].sha256"),
    ("sha-not-hex", _manifest_text(files=f'sha256 = "{"g" * 64}"'), "models.m.files[0].sha256"),
    ("sha-int", _manifest_text(files="sha256 = 12"), "models.m.files[0].sha256"),
    ("save-traversal", _manifest_text(files='save_as = "../../../outside"'),
     "models.m.files[0].save_as"),
    ("save-inner-traversal", _manifest_text(files='save_as = "a/../../b"'),
     "models.m.files[0].save_as"),
    ("save-absolute", _manifest_text(files='save_as = "/tmp/x"'), "models.m.files[0].save_as"),
    ("save-empty", _manifest_text(files='save_as = ""'), "models.m.files[0].save_as"),
    ("save-control", _manifest_text(files='save_as = "a\\u0001b"'), "models.m.files[0].save_as"),
    ("save-newline", _manifest_text(files='save_as = "a\\nb"'), "models.m.files[0].save_as"),
    ("save-record", _manifest_text(files='save_as = ".sha256"'), "models.m.files[0].save_as"),
    ("save-part", _manifest_text(files='save_as = "w.bin.part"'), "models.m.files[0].save_as"),
    ("save-int", _manifest_text(files="save_as = 3"), "models.m.files[0].save_as"),
    ("save-missing", _manifest_text(files="save_as = DELETE"), "models.m.files[0].save_as"),
    ("save-duplicate", _manifest_text() + "\n[[models.m.files]]\n"
     f'url = "http://127.0.0.1:9/x"\nsize = 1\nsha256 = "{GOOD_SHA}"\nsave_as = "./w.bin"\n',
     "models.m.files[1].save_as"),
    ("extract-traversal", _manifest_text(files='extract = "../x/"'), "models.m.files[0].extract"),
    ("extract-absolute", _manifest_text(files='extract = "/x"'), "models.m.files[0].extract"),
    ("extract-int", _manifest_text(files="extract = 5"), "models.m.files[0].extract"),
    ("unpacked-without-extract", _manifest_text(files="unpacked_size = 10"),
     "models.m.files[0].unpacked_size"),
    ("unpacked-zero", _manifest_text(files='extract = "a.bin"\nunpacked_size = 0'),
     "models.m.files[0].unpacked_size"),
    ("unpacked-string", _manifest_text(files='extract = "a.bin"\nunpacked_size = "1 GB"'),
     "models.m.files[0].unpacked_size"),
    ("wheel-int", _manifest_text(model="wheel = 3"), "models.m.wheel"),
    ("wheel-no-package", _manifest_text(model='wheel = { path = "a", install = "pip x" }'),
     "models.m.wheel.package"),
    ("wheel-dotted-package", _manifest_text(
        model='wheel = { package = "os.path", path = "a", install = "pip x" }'),
     "models.m.wheel.package"),
    ("wheel-empty-package", _manifest_text(
        model='wheel = { package = "", path = "a", install = "pip x" }'), "models.m.wheel.package"),
    ("wheel-path-traversal", _manifest_text(
        model='wheel = { package = "p", path = "../../etc", install = "pip x" }'),
     "models.m.wheel.path"),
    ("wheel-install-empty", _manifest_text(
        model='wheel = { package = "p", path = "a", install = "" }'), "models.m.wheel.install"),
    ("wheel-install-invisible", _manifest_text(
        model='wheel = { package = "p", path = "a", install = "\u200b\u3000" }'),
     "models.m.wheel.install"),
    ("wheel-unknown", _manifest_text(
        model='wheel = { package = "p", path = "a", install = "pip x", x = 1 }'),
     "models.m.wheel.x"),
    ("name-slash", _manifest_text(name='"a/b"'), "models"),
    ("name-dotdot", _manifest_text(name='".."'), "models"),
    ("name-control", _manifest_text(name='"a\\u001bb"'), "models"),
    ("name-empty", _manifest_text(name='""'), "models"),
]


@pytest.mark.parametrize(("text", "key"), [pytest.param(t, k, id=i) for i, t, k in BAD_MANIFESTS])
def test_bad_manifest_is_one_config_error_line(tmp_path: Path, text: str, key: str) -> None:
    setup = write_setup(tmp_path, {})
    setup.manifest.write_text(text, encoding="utf-8")
    result = fetch(setup, "m")
    assert_clean_error(result, CONFIG_ERROR)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{setup.manifest}: {key}: " in lines[0], lines[0]
    assert not setup.models_dir.exists()  # nothing was written


def test_built_in_manifest_is_valid(tmp_path: Path) -> None:
    catalog = load_catalog(tmp_path)
    assert {"silero-vad", "smollm2-135m", "qwen2.5-0.5b-instruct"} <= set(catalog.specs)


def test_unknown_key_lists_the_valid_ones(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, {})
    setup.manifest.write_text(_manifest_text(files="colour = 1"), encoding="utf-8")
    result = models_cli(setup, "list", "--manifest", str(setup.manifest))
    assert_clean_error(result, CONFIG_ERROR)
    assert "valid keys here: extract, save_as, sha256, size, unpacked_size, url" in result.stderr


# --------------------------------------------------------------------------- traversal


def test_save_as_traversal_is_refused_and_writes_nothing(server: Server, tmp_path: Path) -> None:
    data = random_bytes(1000)
    url = server.serve("/w.bin", data)
    model = single_file_model(url, data, save_as="../../../outside")
    model["entry"] = "w.bin"
    setup = write_setup(tmp_path, {"m": model})
    outside = setup.models_dir / "m" / "../../../outside"
    result = fetch(setup, "m")
    assert_clean_error(result, CONFIG_ERROR)
    assert "models.m.files[0].save_as" in result.stderr
    assert "'..' is not allowed" in result.stderr
    assert not outside.exists()
    assert not (tmp_path / "outside").exists()
    assert not (tmp_path / "outside.part").exists()
    assert server.served.requests == []  # refused before any download


def test_symlink_leading_out_is_refused_at_write_time(server: Server, tmp_path: Path) -> None:
    """The manifest's path is fine; a link on disk would carry the write outside."""
    data = random_bytes(1000)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data, save_as="sub/w.bin")})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (setup.models_dir / "m").mkdir(parents=True)
    (setup.models_dir / "m" / "sub").symlink_to(elsewhere)

    result = fetch(setup, "m")
    assert_clean_error(result, FETCH_ERROR)
    assert "outside the model's directory" in result.stderr
    assert list(elsewhere.iterdir()) == []


# --------------------------------------------------------------------------- stalls and trickles


@pytest.mark.parametrize("mode", ["stall", "silent"])
def test_stalled_server_is_a_fetch_error_and_keeps_the_part(server: Server, tmp_path: Path,
                                                            mode: str) -> None:
    data = random_bytes(50_000)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data)})
    server.served.mode, server.served.cut_at = mode, 1000
    catalog = load_catalog(setup.models_dir, setup.manifest)

    with pytest.raises(ModelFetchError) as caught:
        fetch_model(catalog, "m", stall_timeout=0.3)
    assert caught.value.exit_code == FETCH_ERROR
    assert "stalled: no data for 0.3 s" in str(caught.value)
    assert "run the same command to resume" in str(caught.value)
    kept = 1000 if mode == "stall" else 0
    assert [p.stat().st_size for p in part_files(setup.models_dir)] == ([kept] if kept else [])

    server.served.mode = "normal"
    assert fetch_model(catalog, "m", stall_timeout=5).read_bytes() == data
    if kept:
        assert server.served.ranges("/w.bin")[-1] == f"bytes={kept}-"


def test_trickling_server_hits_the_deadline(server: Server, tmp_path: Path) -> None:
    """One byte at a time never trips a per-read timeout; the overall deadline ends it."""
    data = random_bytes(50_000)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data)})
    server.served.mode = "trickle"
    catalog = load_catalog(setup.models_dir, setup.manifest)

    with pytest.raises(ModelFetchError) as caught:
        fetch_model(catalog, "m", stall_timeout=10, deadline_s=0.3)
    assert caught.value.exit_code == FETCH_ERROR
    assert "too slow: not done after 0.3 s" in str(caught.value)
    parts = part_files(setup.models_dir)
    assert len(parts) == 1 and 0 < parts[0].stat().st_size < len(data)
    assert parts[0].read_bytes() == data[:parts[0].stat().st_size]
    assert not (setup.models_dir / "m" / "weights.bin").exists()


# --------------------------------------------------------------------------- data_dir


def _data_dir_setup(tmp_path: Path, data_dir: Path) -> Setup:
    setup = write_setup(tmp_path, {"m": single_file_model("http://127.0.0.1:9/w.bin", b"x" * 10)})
    write_config(setup.config.parent, name=setup.config.name, data_dir=data_dir)
    return Setup(setup.tmp, setup.config, setup.manifest, data_dir / "models")


@pytest.mark.parametrize("blocked", ["data_dir", "models_dir", "parent"])
def test_data_dir_that_is_a_file_is_a_config_error(tmp_path: Path, blocked: str) -> None:
    data_dir = tmp_path / "data"
    if blocked == "data_dir":
        data_dir.write_text("not a directory")
        file = data_dir
    elif blocked == "models_dir":
        data_dir.mkdir()
        file = data_dir / "models"
        file.write_text("not a directory")
    else:
        (tmp_path / "parent").write_text("not a directory")
        file = tmp_path / "parent"
        data_dir = file / "data"
    setup = _data_dir_setup(tmp_path, data_dir)

    result = fetch(setup, "m")
    assert_clean_error(result, CONFIG_ERROR)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert ": data_dir: " in lines[0]
    assert str(file) in lines[0] and "point data_dir at" in lines[0]
    listed = models_cli(setup, "list", "--manifest", str(setup.manifest))
    assert listed.returncode == 0, listed.stderr

    # The library says the same without the CLI's check of the data dir.
    catalog = load_catalog(setup.models_dir, setup.manifest, config_source=str(setup.config))
    with pytest.raises(ConfigError) as caught:
        fetch_model(catalog, "m")
    assert (caught.value.path, caught.value.key) == (str(setup.config), "data_dir")
    assert f"{file} is a file, not a directory" in caught.value.reason
    assert "point data_dir at" in caught.value.reason or "move it away" in caught.value.reason


# --------------------------------------------------------------------------- damaged copies


def _fake_wheel(tmp_path: Path, payload: bytes) -> Path:
    """A package on a private path carrying a model file (found by find_spec, never imported)."""
    site = tmp_path / "site"
    package = site / "fake_model_wheel"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
    (package / "data" / "w.bin").write_bytes(payload)
    return site


def _wheel_model(url: str, data: bytes) -> dict[str, object]:
    model = single_file_model(url, data, save_as="w.bin")
    model["kind"] = "vad"
    return model


def _write_wheel_manifest(setup: Setup) -> None:
    text = setup.manifest.read_text(encoding="utf-8").replace(
        'entry = "w.bin"', 'entry = "w.bin"\nwheel = { package = "fake_model_wheel", '
        'path = "data/w.bin", install = "pip install fake-model-wheel" }')
    setup.manifest.write_text(text, encoding="utf-8")


def _cli_with_path(setup: Setup, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    return edge_agent("models", *args, config=setup.config, timeout=60,
                      drop=("http_proxy", "https_proxy", "all_proxy"),
                      env={"no_proxy": "*", "NO_PROXY": "*", "PYTHONPATH": path})


def _row(listed: subprocess.CompletedProcess[str], name: str) -> list[str]:
    return next(line for line in listed.stdout.splitlines() if f" {name} " in line).split()


def test_damaged_fetched_copy_falls_back_to_the_wheel(server: Server, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    data = random_bytes(20_000, seed=5)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": _wheel_model(url, data)})
    _write_wheel_manifest(setup)
    site = _fake_wheel(tmp_path, data)
    wheel_copy = site / "fake_model_wheel" / "data" / "w.bin"
    fetched = setup.models_dir / "m" / "w.bin"

    assert _cli_with_path(setup, site, "fetch", "m", "--manifest", str(setup.manifest)
                          ).returncode == 0
    listed = _cli_with_path(setup, site, "list", "--manifest", str(setup.manifest))
    assert _row(listed, "m")[:3] == ["m", "vad", "fetched"], listed.stdout

    # Full-scale noise of the same size: only a hash tells.
    fetched.write_bytes(random_bytes(len(data), seed=99))
    listed = _cli_with_path(setup, site, "list", "--manifest", str(setup.manifest))
    assert listed.returncode == 0, listed.stderr
    row = _row(listed, "m")
    assert "damaged->wheel" in row and str(wheel_copy) in row, listed.stdout
    verified = _cli_with_path(setup, site, "verify", "m", "--manifest", str(setup.manifest))
    assert verified.returncode == FETCH_ERROR
    assert f"fetched copy {setup.models_dir / 'm'}: w.bin: sha256 differs" in verified.stdout

    monkeypatch.syspath_prepend(str(site))
    catalog = load_catalog(setup.models_dir, setup.manifest)
    with caplog.at_level(logging.WARNING, logger="edge_agent"):
        assert catalog.resolve("m", "vad", "vad.model", "cfg") == wheel_copy
        assert catalog.resolve("m", "vad", "vad.model", "cfg") == wheel_copy
    warnings = [r.getMessage() for r in caplog.records if r.name == "edge_agent"]
    assert len(warnings) == 1, warnings  # once per process
    assert str(setup.models_dir / "m") in warnings[0]
    assert str(wheel_copy) in warnings[0]
    assert "edge-agent models fetch m" in warnings[0]

    # The fix the warning names works: the damaged file is fetched again.
    before = len(server.served.requests)
    assert _cli_with_path(setup, site, "fetch", "m", "--manifest", str(setup.manifest)
                          ).returncode == 0
    assert len(server.served.requests) == before + 1
    assert fetched.read_bytes() == data
    listed = _cli_with_path(setup, site, "list", "--manifest", str(setup.manifest))
    assert "fetched" in _row(listed, "m")


def test_damaged_copy_without_wheel_is_a_model_file_error(server: Server, tmp_path: Path) -> None:
    data = random_bytes(20_000, seed=6)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data)})
    assert fetch(setup, "m").returncode == 0
    fetched = setup.models_dir / "m" / "weights.bin"
    fetched.write_bytes(bytes(len(data)))

    catalog = load_catalog(setup.models_dir, setup.manifest)
    with pytest.raises(ModelFileError) as caught:
        catalog.resolve("m", "llm", "llm.model", "cfg")
    assert caught.value.exit_code == FILE_ERROR
    assert "weights.bin: sha256 differs" in str(caught.value)
    assert "edge-agent models fetch m" in str(caught.value)
    listed = models_cli(setup, "list", "--manifest", str(setup.manifest))
    assert "damaged" in _row(listed, "m")


def test_damaged_built_in_model_stops_the_cli_with_exit_3(tmp_path: Path) -> None:
    """The same through a command that loads a model (the built-in manifest's qwen, no wheel)."""
    data_dir = tmp_path / "data"
    name, entry = "qwen2.5-0.5b-instruct", "qwen2.5-0.5b-instruct-q4_k_m.gguf"
    model_dir = data_dir / "models" / name
    model_dir.mkdir(parents=True)
    (model_dir / entry).write_bytes(b"GGUF" + random_bytes(5000))
    hashrecord.write_record(model_dir)
    (model_dir / entry).write_bytes(b"GGUF" + bytes(5000))
    config = write_config(tmp_path, f'[llm]\nmodel = "{name}"\n', data_dir=data_dir)
    result = edge_agent("bench", "memory", "--json", tmp_path / "out.json", config=config)
    assert_clean_error(result, FILE_ERROR)
    assert f"edge-agent models fetch {name}" in result.stderr
    assert "sha256 differs" in result.stderr
    assert not (tmp_path / "out.json").exists()


def _shadow_wheel(tmp_path: Path, package: str, distribution: str, relative: str) -> Path:
    """A copy of the installed wheel's file `relative` (under `package`) in `tmp_path`, with a
    dist-info whose RECORD lists it as the wheel's own RECORD does: first on PYTHONPATH, it is
    the installed wheel a child process finds."""
    import importlib.metadata

    installed = importlib.metadata.distribution(distribution)
    [listed] = [f for f in installed.files or [] if str(f) == f"{package}/{relative}"]
    copy = tmp_path / package / relative
    copy.parent.mkdir(parents=True)
    copy.write_bytes(Path(str(listed.locate())).read_bytes())
    (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    info = tmp_path / f"{distribution.replace('-', '_')}-{installed.version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: "
                                   f"{installed.version}\n", encoding="utf-8")
    assert listed.hash is not None
    (info / "RECORD").write_text(f"{package}/{relative},sha256={listed.hash.value},{listed.size}\n"
                                 f"{package}/__init__.py,,\n", encoding="utf-8")
    (info / "top_level.txt").write_text(f"{package}\n", encoding="utf-8")
    return copy


def test_a_tampered_wheel_model_is_refused_with_the_reinstall(tmp_path: Path) -> None:
    """The end-of-turn model is read from the installed pipecat-ai wheel: a file changed there
    after install (same size, a few bytes flipped: onnxruntime would load it) is refused at
    start against the wheel's RECORD, naming the file and how to get a good copy."""
    site = tmp_path / "site"
    model = _shadow_wheel(site, "pipecat", "pipecat-ai",
                          "audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx")
    config = write_config(tmp_path, "", data_dir=tmp_path / "data")
    env = {"PYTHONPATH": str(site)}
    intact = edge_agent("models", "verify", "smart-turn-v3.2", config=config, env=env)
    assert intact.returncode == 0, intact.stdout + intact.stderr
    data = bytearray(model.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8] = bytes(255 - b for b in data[middle:middle + 8])
    model.write_bytes(bytes(data))
    result = edge_agent("demo", "--json", tmp_path / "out.json", config=config, env=env)
    assert_clean_error(result, FILE_ERROR)
    assert f"cannot use model file {model}" in result.stderr
    assert "differs from its wheel's RECORD" in result.stderr
    assert "pip install --force-reinstall --no-deps 'pipecat-ai==" in result.stderr
    assert "edge-agent models fetch smart-turn-v3.2" in result.stderr


def test_unverified_copy_is_used_with_one_warning(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    setup = write_setup(tmp_path, {"m": single_file_model("http://127.0.0.1:9/w.bin", b"x" * 10)})
    model_dir = setup.models_dir / "m"
    model_dir.mkdir(parents=True)
    (model_dir / "weights.bin").write_bytes(b"y" * 10)
    catalog = load_catalog(setup.models_dir, setup.manifest)
    assert catalog.status("m").source == "unverified"
    with caplog.at_level(logging.WARNING, logger="edge_agent"):
        for _ in range(3):
            assert catalog.resolve("m", "llm", "llm.model", "cfg") == model_dir / "weights.bin"
    warnings = [r.getMessage() for r in caplog.records if r.name == "edge_agent"]
    assert len(warnings) == 1 and "no hash record" in warnings[0], warnings


def test_old_format_record_is_still_read(tmp_path: Path) -> None:
    setup = write_setup(tmp_path, {"m": single_file_model("http://127.0.0.1:9/w.bin", b"x" * 10)})
    model_dir = setup.models_dir / "m"
    model_dir.mkdir(parents=True)
    (model_dir / "weights.bin").write_bytes(b"good bytes")
    (model_dir / HASHES_FILE).write_text(f"{sha(b'good bytes')}  weights.bin\n")
    catalog = load_catalog(setup.models_dir, setup.manifest)
    assert catalog.status("m").source == "fetched"
    assert catalog.verify("m") == []
    (model_dir / "weights.bin").write_bytes(b"evil bytes")
    assert catalog.status("m").source == "damaged"


def test_record_holds_size_and_mtime_and_big_files_are_checked_by_them(
        server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = random_bytes(30_000, seed=8)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data)})
    assert fetch(setup, "m").returncode == 0
    model_dir = setup.models_dir / "m"
    fetched = model_dir / "weights.bin"
    info = fetched.stat()
    assert (model_dir / HASHES_FILE).read_text() == (
        f"{sha(data)} {len(data)} {info.st_mtime_ns}  weights.bin\n")

    monkeypatch.setattr(hashrecord, "HASH_AT_LOAD_MAX", 1000)  # weights.bin is "big" now
    hashed: list[Path] = []
    real = hashrecord.sha256_digest
    monkeypatch.setattr(hashrecord, "sha256_digest", lambda p: hashed.append(p) or real(p))
    catalog = load_catalog(setup.models_dir, setup.manifest)
    assert catalog.status("m").source == "fetched"
    assert hashed == []  # size and mtime match: not hashed

    os.utime(fetched, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # touched, same bytes
    for _ in range(3):
        assert catalog.status("m").source == "fetched"
    assert hashed == [fetched]  # hashed once, then cached

    fetched.write_bytes(data[:-1])  # truncated: caught by size alone
    assert catalog.status("m").source == "damaged"
    assert "29999 bytes, the fetched file had 30000" in catalog.status("m").problem


def test_small_file_is_hashed_once_per_process(server: Server, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    data = random_bytes(30_000, seed=9)
    url = server.serve("/w.bin", data)
    setup = write_setup(tmp_path, {"m": single_file_model(url, data)})
    assert fetch(setup, "m").returncode == 0
    hashed: list[Path] = []
    real = hashrecord.sha256_digest
    monkeypatch.setattr(hashrecord, "sha256_digest", lambda p: hashed.append(p) or real(p))
    catalog = load_catalog(setup.models_dir, setup.manifest)
    for _ in range(4):
        assert catalog.status("m").source == "fetched"
    assert hashed == [setup.models_dir / "m" / "weights.bin"]


def test_manifest_errors_are_config_errors_in_process(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(_manifest_text(files='save_as = "../x"'), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_catalog(tmp_path, manifest)
    assert (caught.value.path, caught.value.key) == (str(manifest), "models.m.files[0].save_as")
