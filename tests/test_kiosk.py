"""The kiosk's screen on its own display (`service install --screen`): Chromium in kiosk mode
under cage, as systemd/edge-agent-kiosk.service.

The unit as installed is checked by `systemd-analyze verify`; install, update and removal run
into a temporary root with the runner of tests/test_service_install.py. The unit's own command
line is run for real in tests/test_kiosk_browser.py."""

from __future__ import annotations

import argparse
import html.parser
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from edge_agent.cli import service as cli_service
from edge_agent.config import Config
from edge_agent.config.file import parse_config
from edge_agent.errors import ConfigError, ServiceError
from edge_agent.installer.kiosk import (
    CREDENTIAL,
    KIOSK,
    KIOSK_USER,
    redirect_page,
    render_kiosk_unit,
    screen_url,
)
from edge_agent.installer.steps import CommandResult, run_plan
from edge_agent.installer.unit import SERVICE, Layout, install_plan, uninstall_plan
from tests.test_service_install import EXECUTABLE, FakeSystem, _screen_config

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = (ROOT / "systemd" / KIOSK).read_text(encoding="utf-8")
LAN_TOKEN = "0123456789abcdef"
"""The token `_screen_config` writes for an address other than loopback."""


class KioskSystem(FakeSystem):
    """FakeSystem, whose systemd-sysusers also makes the kiosk's user from its file."""

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if argv[0] == "systemd-sysusers" and argv[-1].endswith(f"{KIOSK_USER}.conf"):
            self.commands.append(list(argv))
            with (self.root / "etc" / "passwd").open("a", encoding="utf-8") as out:
                out.write(f"{KIOSK_USER}:x:{os.getuid()}:{os.getgid()}::/var/lib/{KIOSK_USER}:"
                          "/usr/sbin/nologin\n")
            return CommandResult(0, "")
        return super().__call__(argv)


def _programs(root: Path, *names: str) -> None:
    """Stand-ins for the programs the kiosk needs, where apt puts them under `root`."""
    for name in names:
        path = root / "usr/bin" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n", encoding="utf-8")
        path.chmod(0o755)


def _run(root: Path, system: FakeSystem, screen: bool | None = None, user: str | None = None,
         live: bool = True, dry_run: bool = False) -> tuple[int, list[str]]:
    lines: list[str] = []
    plan = install_plan(Layout(root, live), system, EXECUTABLE, bind=[], kiosk_screen=screen,
                        kiosk_user=user)
    return run_plan(plan, dry_run, lines.append), lines


def _screen_on(root: Path, system: FakeSystem, listen: str = "127.0.0.1:8780") -> None:
    """The service installed, its config's screen on, the kiosk's programs there."""
    _run(root, system)
    _screen_config(root, on=True, listen=listen)
    _programs(root, "cage", "Xwayland", "chromium")


def _unit(root: Path) -> Path:
    return root / "etc/systemd/system" / KIOSK


def _exec_start(text: str) -> list[str]:
    found = re.search(r"^ExecStart=(.*)$", text, flags=re.M)
    assert found, text
    return shlex.split(found.group(1))


def test_install_screen_puts_the_kiosk_after_the_agent_and_keeps_it(tmp_path: Path) -> None:
    system = KioskSystem(tmp_path)
    _screen_on(tmp_path, system)
    _run(tmp_path, system)  # the screen's socket, as `service install` puts it
    agent = (tmp_path / "etc/systemd/system" / SERVICE).read_text(encoding="utf-8")
    system.commands.clear()
    changed, lines = _run(tmp_path, system, screen=True)
    assert changed >= 5

    text = _unit(tmp_path).read_text(encoding="utf-8")
    assert (_unit(tmp_path).stat().st_mode & 0o7777) == 0o644
    assert f"\nUser={KIOSK_USER}\n" in text and "\nLoadCredential=" not in text
    argv = _exec_start(text)
    assert argv[:3] == ["/usr/bin/cage", "--", "/usr/bin/chromium"]
    assert argv[-1] == "http://127.0.0.1:8780/" and "--kiosk" in argv
    assert (tmp_path / f"etc/sysusers.d/{KIOSK_USER}.conf").read_text(encoding="utf-8") == (
        ROOT / f"systemd/{KIOSK_USER}.sysusers").read_text(encoding="utf-8")
    # The agent's unit (and so its sandbox's score) is the same with the kiosk beside it.
    assert (tmp_path / "etc/systemd/system" / SERVICE).read_text(encoding="utf-8") == agent
    changes = [c[1:] for c in system.changes() if c[0] == "systemctl"]
    assert changes.index(["daemon-reload"]) < changes.index(["enable", "--now", KIOSK])
    steps = [line.split(": ")[0] for line in lines]  # the agent's is already done: [ok]
    assert steps.index(f"  [ok]    run systemctl enable --now {SERVICE}") \
        < steps.index(f"  [done]  run systemctl enable --now {KIOSK}")
    assert ["systemd-sysusers", str(tmp_path / f"etc/sysusers.d/{KIOSK_USER}.conf")] \
        in system.changes()
    assert system.units[KIOSK] == (True, True)
    assert any(f"as {KIOSK_USER}, showing http://127.0.0.1:8780/" in line for line in lines)

    system.commands.clear()
    assert _run(tmp_path, system, screen=True)[0] == 0  # a second run changes nothing
    assert _run(tmp_path, system)[0] == 0  # nor one without --screen: the kiosk is kept
    assert system.changes() == [] and _unit(tmp_path).read_text(encoding="utf-8") == text

    # A new port in the config: a run without --screen follows it and restarts the kiosk.
    _screen_config(tmp_path, on=True, listen="127.0.0.1:8781")
    system.commands.clear()
    _run(tmp_path, system)
    assert _exec_start(_unit(tmp_path).read_text(encoding="utf-8"))[-1] == \
        "http://127.0.0.1:8781/"
    assert ["systemctl", "try-restart", KIOSK] in system.changes()


def test_the_token_is_on_no_command_line_only_in_a_page_for_the_kiosk(tmp_path: Path) -> None:
    """A screen on every address (a staff tablet too) has a token; the kiosk reaches it on
    loopback, and the token is in no file or line anyone but root and the kiosk can read."""
    system = KioskSystem(tmp_path)
    _screen_on(tmp_path, system, listen="0.0.0.0:8780")
    _, dry = _run(tmp_path, system, screen=True, dry_run=True)
    _, lines = _run(tmp_path, system, screen=True)
    text = _unit(tmp_path).read_text(encoding="utf-8")
    assert LAN_TOKEN not in text and not any(LAN_TOKEN in line for line in [*dry, *lines])
    assert "\nLoadCredential=screen.html:/etc/edge-agent/kiosk-screen.html\n" in text
    assert _exec_start(text)[-1] == f"file://%d/{CREDENTIAL}"
    page = tmp_path / "etc/edge-agent/kiosk-screen.html"
    assert (page.stat().st_mode & 0o7777) == 0o600
    assert _redirect_target(page.read_text(encoding="utf-8")) == (
        "http://127.0.0.1:8780/", LAN_TOKEN)

    _screen_config(tmp_path, on=True, listen="127.0.0.1:8780")  # no token: the page goes
    _run(tmp_path, system)
    assert not page.exists() and "\nLoadCredential=" not in _unit(tmp_path).read_text(
        encoding="utf-8")


class _Refresh(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.content = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "meta" and found.get("http-equiv") == "refresh":
            self.content = found.get("content") or ""


def _redirect_target(page: str) -> tuple[str, str]:
    """Where the page sends the browser, and the token the screen's page reads after "#"."""
    parser = _Refresh()
    parser.feed(page)
    delay, _, url = parser.content.partition("; url=")
    assert delay == "0", parser.content
    parts = urlsplit(url)
    return url.split("#")[0], parse_qs(parts.fragment)["token"][0]


@pytest.mark.parametrize("token", ["a+b&c<d>\"e'f%20;g=h", LAN_TOKEN])
def test_the_redirect_page_hands_the_token_over_as_it_is(token: str) -> None:
    page = redirect_page("http://127.0.0.1:8780/", token)
    assert _redirect_target(page) == ("http://127.0.0.1:8780/", token)
    assert "<script" not in page and "<d>" not in page


@pytest.mark.parametrize(("listen", "url"), [("127.0.0.1:8780", "http://127.0.0.1:8780/"),
                                             ("localhost:9000", "http://127.0.0.1:9000/"),
                                             ("[::1]:8780", "http://[::1]:8780/"),
                                             ("0.0.0.0:8780", "http://127.0.0.1:8780/"),
                                             ("[::]:8780", "http://[::1]:8780/")])
def test_the_kiosk_opens_the_page_on_loopback(listen: str, url: str) -> None:
    settings = parse_config(f'[screen]\nenabled = true\nlisten = "{listen}"\n'
                            f'token = "{LAN_TOKEN}"\n', "k.toml")
    assert screen_url(settings) == url


def test_what_cannot_be_done_is_said(tmp_path: Path) -> None:
    system = KioskSystem(tmp_path)
    _run(tmp_path, system)
    config = tmp_path / "etc/edge-agent/edge-agent.toml"
    with pytest.raises(ConfigError, match=rf"{config}: screen.enabled: is false.*set \[screen\] "
                                          r"enabled = true there"):
        _run(tmp_path, system, screen=True)
    _screen_config(tmp_path, on=True)
    _programs(tmp_path, "chromium")
    with pytest.raises(ServiceError, match=r"needs cage, Xwayland, not found in .*: sudo apt "
                                           r"install cage xwayland chromium"):
        _run(tmp_path, system, screen=True)
    _programs(tmp_path, "cage", "Xwayland")
    with pytest.raises(ServiceError, match="--screen-user pi: no such user"):
        _run(tmp_path, system, screen=True, user="pi")
    _screen_config(tmp_path, on=True, listen="192.168.1.5:8780")
    with pytest.raises(ConfigError, match=r"screen.listen: is 192.168.1.5:8780, which the "
                                          r"kiosk's own browser does not reach.*0.0.0.0:8780"):
        _run(tmp_path, system, screen=True)
    assert not _unit(tmp_path).exists()


def test_a_desktop_user_and_older_raspberry_pi_os_chromium(tmp_path: Path) -> None:
    system = KioskSystem(tmp_path)
    _run(tmp_path, system)
    _screen_config(tmp_path, on=True)
    _programs(tmp_path, "cage", "Xwayland", "chromium-browser")
    with (tmp_path / "etc/passwd").open("a", encoding="utf-8") as out:
        out.write("pi:x:1000:1000::/home/pi:/bin/bash\n")
    (tmp_path / "etc/systemd/system/display-manager.service").symlink_to(
        "/lib/systemd/system/lightdm.service")
    _, lines = _run(tmp_path, system, screen=True, user="pi")
    text = _unit(tmp_path).read_text(encoding="utf-8")
    assert "\nUser=pi\n" in text and _exec_start(text)[2] == "/usr/bin/chromium-browser"
    assert not (tmp_path / f"etc/sysusers.d/{KIOSK_USER}.conf").exists()
    assert any("display-manager.service" in line and "boot to the console" in line
               for line in lines)
    _programs(tmp_path, "chromium")  # installed later: a run without --screen keeps the user
    _run(tmp_path, system)
    text = _unit(tmp_path).read_text(encoding="utf-8")
    assert "\nUser=pi\n" in text and _exec_start(text)[2] == "/usr/bin/chromium"
    assert _run(tmp_path, system, screen=True)[0] == 0  # so does --screen alone
    for name in ("chromium", "chromium-browser"):
        (tmp_path / "usr/bin" / name).unlink()
    with pytest.raises(ServiceError, match=r"needs chromium or chromium-browser.*`sudo "
                                           r"edge-agent service install --no-screen`"):
        _run(tmp_path, system)  # a kept kiosk: the way out is named too


def test_no_screen_a_screen_turned_off_and_uninstall_take_the_kiosk_away(tmp_path: Path) -> None:
    system = KioskSystem(tmp_path)
    _screen_on(tmp_path, system, listen="0.0.0.0:8780")
    _run(tmp_path, system, screen=True)
    page = tmp_path / "etc/edge-agent/kiosk-screen.html"
    assert _unit(tmp_path).exists() and page.exists()
    system.commands.clear()
    _run(tmp_path, system, screen=False)
    assert not _unit(tmp_path).exists() and not page.exists()
    assert system.units[KIOSK] == (False, False)
    assert system.changes().index(["systemctl", "disable", "--now", KIOSK]) \
        < system.changes().index(["systemctl", "daemon-reload"])
    assert _run(tmp_path, system, screen=False)[0] == 0

    _run(tmp_path, system, screen=True)
    _screen_config(tmp_path, on=False)  # nothing to show: the kiosk goes with the socket
    _run(tmp_path, system)
    assert not _unit(tmp_path).exists() and system.units[KIOSK] == (False, False)

    _screen_config(tmp_path, on=True)
    _run(tmp_path, system, screen=True)
    system.commands.clear()
    run_plan(uninstall_plan(Layout(tmp_path), system, purge=False), False, lambda _: None)
    assert not _unit(tmp_path).exists()
    assert not (tmp_path / f"etc/sysusers.d/{KIOSK_USER}.conf").exists()
    assert system.units[KIOSK] == (False, False) and not system.enabled
    assert ["systemctl", "daemon-reload"] in system.changes()


def test_prefix_root_enables_the_kiosk_offline(tmp_path: Path) -> None:
    system = KioskSystem(tmp_path)
    _screen_on(tmp_path, system)
    system.commands.clear()
    _run(tmp_path, system, screen=True, live=False)
    assert system.changes() == [
        ["systemd-sysusers", "--root", str(tmp_path),
         str(tmp_path / f"etc/sysusers.d/{KIOSK_USER}.conf")],
        ["systemctl", "--root", str(tmp_path), "enable", SERVICE],
        ["systemctl", "--root", str(tmp_path), "enable", "edge-agent-screen.socket"],
        ["systemctl", "--root", str(tmp_path), "enable", KIOSK],
    ]


def test_cli_screen_user_needs_screen(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="edge-agent")
    parser.add_argument("-c", "--config", type=Path)
    cli_service.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["service", "install", "--dry-run", "--prefix-root", str(tmp_path),
                              "--screen-user", "pi"])
    with pytest.raises(ServiceError, match="give it with --screen"):
        cli_service.run(Config(), args)
    args = parser.parse_args(["service", "install", "--dry-run", "--prefix-root", str(tmp_path),
                              "--screen"])
    with pytest.raises(ConfigError, match=r"screen\.enabled: is false"):
        cli_service.run(Config(), args)  # the shipped config, which an install would write


# --------------------------------------------------------------------------- systemd's view

needs_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                   reason="systemd-analyze is not installed (Debian: apt-get "
                                          "install systemd)")


@needs_analyze
@pytest.mark.parametrize("token", [False, True], ids=["plain", "token"])
def test_verify_accepts_the_kiosk_unit_beside_the_agent(tmp_path: Path, token: bool) -> None:
    units = tmp_path / "units"
    units.mkdir()
    cage = tmp_path / "bin" / "cage"  # what ExecStart= runs must exist for verify
    cage.parent.mkdir()
    cage.write_text("#!/bin/sh\n", encoding="utf-8")
    cage.chmod(0o755)
    agent = (ROOT / "systemd" / SERVICE).read_text(encoding="utf-8")
    (units / SERVICE).write_text(re.sub(r"(?m)^ExecStart=.*$", f"ExecStart={cage} run", agent),
                                 encoding="utf-8")
    unit = units / KIOSK
    unit.write_text(render_kiosk_unit(TEMPLATE, str(cage), "/usr/bin/chromium", KIOSK_USER,
                                      "http://127.0.0.1:8780/", with_token=token),
                    encoding="utf-8")
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                            capture_output=True, text=True, check=False, timeout=120)
    ours = [line for line in (result.stdout + result.stderr).splitlines()
            if KIOSK in line or str(unit) in line]
    assert result.returncode == 0 and not ours, result.stdout + result.stderr
    settings = _settings(unit.read_text(encoding="utf-8"))
    for key, value in (("Restart", "always"), ("PAMName", "login"), ("TTYPath", "/dev/tty1"),
                       ("Conflicts", "getty@tty1.service"), ("Wants", "edge-agent.service"),
                       ("StartLimitIntervalSec", "0")):
        assert value in settings[key], (key, settings[key])
    assert "edge-agent.service" in " ".join(settings["After"])  # once the agent is READY
    assert 0 < float(settings["RestartSec"][0]) <= 10


def _settings(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, equals, value = line.partition("=")
        if equals and not line.startswith("#"):
            found.setdefault(key, []).extend(value.split())
    return found
