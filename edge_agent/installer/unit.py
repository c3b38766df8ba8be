"""`edge-agent service install | uninstall`: the system service, as a list of steps.

A step is data (`describe()`, `is_done()`, `apply()`): the dry run prints the very list the real
run applies, and a step already in place is reported and left alone (a second install changes
nothing). Commands go through an injected runner (tests record them); files go under `root`:
"/", a temp dir in tests, or a mounted image (`--prefix-root`: commands then act on that root
offline, `systemd-sysusers --root`, `systemctl --root ... enable`, and nothing is started).

The files installed come from the source tree (systemd/, config/: `template`).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import edge_agent
from edge_agent.config import Config
from edge_agent.config.file import load_config, parse_config
from edge_agent.config.lan import Resolve, lan_hosts, network_allowance, parse_listen
from edge_agent.config.tomlfile import read_text
from edge_agent.errors import ConfigError, ServiceError
from edge_agent.installer import kiosk
from edge_agent.installer.steps import (
    Command,
    MakeDir,
    Plan,
    Remove,
    Runner,
    Step,
    WriteFile,
)
from edge_agent.installer.templates import Verbatim, template
from edge_agent.printable import shown

SERVICE = "edge-agent.service"
SCREEN_SOCKET = "edge-agent-screen.socket"
"""The kiosk's screen's socket, which systemd listens on and hands to the service."""
USER = "edge-agent"
STATE_DIR = "/var/lib/edge-agent"
CONFIG_DIR = "/etc/edge-agent"
CONFIG_MODE = 0o640
"""The installed config, root's and readable by the service's group only: it may hold the
screen's token and a database's password."""
HOME_DIRS = (Path("/home"), Path("/root"), Path("/run/user"))
"""What the unit's ProtectHome= hides; an installation under them is bound in read-only."""


@dataclass(frozen=True)
class Layout:
    """Where things go under `root`, and whether commands act on the running system (False with
    --prefix-root: nothing is started, systemctl and systemd-sysusers work on the root)."""

    root: Path = Path("/")
    live: bool = True

    def host(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def unit(self) -> Path:
        return self.host(f"/etc/systemd/system/{SERVICE}")

    @property
    def screen_socket(self) -> Path:
        return self.host(f"/etc/systemd/system/{SCREEN_SOCKET}")

    @property
    def sysusers(self) -> Path:
        return self.host("/etc/sysusers.d/edge-agent.conf")

    def systemctl(self, *args: str) -> list[str]:
        return ["systemctl", *args] if self.live else ["systemctl", "--root", str(self.root), *args]

    def user_ids(self, name: str) -> tuple[int, int] | None:
        """uid and gid of `name` in this root's /etc/passwd (systemd-sysusers writes there)."""
        try:
            lines = self.host("/etc/passwd").read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        for line in lines:
            fields = line.split(":")
            if len(fields) >= 4 and fields[0] == name and fields[2].isdigit() and fields[3].isdigit():
                return int(fields[2]), int(fields[3])
        return None


def _systemctl_says(layout: Layout, runner: Runner, *query: str, unit: str = SERVICE) -> bool:
    result = runner(layout.systemctl(*query, "--quiet", unit))
    return result.returncode == 0


def install_plan(layout: Layout, runner: Runner, executable: Sequence[str] | None = None,
                 bind: Sequence[Path] | None = None, resolve: Resolve | None = None,
                 config_file: Path | None = None, kiosk_screen: bool | None = None,
                 kiosk_user: str | None = None) -> Plan:
    """`executable` (the command that starts edge-agent) and `bind` (directories to bind in
    read-only) default to this installation's (`find_executable`, `read_only_paths`); the
    directories of the installed config's knowledge files are bound in too. The unit
    reaches the network only when the installed config names servers on the LAN, and then only
    their addresses (`resolve`: how a host name is looked up, default the system's).

    The installed config is `config_file` when one is given (`edge-agent -c FILE service
    install`: it replaces the one installed, its data_dir set to the service's); else the one
    installed, kept as it is; else the shipped one. `kiosk_screen`, `kiosk_user`: a browser on the
    kiosk's own display (`--screen`, `--no-screen` or neither, `--screen-user`: `kiosk_plan`)."""
    executable = list(executable) if executable is not None else find_executable()
    sysusers = WriteFile(layout.sysusers, template("systemd/edge-agent.sysusers"), 0o644)
    config_dir, state_dir = layout.host(CONFIG_DIR), layout.host(STATE_DIR)
    installed = config_dir / "edge-agent.toml"
    if config_file is not None:
        text = service_config(read_text(config_file, "config file"))
        chosen = parse_config(text, str(config_file))
        _refuse_relative_knowledge(chosen, config_file)
        settings: Config | None = chosen
        config = WriteFile(installed, text, CONFIG_MODE,
                           detail=f'from {config_file}, with data_dir = "{STATE_DIR}"',
                           owner=lambda: _config_owner(layout), owner_name=f"root:{USER}")
    else:
        settings = load_config(installed) if installed.is_file() else None
        config = WriteFile(installed, service_config(template("config/edge-agent.toml")),
                           CONFIG_MODE, keep_existing=True, detail=f'data_dir = "{STATE_DIR}"',
                           owner=lambda: _config_owner(layout), owner_name=f"root:{USER}")
    allow = (network_allowance(lan_hosts(settings), resolve, layout.host("/etc/resolv.conf"))
             if settings is not None else [])
    # The venue's knowledge files are read where the config names them, a home directory too.
    reading = [f.resolve().parent for f in settings.knowledge_files] if settings else []
    bind = under_home([*(bind if bind is not None else read_only_paths()), *reading])
    unit_text = render_unit(template(f"systemd/{SERVICE}"), executable, bind, allow)
    unit = WriteFile(layout.unit, unit_text, 0o644, detail="; ".join(
        line for line in unit_text.splitlines()
        if line.startswith(("ExecStart=", "BindRead", "IPAddressAllow="))))
    sysusers_argv = ["systemd-sysusers", str(layout.sysusers)]
    if not layout.live:
        sysusers_argv[1:1] = ["--root", str(layout.root)]
    screen = _screen_steps(layout, runner, settings)
    display = kiosk.kiosk_plan(layout, runner, settings, config_file or installed,
                               kiosk_screen, kiosk_user)
    steps: list[Step] = [
        sysusers,
        Command(sysusers_argv, runner, done=lambda: layout.user_ids(USER) is not None,
                target=layout.sysusers),
        MakeDir(config_dir, 0o755),
        config,
        MakeDir(state_dir, 0o700, owner=lambda: layout.user_ids(USER), owner_name=USER),
        unit,
        *screen,
        *display.files,
    ]
    if layout.live:
        steps += [
            Command(layout.systemctl("daemon-reload"), runner,
                    after=(unit, *screen[-1:], *display.reload_after)),
            *_screen_start(layout, runner, settings, screen),
            # A running agent started from an older unit (another ExecStart=) gets the new one;
            # try-restart leaves a stopped service stopped (enable --now starts it next).
            Command(layout.systemctl("try-restart", SERVICE), runner, after=(unit, sysusers)),
            Command(layout.systemctl("enable", "--now", SERVICE), runner,
                    done=lambda: _systemctl_says(layout, runner, "is-enabled")
                    and _systemctl_says(layout, runner, "is-active")),
            *display.start,
        ]
    else:
        wants = layout.host(f"/etc/systemd/system/multi-user.target.wants/{SERVICE}")
        steps.append(Command(layout.systemctl("enable", SERVICE), runner,
                             done=lambda: wants.is_symlink()))
        if settings is not None and settings.screen.enabled:
            socket_wants = layout.host(f"/etc/systemd/system/sockets.target.wants/{SCREEN_SOCKET}")
            steps.append(Command(layout.systemctl("enable", SCREEN_SOCKET), runner,
                                 done=lambda: socket_wants.is_symlink()))
        steps += display.start
    notes = [f"edge-agent runs as user {USER} with data in {STATE_DIR}; "
             "`journalctl -u edge-agent -f` shows it, `systemctl status edge-agent` its state.",
             *display.notes, *_open_config_note(config)]
    return Plan(steps, notes)


def _config_owner(layout: Layout) -> tuple[int, int] | None:
    ids = layout.user_ids(USER)
    return None if ids is None else (0, ids[1])


def _open_config_note(config: WriteFile) -> list[str]:
    """A kept config that every user may read: it is the administrator's, left as it is, but
    it may hold secrets (the screen's token, a database's password)."""
    try:
        readable_by_all = config.kept() and config.path.stat().st_mode & stat.S_IROTH
    except OSError:
        return []
    if not readable_by_all:
        return []
    return [f"{config.path} is readable by every user and may hold secrets ([screen] token, "
            f"[sync] url): `chgrp {USER} {config.path} && chmod 640 {config.path}` keeps it "
            "to root and the service."]


def _screen_steps(layout: Layout, runner: Runner, settings: Config | None) -> list[Step]:
    """The screen's socket unit written (`[screen] enabled`), or disabled and removed (off, and
    an earlier install wrote it)."""
    if settings is not None and settings.screen.enabled:
        return [WriteFile(layout.screen_socket, render_screen_socket(
            template(f"systemd/{SCREEN_SOCKET}"), settings), 0o644,
            detail=f"ListenStream={parse_listen(settings.screen.listen, settings.source).shown}")]
    if not layout.screen_socket.exists():
        return []
    return [Command(layout.systemctl("disable", *(["--now"] if layout.live else []), SCREEN_SOCKET),
                    runner), Remove(layout.screen_socket)]


def _screen_start(layout: Layout, runner: Runner, settings: Config | None,
                  screen: list[Step]) -> list[Step]:
    """With the screen on: its socket enabled and listening before the service starts, so the
    agent gets it."""
    if settings is None or not settings.screen.enabled:
        return []
    return [
        # systemd refuses to start a socket whose service runs ("already active, refusing"):
        # a new or changed socket is started with the agent stopped; it starts again after.
        Command(layout.systemctl("stop", SERVICE), runner, after=tuple(screen)),
        Command(layout.systemctl("restart", SCREEN_SOCKET), runner, after=tuple(screen)),
        Command(layout.systemctl("enable", "--now", SCREEN_SOCKET), runner,
                done=lambda: _systemctl_says(layout, runner, "is-enabled", unit=SCREEN_SOCKET)
                and _systemctl_says(layout, runner, "is-active", unit=SCREEN_SOCKET)),
    ]


def render_screen_socket(text: str, settings: Config) -> str:
    """The shipped socket unit listening at `[screen] listen`; open to other machines when that
    is not loopback (the config then has a token: `config.file` refuses it without one)."""
    address = parse_listen(settings.screen.listen, settings.source).numeric
    text = re.sub(r"^ListenStream=.*$", Verbatim(f"ListenStream={address.shown}"), text,
                  count=1, flags=re.M)
    if not address.loopback:
        text = re.sub(r"^IPAddress(Deny|Allow)=.*\n", "", text, flags=re.M)
    return text


def _refuse_relative_knowledge(settings: Config, config_file: Path) -> None:
    relative = [name for name in settings.knowledge.files
                if not Path(name).expanduser().is_absolute()]
    if relative:
        raise ConfigError(str(config_file), "knowledge.files", f"names {shown(relative[0], 80)!r}, "
                          f"relative to {config_file.parent}; installed in {CONFIG_DIR} it would "
                          "name another file: write each knowledge file's absolute path")


def uninstall_plan(layout: Layout, runner: Runner, purge: bool) -> Plan:
    unit = Remove(layout.unit)
    steps: list[Step] = [
        Command(layout.systemctl("disable", *(["--now"] if layout.live else []), SERVICE),
                runner, done=lambda: not layout.unit.exists() or not (
                    _systemctl_says(layout, runner, "is-enabled")
                    or (layout.live and _systemctl_says(layout, runner, "is-active")))),
        unit,
        Remove(layout.sysusers),
    ]
    if layout.screen_socket.exists():
        steps[1:1] = [Command(layout.systemctl("disable", *(["--now"] if layout.live else []),
                                               SCREEN_SOCKET), runner)]
        steps.append(Remove(layout.screen_socket))
    display = kiosk.uninstall_plan(layout, runner)
    steps[0:0] = display.files
    if layout.live:
        steps.append(Command(layout.systemctl("daemon-reload"), runner,
                             after=(unit, *display.reload_after)))
    config_dir, state_dir = layout.host(CONFIG_DIR), layout.host(STATE_DIR)
    if purge:
        steps += [Remove(layout.host(f"/etc/systemd/system/{SERVICE}.d"), tree=True),
                  Remove(config_dir, tree=True), Remove(state_dir, tree=True)]
        notes = []
    else:
        notes = [f"kept {config_dir} and {state_dir} (models, the memory database): "
                 "`edge-agent service uninstall --purge` removes them."]
    notes.append(f"the user {USER} is kept (a system user's id must not go to another user "
                 f"while files may carry it); `userdel {USER}` removes it.")
    return Plan(steps, notes)


def preflight(layout: Layout, euid: int | None = None,
              which: Callable[[str], str | None] = shutil.which,
              booted: Callable[[], bool] = lambda: Path("/run/systemd/system").is_dir()) -> None:
    """What makes a real (not dry) run impossible, found before any step changes anything."""
    euid = os.geteuid() if euid is None else euid
    if layout.root == Path("/") and euid != 0:
        raise ServiceError("permission denied: run it as root (sudo edge-agent service ...), "
                           "or see every step first with --dry-run")
    for tool in ("systemctl", "systemd-sysusers"):
        if which(tool) is None:
            raise ServiceError(f"{tool} not found: this needs systemd (Debian, Raspberry Pi OS)")
    if layout.live and not booted():
        raise ServiceError("systemd is not running on this machine (no /run/systemd/system): "
                           "--prefix-root DIR prepares an image instead")


def find_executable() -> list[str]:
    """The command line that starts this edge-agent: the script it was run as, else the one on
    PATH, else this interpreter with -m edge_agent (`python -m edge_agent service install`)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == "edge-agent" and script.is_file():
        return [str(script.resolve())]
    found = shutil.which("edge-agent")
    # A pyenv shim is a shell script that needs the user's environment: not for a service.
    if found and "/shims/" not in found:
        return [str(Path(found).resolve())]
    return [str(Path(sys.executable).absolute()), "-m", "edge_agent"]


def read_only_paths() -> list[Path]:
    """The installation's directories under /home, /root or /run/user (hidden by the unit's
    ProtectHome=): the virtual environment, the interpreter it came from, an editable checkout.
    Outermost first, no path inside another."""
    package_root = Path(edge_agent.__file__).resolve().parent.parent
    return under_home([Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), package_root])


def under_home(paths: Iterable[Path]) -> list[Path]:
    """Those of `paths` under /home, /root or /run/user, outermost first, none inside another."""
    found = sorted({p for p in paths if any(p.is_relative_to(h) for h in HOME_DIRS)})
    kept: list[Path] = []
    for path in found:
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _unit_word(text: str) -> str:
    # systemd expands %-specifiers in both settings and quotes words with spaces.
    text = text.replace("%", "%%")
    return f'"{text}"' if any(c.isspace() or c in "\"'\\" for c in text) else text


def render_unit(text: str, executable: Sequence[str], bind: Sequence[Path] = (),
                allow: Sequence[str] = ()) -> str:
    """The shipped unit with ExecStart= naming `executable` (`run` appended). An installation
    in a home directory is made visible read-only: ProtectHome=tmpfs (an empty /home, /root and
    /run/user) with just those directories bound in, instead of ProtectHome=yes. With `allow`
    (addresses: the venue's servers, `lan.network_allowance`), the network is opened to those
    addresses only: no PrivateNetwork=, IP sockets, IPAddressDeny=any with IPAddressAllow=."""
    exec_line = "ExecStart=" + " ".join(_unit_word(part) for part in [*executable, "run"])
    text, count = re.subn(r"^ExecStart=.*$", lambda _: exec_line, text, count=1, flags=re.M)
    if count != 1:
        raise ConfigError(f"systemd/{SERVICE}", "ExecStart", "missing from the unit template")
    if bind:
        paths = " ".join(_unit_word(str(p)) for p in bind)
        text = re.sub(r"^ProtectHome=.*$", lambda _: "ProtectHome=tmpfs\n"
                      f"BindReadOnlyPaths={paths}", text, count=1, flags=re.M)
    if allow:
        relaxed = {
            "PrivateNetwork": "# Opened by `edge-agent service install` for the servers the "
                              "config names, and\n# only to them: run it again after changing "
                              "them.\nPrivateNetwork=no",
            "IPAddressDeny": f"IPAddressDeny=any\nIPAddressAllow={' '.join(allow)}",
            "RestrictAddressFamilies": "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"}
        for key, line in relaxed.items():
            # A function, not a template: the line holds no backreferences.
            text, count = re.subn(rf"^{key}=.*$", Verbatim(line), text, count=1, flags=re.M)
            if count != 1:
                raise ConfigError(f"systemd/{SERVICE}", key, "missing from the unit template")
    return text


def service_config(text: str) -> str:
    """The shipped config with data_dir set for the service; every comment stays."""
    line = f'data_dir = "{STATE_DIR}"'
    text, count = re.subn(r"^data_dir\s*=.*$", lambda _: line, text, count=1, flags=re.M)
    return text if count else f"{line}\n{text}"
