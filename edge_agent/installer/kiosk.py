"""The kiosk's screen on the machine's own display (`service install --screen`): Chromium in
kiosk mode under cage on tty1, as systemd/edge-agent-kiosk.service, showing the page the agent
serves.

The browser always opens the page on this machine's loopback (the screen's socket listens
there, or on every address). With a `[screen] token`, the address that carries it is never put
on a command line, which any user can read (`ps`, `systemctl show`): the unit hands the browser
a small page, readable by its user only (`LoadCredential=`), that sends it on to the address.
"""

from __future__ import annotations

import html
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol
from urllib.parse import urlencode

from edge_agent.config import Config
from edge_agent.config.lan import parse_listen
from edge_agent.errors import ConfigError, ServiceError
from edge_agent.installer.steps import Command, Remove, Runner, Step, WriteFile
from edge_agent.installer.templates import Verbatim, template
from edge_agent.printable import shown

KIOSK = "edge-agent-kiosk.service"
KIOSK_USER = "edge-agent-kiosk"
"""The kiosk's user when `--screen-user` names none (systemd/edge-agent-kiosk.sysusers)."""
PAGE = "/etc/edge-agent/kiosk-screen.html"
"""The page that sends the browser on to the screen's address with its token (mode 0600)."""
CREDENTIAL = "screen.html"
"""That page's name in the service's credentials directory (%d)."""
BROWSERS = ("chromium", "chromium-browser")
"""Debian's and newer Raspberry Pi OS's name first; older Raspberry Pi OS's second."""
BIN_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")
FIX = "sudo apt install cage xwayland chromium (older Raspberry Pi OS: chromium-browser)"


class KioskLayout(Protocol):
    """What the kiosk's steps use of `unit.Layout` (which is built on them)."""

    @property
    def root(self) -> Path: ...
    @property
    def live(self) -> bool: ...
    def host(self, path: str) -> Path: ...
    def systemctl(self, *args: str) -> list[str]: ...
    def user_ids(self, name: str) -> tuple[int, int] | None: ...


@dataclass
class KioskPlan:
    """The kiosk's steps, where `install_plan` puts them: `files` before systemd's reload
    (`reload_after`: what makes the reload needed), `start` after the agent is enabled."""

    files: list[Step] = field(default_factory=list)
    reload_after: list[Step] = field(default_factory=list)
    start: list[Step] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def kiosk_plan(layout: KioskLayout, runner: Runner, settings: Config | None, config_path: Path,
               want: bool | None, user: str | None) -> KioskPlan:
    """`want`: True (`--screen`: install or update it), False (`--no-screen`: take it away),
    None (keep what is there: an installed kiosk follows the config, its user kept, and goes
    when the config turns the screen off). `user`: `--screen-user`; `config_path`: the config
    the service will read (named in errors)."""
    unit = layout.host(f"/etc/systemd/system/{KIOSK}")
    enabled = settings is not None and settings.screen.enabled
    kept = want is None and unit.exists()
    if kept:
        want = enabled
    if unit.exists():
        user = user or installed_user(unit)  # until --screen-user names another
    if want is True and not enabled:
        raise ConfigError(str(config_path), "screen.enabled",
                          "is false, and `service install --screen` shows the page the agent "
                          "serves only when it is true: set [screen] enabled = true there and "
                          "run `sudo edge-agent service install --screen` again")
    if not want:
        return _removal(layout, runner) if unit.exists() else KioskPlan()
    assert settings is not None
    try:
        return _installation(layout, runner, settings, user)
    except ServiceError as exc:
        if not kept:
            raise
        raise ServiceError(f"{exc} (or, for no browser on this display, `sudo edge-agent "
                           "service install --no-screen`)") from None


def _installation(layout: KioskLayout, runner: Runner, settings: Config,
                  user: str | None) -> KioskPlan:
    cage, chromium = find_programs(layout)
    plan = KioskPlan()
    if user is None or user == KIOSK_USER:
        user = KIOSK_USER
        sysusers = layout.host(f"/etc/sysusers.d/{KIOSK_USER}.conf")
        argv = ["systemd-sysusers", *(["--root", str(layout.root)] if not layout.live else []),
                str(sysusers)]
        plan.files += [WriteFile(sysusers, template(f"systemd/{KIOSK_USER}.sysusers"), 0o644),
                       Command(argv, runner, done=lambda: layout.user_ids(KIOSK_USER) is not None,
                               target=sysusers)]
    elif layout.user_ids(user) is None:
        raise ServiceError(f"--screen-user {shown(user, 40)}: no such user in "
                           f"{layout.host('/etc/passwd')}; name the kiosk's desktop user, or "
                           f"leave --screen-user out for a user of its own ({KIOSK_USER})")
    url = screen_url(settings)
    page = layout.host(PAGE)
    pages: list[Step] = []
    if settings.screen.token:
        pages.append(WriteFile(page, redirect_page(url, settings.screen.token), 0o600,
                               detail=f"sends the browser on to {url}#token=..."))
    elif page.exists():  # the token is gone from the config: so is the page that held it
        pages.append(Remove(page))
    text = render_kiosk_unit(template(f"systemd/{KIOSK}"), cage, chromium, user, url,
                             with_token=bool(settings.screen.token))
    unit = WriteFile(layout.host(f"/etc/systemd/system/{KIOSK}"), text, 0o644, detail="; ".join(
        line for line in text.splitlines() if line.startswith(("User=", "LoadCredential="))))
    plan.files += [*pages, unit]
    plan.reload_after = [unit]
    if layout.live:
        plan.start = [
            # A running kiosk started from an older unit or page shows the new one.
            Command(layout.systemctl("try-restart", KIOSK), runner, after=(unit, *pages)),
            Command(layout.systemctl("enable", "--now", KIOSK), runner,
                    done=lambda: _says(layout, runner, "is-enabled")
                    and _says(layout, runner, "is-active"))]
    else:
        wants = layout.host(f"/etc/systemd/system/multi-user.target.wants/{KIOSK}")
        plan.start = [Command(layout.systemctl("enable", KIOSK), runner,
                              done=lambda: wants.is_symlink())]
    plan.notes.append(f"the kiosk's screen: Chromium under cage on tty1 as {user}, showing {url} "
                      f"(`journalctl -u {KIOSK.removesuffix('.service')}`); "
                      "`edge-agent service install --no-screen` takes it away.")
    # A link that points into the image (--prefix-root) does not resolve here: is_symlink().
    if layout.host("/etc/systemd/system/display-manager.service").is_symlink():
        plan.notes.append("a desktop (display-manager.service) also starts on this display: "
                          "boot to the console instead (raspi-config: System Options, Boot / "
                          "Auto Login, Console; or `systemctl set-default multi-user.target`).")
    return plan


def _removal(layout: KioskLayout, runner: Runner) -> KioskPlan:
    unit = Remove(layout.host(f"/etc/systemd/system/{KIOSK}"))
    disable = Command(layout.systemctl("disable", *(["--now"] if layout.live else []), KIOSK),
                      runner)
    return KioskPlan(files=[disable, unit, Remove(layout.host(PAGE))], reload_after=[unit])


def uninstall_plan(layout: KioskLayout, runner: Runner) -> KioskPlan:
    """The kiosk taken away with the service (its user is kept, as the agent's is)."""
    unit = layout.host(f"/etc/systemd/system/{KIOSK}")
    plan = _removal(layout, runner) if unit.exists() else KioskPlan()
    left = [] if unit.exists() else [layout.host(PAGE)]
    plan.files += [Remove(path) for path in [*left, layout.host(f"/etc/sysusers.d/{KIOSK_USER}.conf")]
                   if path.exists()]
    return plan


def _says(layout: KioskLayout, runner: Runner, query: str) -> bool:
    return runner(layout.systemctl(query, "--quiet", KIOSK)).returncode == 0


def find_programs(layout: KioskLayout) -> tuple[str, str]:
    """Where cage and Chromium are on this system (under `layout.root`), as the unit names
    them; ServiceError naming what is missing and the packages that bring it. Xwayland is
    checked too: cage 0.1.4 refuses to start without it."""
    def found(name: str) -> str | None:
        for directory in BIN_DIRS:
            if layout.host(f"{directory}/{name}").is_file():
                return f"{directory}/{name}"
        return None

    cage, xwayland = found("cage"), found("Xwayland")
    chromium = next((path for path in map(found, BROWSERS) if path is not None), None)
    missing = [name for name, path in (("cage", cage), ("Xwayland", xwayland),
                                       (" or ".join(BROWSERS), chromium)) if path is None]
    if missing:
        raise ServiceError(f"the kiosk's screen needs {', '.join(missing)}, not found in "
                           f"{', '.join(str(layout.host(d)) for d in BIN_DIRS)}: {FIX}")
    assert cage is not None and chromium is not None
    return cage, chromium


def screen_url(settings: Config) -> str:
    """The page's address on this machine's loopback, without the token. A socket on every
    address ("0.0.0.0", "::") is reached there too; one on another single address is not, and
    is refused (ConfigError)."""
    address = parse_listen(settings.screen.listen, settings.source).numeric
    host = address.host
    if not address.loopback:
        ip = ipaddress.ip_address(host)
        if not ip.is_unspecified:
            raise ConfigError(settings.source, "screen.listen",
                              f"is {address.shown}, which the kiosk's own browser does not reach "
                              "on this machine's loopback: listen on "
                              f"{'[::]' if ip.version == 6 else '0.0.0.0'}:{address.port} "
                              "(every address: the kiosk and the LAN's tablets, with the token) "
                              f"or 127.0.0.1:{address.port} (the kiosk alone)")
        host = "::1" if ip.version == 6 else "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{address.port}/"


def redirect_page(url: str, token: str) -> str:
    """A page that sends the browser on to `url` with `token` after "#" (where the screen's
    page reads it, as URLSearchParams: so encoded), without script."""
    target = html.escape(f"{url}#{urlencode({'token': token})}", quote=True)
    return ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<title>edge-agent</title>\n<meta http-equiv="refresh" content="0; url={target}">\n'
            "</head></html>\n")


def render_kiosk_unit(text: str, cage: str, chromium: str, user: str, url: str,
                      with_token: bool) -> str:
    """The shipped unit with `cage` and `chromium` (absolute paths), User= `user`, and the page:
    `url` itself, or (`with_token`) the credential page that holds the token."""
    found = re.search(r"^ExecStart=(.*)$", text, flags=re.M)
    words = found.group(1).split() if found else []
    if "--" not in words or words.index("--") + 1 >= len(words) - 1:
        raise ConfigError(f"systemd/{KIOSK}", "ExecStart", "is not `cage -- chromium ... URL`")
    browser = words.index("--") + 1
    words[0], words[browser] = _word(cage), _word(chromium)
    credential = ""
    if with_token:  # %d: the credentials directory, which systemd fills in
        words[-1], credential = f"file://%d/{CREDENTIAL}", f"LoadCredential={CREDENTIAL}:{PAGE}\n"
    else:
        words[-1] = _word(url)
    text = re.sub(r"^ExecStart=.*$", Verbatim(f"{credential}ExecStart={' '.join(words)}"), text,
                  count=1, flags=re.M)
    if not re.search(r"^User=", text, flags=re.M):
        raise ConfigError(f"systemd/{KIOSK}", "User", "missing from the unit template")
    return re.sub(r"^User=.*$", Verbatim(f"User={_word(user)}"), text, count=1, flags=re.M)


def installed_user(unit: Path) -> str | None:
    """User= of an installed kiosk unit (kept when `service install` runs without --screen)."""
    try:
        found = re.search(r"^User=(\S+)\s*$", unit.read_text(encoding="utf-8"), flags=re.M)
    except (OSError, UnicodeDecodeError):
        return None
    return found.group(1).replace("%%", "%") if found else None


def _word(text: str) -> str:
    # A path or an address put into the unit: systemd would expand a % in it as a specifier.
    if any(c.isspace() or c in "\"'\\" for c in text):
        raise ServiceError(f"{shown(text, 80)}: a path with spaces or quotes cannot go into "
                           f"{KIOSK}'s command line")
    return text.replace("%", "%%")
