"""What a venue's config hands the kiosk. Credential files (`[sync] password_file`,
`[llm] server_key_file`) are read as libpq reads `~/.pgpass`, and more strictly: a bounded read
of a private regular file, never a device, a FIFO, a directory or a link; every refusal names
the key, the file and the fix, never the secret. `[sync] url` names one host the service may
reach, and the key strings the venue indexes are bounded."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from edge_agent.config.file import KEY_TEXT_MAX, parse_config
from edge_agent.config.lan import (
    SECRET_MAX_BYTES,
    SYNC_PASSWORD_VARIABLE,
    parse_database_url,
    read_secret,
)
from edge_agent.engines.llm.server import read_api_key
from edge_agent.errors import ConfigError
from tests.cli import edge_agent, write_config


def _password(path: Path | str) -> str:
    return read_secret(str(path), SYNC_PASSWORD_VARIABLE, "kiosk.toml", "sync.password_file",
                       "the database password")


def _refusal(path: Path | str) -> str:
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        _password(path)
    assert time.monotonic() - started < 1.0  # refused at once: nothing was read whole or waited
    message = str(refused.value)
    assert "kiosk.toml" in message and "sync.password_file" in message and str(path) in message
    assert "s3cret" not in message
    return message


def _secret(tmp_path: Path, mode: int, text: str = "s3cret\nsecond line\n") -> Path:
    path = tmp_path / "secret"
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def test_a_private_file_gives_its_first_line(tmp_path: Path) -> None:
    assert _password(_secret(tmp_path, 0o600)) == "s3cret"
    assert _password(_secret(tmp_path, 0o400)) == "s3cret"
    assert read_api_key(str(_secret(tmp_path, 0o600, " key-1 \n"))) == "key-1"


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o606, 0o660, 0o620, 0o666])
def test_a_file_others_may_read_or_change_is_refused_with_the_chmod(tmp_path: Path,
                                                                     mode: int) -> None:
    path = _secret(tmp_path, mode)
    message = _refusal(path)
    assert f"(mode {mode:04o})" in message and f"chmod 600 {path}" in message


def test_group_may_read_only_a_file_root_owns(tmp_path: Path) -> None:
    path = _secret(tmp_path, 0o640)
    if os.stat(path).st_uid == 0:  # root:edge-agent 0640, as a service keeps its secrets
        assert _password(path) == "s3cret"
    else:
        assert "(mode 0640)" in _refusal(path)


def test_a_link_is_refused_even_to_a_private_file(tmp_path: Path) -> None:
    target = _secret(tmp_path, 0o600)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert "is a symbolic link: name the file itself" in _refusal(link)


def test_devices_fifos_and_directories_are_refused_without_reading_or_waiting(
        tmp_path: Path) -> None:
    assert "/dev/zero is a character device" in _refusal("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    assert "is a FIFO: name a regular file" in _refusal(fifo)  # no writer: no wait either
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    assert "is a directory" in _refusal(directory)


def test_a_file_larger_than_a_secret_is_refused(tmp_path: Path) -> None:
    big = _secret(tmp_path, 0o600, "s3cret\n" + "x" * SECRET_MAX_BYTES)
    assert f"holds more than {SECRET_MAX_BYTES} bytes" in _refusal(big)
    assert _password(_secret(tmp_path, 0o600, "s3cret\n".ljust(SECRET_MAX_BYTES, "x"))) == "s3cret"


def test_missing_empty_and_binary_files_say_what_is_wrong(tmp_path: Path) -> None:
    assert "cannot read" in _refusal(tmp_path / "missing")
    assert "is empty: its first line must be the database password" in _refusal(
        _secret(tmp_path, 0o600, "\n"))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe s3cret")
    binary.chmod(0o600)
    assert "is not UTF-8 text" in _refusal(binary)


def test_the_doctor_fails_each_credential_file_as_a_user_meets_it(tmp_path: Path) -> None:
    """`edge-agent doctor` with both credentials named as /dev/zero: one FAIL line each,
    naming the key and the file, without reading gigabytes first."""
    config = write_config(tmp_path, '[llm]\nserver = "http://127.0.0.1:9/v1"\n'
                          'server_key_file = "/dev/zero"\n'
                          '[sync]\nurl = "postgresql://kiosk@127.0.0.1:9/venue"\n'
                          'password_file = "/dev/zero"\n')
    result = edge_agent("doctor", "--quick", config=config, timeout=120)
    lines = {line[6:21].strip(): line for line in result.stdout.splitlines()
             if line.startswith(("ok    ", "FAIL  ", "warn  "))}
    assert result.returncode == 1
    for check, key in (("llm server", "llm.server_key_file"), ("venue store", "sync.password_file")):
        assert lines[check].startswith(f"FAIL  {check}"), lines
        assert f"{key}: /dev/zero is a character device" in lines[check]


@pytest.mark.parametrize(("url", "says"), [
    ("postgresql://kiosk@10.0.0.5:5432,10.0.0.6:5432/venue", "names several hosts"),
    ("postgresql://kiosk@[fd00::5],10.0.0.6/venue", "names several hosts"),
    ("postgresql://kiosk@a.lan,b.lan/venue", "names several hosts"),
    ("postgresql://kiosk@10.0.0.5/venue?service=venue", "must not name a ?service"),
    ("postgresql://kiosk@10.0.0.5/venue?passfile=/tmp/pw", "must not name a ?passfile"),
    ("postgresql://kiosk@10.0.0.5/venue?hostaddr=10.9.9.9", "not as ?options"),
])
def test_the_venue_address_names_the_one_host_the_service_may_reach(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_database_url(url, "kiosk.toml")
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_config(f'[sync]\nurl = "{url}"\n', "kiosk.toml")  # so never in a unit's allowance


def test_one_host_and_libpq_options_pass() -> None:
    address = parse_database_url("postgresql://kiosk@[fd00::5]:5433/venue?sslmode=require")
    assert (address.host, address.port, address.options) == ("fd00::5", 5433,
                                                             (("sslmode", "require"),))


@pytest.mark.parametrize("key", ["memory.identity", "sync.kiosk_id"])
def test_names_the_venue_indexes_are_bounded(key: str) -> None:
    table, name = key.split(".")
    fits = parse_config(f'[{table}]\n{name} = "{"é" * KEY_TEXT_MAX}"\n', "kiosk.toml")
    assert getattr(getattr(fits, table), name) == "é" * KEY_TEXT_MAX
    with pytest.raises(ConfigError) as refused:
        parse_config(f'[{table}]\n{name} = "{"x" * 6000}"\n', "kiosk.toml")
    assert f"{key}: is 6000 characters long; the most is {KEY_TEXT_MAX}" in str(refused.value)
    assert "use a short name" in str(refused.value)
