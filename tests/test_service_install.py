"""`edge-agent service install | uninstall` into a temp root, with a runner that records the
commands instead of running them (and plays systemd's part: users, enabled, active)."""

from __future__ import annotations

import argparse
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest

from edge_agent.cli import service as cli_service
from edge_agent.config import Config
from edge_agent.config.file import parse_config
from edge_agent.config.lan import network_allowance
from edge_agent.errors import ConfigError, ServiceError
from edge_agent.installer.steps import CommandResult, run_plan
from edge_agent.installer.unit import (
    SCREEN_SOCKET,
    SERVICE,
    Layout,
    install_plan,
    preflight,
    render_unit,
    service_config,
    uninstall_plan,
)

ROOT = Path(__file__).resolve().parent.parent
EXECUTABLE = ["/opt/edge-agent/venv/bin/edge-agent"]
QUERIES = ("is-enabled", "is-active")


class FakeSystem:
    """A runner: records every command; systemd-sysusers adds the user to the root's
    /etc/passwd (with this process's own ids, so the test can own what it makes), systemctl
    keeps each unit's enabled/active as systemd would (the service's: `enabled`, `active`)."""

    def __init__(self, root: Path, fail: str = "") -> None:
        self.root = root
        self.fail = fail
        self.commands: list[list[str]] = []
        self.units: dict[str, tuple[bool, bool]] = {}

    @property
    def enabled(self) -> bool:
        return self.units.get(SERVICE, (False, False))[0]

    @property
    def active(self) -> bool:
        return self.units.get(SERVICE, (False, False))[1]

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        argv = list(argv)
        self.commands.append(argv)
        if self.fail and self.fail in argv:
            return CommandResult(1, "Job for edge-agent.service failed.")
        if argv[0] == "systemd-sysusers":
            passwd = self.root / "etc" / "passwd"
            passwd.parent.mkdir(parents=True, exist_ok=True)
            with passwd.open("a", encoding="utf-8") as out:
                out.write(f"edge-agent:x:{os.getuid()}:{os.getgid()}:edge-agent voice agent:"
                          "/var/lib/edge-agent:/usr/sbin/nologin\n")
            return CommandResult(0, "")
        unit = argv[-1]
        enabled, active = self.units.get(unit, (False, False))
        if "is-enabled" in argv:
            return CommandResult(0 if enabled else 1, "")
        if "is-active" in argv:
            return CommandResult(0 if active else 3, "")
        if "enable" in argv:
            self.units[unit] = (True, active or "--now" in argv)
        elif "disable" in argv:
            self.units[unit] = (False, active and "--now" not in argv)
        elif "stop" in argv:
            self.units[unit] = (enabled, False)
        elif "restart" in argv or "start" in argv:
            self.units[unit] = (enabled, True)
        return CommandResult(0, "")

    def changes(self) -> list[list[str]]:
        """The commands that change something (queries left out)."""
        return [c for c in self.commands if not any(q in c for q in QUERIES)]


def _files(root: Path) -> dict[str, tuple[int, bytes | None]]:
    return {str(p.relative_to(root)): (p.stat().st_mode, None if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


def _install(root: Path, system: FakeSystem, dry_run: bool = False) -> tuple[int, list[str]]:
    lines: list[str] = []
    plan = install_plan(Layout(root), system, EXECUTABLE, bind=[])
    return run_plan(plan, dry_run, lines.append), lines


def _uninstall(root: Path, system: FakeSystem, purge: bool = False) -> tuple[int, list[str]]:
    lines: list[str] = []
    return run_plan(uninstall_plan(Layout(root), system, purge), False, lines.append), lines


def test_dry_run_prints_every_step_and_changes_nothing(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    changed, lines = _install(tmp_path, system, dry_run=True)
    steps = [line for line in lines if line.startswith("  [")]
    assert len(steps) == changed == 9
    assert all(line.startswith("  [would] ") for line in steps)
    text = "\n".join(steps)
    for expected in ("write " + str(tmp_path / "etc/sysusers.d/edge-agent.conf"),
                     "run systemd-sysusers", "mkdir " + str(tmp_path / "var/lib/edge-agent"),
                     'data_dir = "/var/lib/edge-agent"',
                     f"ExecStart={EXECUTABLE[0]} run", "run systemctl daemon-reload",
                     "run systemctl try-restart edge-agent.service",
                     "run systemctl enable --now edge-agent.service"):
        assert expected in text
    assert _files(tmp_path) == {}
    assert system.changes() == []


def test_install_puts_everything_in_place(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    changed, lines = _install(tmp_path, system)
    assert changed == 9 and all(not line.startswith("  [would]") for line in lines)

    unit = tmp_path / "etc/systemd/system/edge-agent.service"
    assert f"\nExecStart={EXECUTABLE[0]} run\n" in unit.read_text(encoding="utf-8")
    assert "\nProtectHome=yes\n" in unit.read_text(encoding="utf-8")
    sysusers = tmp_path / "etc/sysusers.d/edge-agent.conf"
    assert sysusers.read_text(encoding="utf-8") == (ROOT / "systemd/edge-agent.sysusers"
                                                    ).read_text(encoding="utf-8")
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    assert parse_config(config.read_text(encoding="utf-8"), str(config)).data_dir == \
        "/var/lib/edge-agent"
    for path in (unit, sysusers):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path
    # It may hold the screen's token or a database's password: root's, the service's group.
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "etc/edge-agent").stat().st_mode) == 0o755
    state = tmp_path / "var/lib/edge-agent"
    assert state.is_dir() and stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (state.stat().st_uid, state.stat().st_gid) == (os.getuid(), os.getgid())

    assert system.changes() == [
        ["systemd-sysusers", str(sysusers)],
        ["systemctl", "daemon-reload"],
        ["systemctl", "try-restart", "edge-agent.service"],
        ["systemctl", "enable", "--now", "edge-agent.service"],
    ]


def test_second_install_changes_nothing_and_says_so_per_step(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    before = _files(tmp_path)
    system.commands.clear()
    changed, lines = _install(tmp_path, system)
    steps = [line for line in lines if line.startswith("  [")]
    assert changed == 0 and len(steps) == 9
    assert all(line.startswith(("  [ok] ", "  [kept] ")) for line in steps), steps
    assert _files(tmp_path) == before
    assert system.changes() == []


def test_an_existing_config_is_kept(tmp_path: Path) -> None:
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    config.parent.mkdir(parents=True)
    config.write_text('data_dir = "/srv/agent"\n[turns]\ngreeting = "Hi"\n', encoding="utf-8")
    config.chmod(0o600)
    _, lines = _install(tmp_path, FakeSystem(tmp_path))
    assert config.read_text(encoding="utf-8").startswith('data_dir = "/srv/agent"')
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert any(line.startswith("  [kept]") and str(config) in line for line in lines)
    assert not any("readable by every user" in line for line in lines)


def test_a_kept_config_readable_by_all_is_named_with_the_commands_that_close_it(
        tmp_path: Path) -> None:
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[screen]\ntoken = "a-long-secret-token"\n', encoding="utf-8")
    config.chmod(0o644)
    _, lines = _install(tmp_path, FakeSystem(tmp_path))
    assert stat.S_IMODE(config.stat().st_mode) == 0o644  # the administrator's file, untouched
    note = next(line for line in lines if "readable by every user" in line)
    assert f"chgrp edge-agent {config} && chmod 640 {config}" in note


def test_a_changed_unit_is_reloaded_and_restarted(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    system.commands.clear()
    plan = install_plan(Layout(tmp_path), system, ["/usr/local/bin/edge-agent"], bind=[])
    assert run_plan(plan, False, lambda _: None) == 3
    assert system.changes() == [["systemctl", "daemon-reload"],
                                ["systemctl", "try-restart", "edge-agent.service"]]


def test_uninstall_removes_the_unit_and_keeps_the_data(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    (tmp_path / "var/lib/edge-agent/edge-agent.db").write_bytes(b"memory")
    system.commands.clear()
    changed, lines = _uninstall(tmp_path, system)
    assert changed == 4
    assert not (tmp_path / "etc/systemd/system/edge-agent.service").exists()
    assert not (tmp_path / "etc/sysusers.d/edge-agent.conf").exists()
    assert (tmp_path / "etc/edge-agent/edge-agent.toml").is_file()
    assert (tmp_path / "var/lib/edge-agent/edge-agent.db").read_bytes() == b"memory"
    assert system.changes() == [["systemctl", "disable", "--now", "edge-agent.service"],
                                ["systemctl", "daemon-reload"]]
    assert any("--purge" in line for line in lines)
    system.commands.clear()
    assert _uninstall(tmp_path, system)[0] == 0
    assert system.changes() == []


def test_uninstall_purge_removes_config_and_data(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    _uninstall(tmp_path, system, purge=True)
    assert not (tmp_path / "etc/edge-agent").exists()
    assert not (tmp_path / "var/lib/edge-agent").exists()


def test_prefix_root_acts_offline(tmp_path: Path) -> None:
    """An image under DIR: sysusers and systemctl with --root, nothing reloaded or started."""
    system = FakeSystem(tmp_path)
    plan = install_plan(Layout(tmp_path, live=False), system, EXECUTABLE, bind=[])
    run_plan(plan, False, lambda _: None)
    assert system.changes() == [
        ["systemd-sysusers", "--root", str(tmp_path),
         str(tmp_path / "etc/sysusers.d/edge-agent.conf")],
        ["systemctl", "--root", str(tmp_path), "enable", "edge-agent.service"],
    ]


def test_a_failing_command_is_a_domain_error(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match=r"systemctl enable --now edge-agent.service` failed "
                                          r"\(exit 1\): Job for edge-agent.service failed"):
        _install(tmp_path, FakeSystem(tmp_path, fail="enable"))


def test_preflight_says_what_is_missing() -> None:
    live = Layout()
    with pytest.raises(ServiceError, match="run it as root"):
        preflight(live, euid=1000, which=lambda _: "/usr/bin/x", booted=lambda: True)
    with pytest.raises(ServiceError, match="systemctl not found"):
        preflight(live, euid=0, which=lambda _: None, booted=lambda: True)
    with pytest.raises(ServiceError, match="systemd is not running"):
        preflight(live, euid=0, which=lambda _: "/usr/bin/x", booted=lambda: False)
    preflight(live, euid=0, which=lambda _: "/usr/bin/x", booted=lambda: True)


def _service_parser() -> argparse.ArgumentParser:
    """`edge-agent [-c FILE] service ...` as the CLI parses it."""
    parser = argparse.ArgumentParser(prog="edge-agent")
    parser.add_argument("-c", "--config", type=Path)
    cli_service.add_parsers(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_dry_run_on_a_prefix_root(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _service_parser().parse_args(["service", "install", "--dry-run", "--prefix-root", str(tmp_path)])
    assert cli_service.run(Config(), args) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and f"systemctl --root {tmp_path} enable edge-agent.service" in out
    assert _files(tmp_path) == {}


def test_cli_install_with_a_config_installs_that_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`edge-agent -c FILE service install`: FILE is the service's config (its data_dir the
    service's), and its LAN server opens the unit's network; the dry run shows both."""
    root, mine = tmp_path / "root", tmp_path / "kiosk.toml"
    mine.write_text('data_dir = "/home/me/data"\n[llm]\nserver = "http://10.0.0.5:8080/v1"\n'
                    '[turns]\ngreeting = "Welcome to the museum."\n', encoding="utf-8")
    args = _service_parser().parse_args(["-c", str(mine), "service", "install", "--dry-run",
                              "--prefix-root", str(root)])
    assert cli_service.run(Config(), args) == 0
    out = capsys.readouterr().out
    assert f'from {mine}, with data_dir = "/var/lib/edge-agent"' in out
    assert "IPAddressAllow=10.0.0.5" in out
    assert not root.exists() or _files(root) == {}
    plan = install_plan(Layout(root), FakeSystem(root), EXECUTABLE, bind=[], config_file=mine)
    run_plan(plan, False, lambda line: None)
    installed = (root / "etc/edge-agent/edge-agent.toml").read_text(encoding="utf-8")
    assert installed == mine.read_text(encoding="utf-8").replace("/home/me/data",
                                                                 "/var/lib/edge-agent")
    mine.write_text('[knowledge]\nfiles = ["venue.md"]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="write each knowledge file's absolute path"):
        install_plan(Layout(root), FakeSystem(root), EXECUTABLE, bind=[], config_file=mine)


def test_render_unit_binds_a_home_installation_read_only() -> None:
    text = (ROOT / "systemd/edge-agent.service").read_text(encoding="utf-8")
    rendered = render_unit(text, ["/home/kiosk/my venv/bin/edge-agent"],
                           [Path("/home/kiosk/my venv"), Path("/home/kiosk/50%")])
    assert '\nExecStart="/home/kiosk/my venv/bin/edge-agent" run\n' in rendered
    assert "\nProtectHome=tmpfs\n" in rendered and "\nProtectHome=yes\n" not in rendered
    assert '\nBindReadOnlyPaths="/home/kiosk/my venv" /home/kiosk/50%%\n' in rendered


def test_service_config_changes_only_data_dir() -> None:
    shipped = (ROOT / "config/edge-agent.toml").read_text(encoding="utf-8")
    text = service_config(shipped)
    changed = [(a, b) for a, b in zip(shipped.splitlines(), text.splitlines(), strict=True)
               if a != b]
    assert changed == [('data_dir = "~/.local/share/edge-agent"', 'data_dir = "/var/lib/edge-agent"')]


def test_every_template_ships_in_the_wheel_under_share() -> None:
    """`service install` outside a checkout reads <prefix>/share/edge-agent/: the wheel must
    carry every file of systemd/ and config/ there (a new template cannot be forgotten)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = {f"{target.removeprefix('share/edge-agent/')}/{Path(source).name}"
               for target, sources in project["tool"]["setuptools"]["data-files"].items()
               for source in sources}
    on_disk = {f"{p.parent.name}/{p.name}" for folder in ("systemd", "config")
               for p in (root / folder).iterdir() if p.is_file()}
    assert shipped == on_disk


def test_a_config_naming_a_lan_server_opens_the_network_to_it_only(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    unit = tmp_path / "etc/systemd/system/edge-agent.service"
    text = unit.read_text(encoding="utf-8")
    assert "\nPrivateNetwork=yes\n" in text and "IPAddressAllow" not in text  # no server: none
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        '\nserver = ""\n', '\nserver = "http://llm.venue.lan:8080/v1"\n'), encoding="utf-8")
    (tmp_path / "etc/resolv.conf").write_text("nameserver 10.0.0.1\nnameserver fe80::1%eth0\n",
                                              encoding="utf-8")
    lines: list[str] = []
    plan = install_plan(Layout(tmp_path), system, EXECUTABLE, bind=[],
                        resolve=lambda host: ["10.0.0.5"] if host == "llm.venue.lan" else [])
    assert run_plan(plan, False, lines.append) >= 1
    text = unit.read_text(encoding="utf-8")
    assert "\nPrivateNetwork=no\n" in text and "\nIPAddressDeny=any\n" in text
    assert ("\nIPAddressAllow=10.0.0.5 127.0.0.0/8 ::1/128 10.0.0.1 fe80::1\n" in text), text
    assert "\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n" in text
    assert any("IPAddressAllow=10.0.0.5" in line for line in lines), lines


def _screen_config(root: Path, on: bool, listen: str = "127.0.0.1:8780") -> None:
    """The installed config with the screen on or off, at `listen`."""
    config = root / "etc/edge-agent/edge-agent.toml"
    text = re.sub(r"(?m)^enabled = (true|false)\n# Where the page is served",
                  f"enabled = {'true' if on else 'false'}\n# Where the page is served",
                  config.read_text(encoding="utf-8"))
    text = re.sub(r'(?m)^listen = ".*"$', f'listen = "{listen}"', text)
    token = "" if listen.startswith("127.") else "0123456789abcdef"
    config.write_text(re.sub(r'(?m)^token = ".*"$', f'token = "{token}"', text), encoding="utf-8")


def test_the_screen_is_a_socket_systemd_hands_over_and_the_agent_keeps_no_network(
        tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    socket_unit = tmp_path / "etc/systemd/system" / SCREEN_SOCKET
    assert not socket_unit.exists() and SCREEN_SOCKET not in system.units
    _screen_config(tmp_path, on=True)
    system.commands.clear()
    assert _install(tmp_path, system)[0] >= 1
    text = socket_unit.read_text(encoding="utf-8")
    assert "\nListenStream=127.0.0.1:8780\n" in text and "\nFileDescriptorName=screen\n" in text
    assert "\nIPAddressAllow=localhost\n" in text and "\nService=edge-agent.service\n" in text
    service = (tmp_path / "etc/systemd/system/edge-agent.service").read_text(encoding="utf-8")
    assert "\nPrivateNetwork=yes\n" in service and "\nRestrictAddressFamilies=AF_UNIX\n" in service
    # The socket is started with the agent stopped (systemd refuses it under a running
    # service), then the agent starts again and is handed the socket.
    changes = [c[1:] for c in system.changes() if c[0] == "systemctl"]
    assert changes.index(["stop", SERVICE]) < changes.index(["restart", SCREEN_SOCKET]) \
        < changes.index(["enable", "--now", SERVICE])
    assert system.units[SCREEN_SOCKET] == (True, True) and system.active
    assert _install(tmp_path, system)[0] == 0  # a second install changes nothing

    _screen_config(tmp_path, on=True, listen="0.0.0.0:8780")  # a staff tablet too
    _install(tmp_path, system)
    text = socket_unit.read_text(encoding="utf-8")
    assert "\nListenStream=0.0.0.0:8780\n" in text and "IPAddress" not in text

    _screen_config(tmp_path, on=False)
    _install(tmp_path, system)
    assert not socket_unit.exists() and system.units[SCREEN_SOCKET] == (False, False)


def test_uninstall_takes_the_screen_socket_too(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    _screen_config(tmp_path, on=True)
    _install(tmp_path, system)
    _uninstall(tmp_path, system)
    assert not (tmp_path / "etc/systemd/system" / SCREEN_SOCKET).exists()
    assert system.units[SCREEN_SOCKET] == (False, False)


def test_a_lan_server_given_by_address_needs_no_name_server(tmp_path: Path) -> None:
    assert network_allowance(["10.0.0.5", "fd00::5"], resolve=lambda _: []) == [
        "10.0.0.5", "fd00::5"]
    assert network_allowance([]) == []
    with pytest.raises(ConfigError, match="does not resolve"):
        network_allowance(["nowhere.invalid"], resolve=lambda _: [])


def _set(text: str, section: str, key: str, value: str) -> str:
    """`text` (the shipped config) with `key` of `[section]` set to `value` (TOML)."""
    found = re.search(rf"^\[{section}\]\n(?:(?!\[).*\n)*?{key} = .*$", text, re.MULTILINE)
    assert found is not None, (section, key)
    line_start = found.group(0).rindex("\n") + 1
    return (text[:found.start() + line_start] + f"{key} = {value}" + text[found.end():])


def test_the_venue_database_and_the_house_broker_are_allowed_beside_the_lan_server(
        tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    shipped = config.read_text(encoding="utf-8")
    every = _set(_set(_set(shipped, "llm", "server", '"http://10.0.0.5:8080/v1"'), "sync", "url",
                      '"postgresql://kiosk@10.0.0.6:5432/venue?sslmode=require"'),
                 "mqtt", "url", '"mqtt://10.0.0.7:1883"')
    config.write_text(every, encoding="utf-8")
    plan = install_plan(Layout(tmp_path), system, EXECUTABLE, bind=[], resolve=lambda _: [])
    assert run_plan(plan, False, lambda line: None) >= 1
    text = (tmp_path / "etc/systemd/system/edge-agent.service").read_text(encoding="utf-8")
    assert "\nIPAddressAllow=10.0.0.5 10.0.0.6 10.0.0.7\n" in text, text
    config.write_text(_set(_set(every, "llm", "server", '""'), "mqtt", "url", '""'),
                      encoding="utf-8")
    assert run_plan(install_plan(Layout(tmp_path), system, EXECUTABLE, bind=[],
                                 resolve=lambda _: []), False, lambda line: None) >= 1
    text = (tmp_path / "etc/systemd/system/edge-agent.service").read_text(encoding="utf-8")
    assert "\nIPAddressAllow=10.0.0.6\n" in text and "\nPrivateNetwork=no\n" in text


def test_knowledge_files_in_a_home_directory_are_bound_in_read_only(tmp_path: Path) -> None:
    system = FakeSystem(tmp_path)
    _install(tmp_path, system)
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    config.write_text(config.read_text(encoding="utf-8").replace(
        "\nfiles = []\n", '\nfiles = ["/home/kiosk/venue/museum.md", "venue/faq.csv"]\n'),
        encoding="utf-8")
    assert run_plan(install_plan(Layout(tmp_path), system, EXECUTABLE, bind=[]), False,
                    lambda line: None) >= 1
    text = (tmp_path / "etc/systemd/system/edge-agent.service").read_text(encoding="utf-8")
    # The one under /home is made visible (read-only); the one beside the config is readable.
    assert "\nProtectHome=tmpfs\nBindReadOnlyPaths=/home/kiosk/venue\n" in text
