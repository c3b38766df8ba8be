"""The kiosk unit's own command line, run: its ExecStart= (as systemd would run it: specifiers
filled in, as a user of its own, in a login session's environment) under cage's headless
backend against a live screen server, which must count the page connected with its token; then
the browser is killed, cage must end with it (what systemd sees and restarts, Restart=always),
and the same command run again must show the page again on the profile the killed browser left
locked; SIGTERM (systemctl stop) must end cage and its browser."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_agent.config.file import parse_config
from edge_agent.errors import ServiceError
from edge_agent.installer.kiosk import (
    CREDENTIAL,
    KIOSK_USER,
    find_programs,
    redirect_page,
    render_kiosk_unit,
    screen_url,
)
from edge_agent.installer.unit import Layout
from tests.test_kiosk import TEMPLATE, _exec_start, _settings
from tests.test_screen_browser import TOKEN, LiveScreen


def _expand(word: str, specifiers: dict[str, str]) -> str:
    """A word of ExecStart= with systemd's specifiers replaced, as systemd would for this unit
    (only those the unit uses: any other fails the test)."""
    def one(match: re.Match[str]) -> str:
        assert match.group(1) in specifiers, f"specifier %{match.group(1)} in {word!r}"
        return specifiers[match.group(1)]

    return re.sub(r"%(.)", one, word)


def _processes(field: int, value: int) -> list[int]:
    """The processes whose /proc/PID/stat `field` (after the name: 1 ppid, 2 process group) is
    `value`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text(encoding="utf-8")
        except (OSError, ValueError):
            continue
        if int(stat.rpartition(")")[2].split()[field]) == value:
            found.append(int(entry.name))
    return found


def _until(check: Callable[[], bool], process: subprocess.Popen[bytes] | None, what: str,
           seconds: float = 90) -> None:
    """Until `check()`, failing after `seconds` or as soon as `process` (if one) has ended."""
    deadline = time.monotonic() + seconds
    while not check():
        assert process is None or process.poll() is None, \
            f"cage ended (exit {process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(0.05)


@pytest.mark.browser
def test_the_units_command_line_shows_the_page_and_again_after_the_browser_dies() -> None:
    try:
        cage, chromium = find_programs(Layout())
    except ServiceError as exc:
        assert not os.environ.get("CI"), f".ci/run must install them: {exc}"
        pytest.skip(str(exc))
    settings_text = '[screen]\nenabled = true\nlisten = "127.0.0.1:{port}"\ntoken = "{token}"\n'
    # Under /tmp, not pytest's directory (private to the user running the tests): the browser
    # runs as the unit runs it, as a user of its own (cage refuses to run as root).
    base = Path(tempfile.mkdtemp(prefix="edge-agent-kiosk-"))
    log = (base / "cage.log").open("wb")
    processes: list[subprocess.Popen[bytes]] = []
    screen = LiveScreen()
    try:
        settings = parse_config(settings_text.format(port=screen.server.port, token=TOKEN),
                                "kiosk.toml")
        text = render_kiosk_unit(TEMPLATE, cage, chromium, KIOSK_USER, screen_url(settings),
                                 with_token=True)
        unit = _settings(text)
        state, credentials, runtime = base / "state", base / "credentials", base / "runtime"
        home = state / unit["StateDirectory"][0]  # the kiosk user's home (its sysusers line)
        for directory in (home, credentials, runtime):
            directory.mkdir(parents=True, mode=0o700)
        (credentials / CREDENTIAL).write_text(redirect_page(screen_url(settings), TOKEN),
                                              encoding="utf-8")
        prefix: list[str] = []
        if os.geteuid() == 0:
            for path in (base, *base.rglob("*")):
                os.chown(path, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        argv = [_expand(word, {"S": str(state), "d": str(credentials), "%": "%"})
                for word in _exec_start(text)]
        # The environment systemd and the login session give it; the headless backend (and its
        # software renderer) instead of a display, no input devices.
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime),
               **dict(item.split("=", 1) for item in unit["Environment"]),
               "WLR_BACKENDS": "headless", "WLR_LIBINPUT_NO_DEVICES": "1",
               "WLR_RENDERER": "pixman"}

        def launch() -> subprocess.Popen[bytes]:
            processes.append(subprocess.Popen(
                [*prefix, *argv], env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True))
            return processes[-1]

        first = launch()
        _until(lambda: screen.server.pages == 1, first, "page connected with the token")
        browser = [pid for pid in _processes(1, first.pid)
                   if Path(f"/proc/{pid}/exe").resolve().name.startswith("chrom")]
        assert browser, "no chromium under cage"
        os.kill(browser[0], signal.SIGKILL)  # the browser dies...
        _until(lambda: first.poll() is not None, None, "cage ending with its browser")
        _until(lambda: screen.server.pages == 0, None, "the page gone")
        assert (home / "chromium" / "SingletonLock").is_symlink()  # the profile left locked
        # ...and systemd starts the unit's command again (Restart=always), with that profile:
        # the page is shown again.
        assert unit["Restart"] == ["always"] and 0 < float(unit["RestartSec"][0]) <= 10
        second = launch()
        _until(lambda: screen.server.pages == 1, second, "page connected after the restart")
        second.terminate()  # `systemctl stop`: SIGTERM to cage, which ends its browser
        _until(lambda: second.poll() is not None, None, "cage stopping on SIGTERM", 30)
        _until(lambda: not _processes(2, second.pid), None, "the browser ending with cage", 30)
    except AssertionError as exc:
        log.flush()
        tail = (base / "cage.log").read_text(encoding="utf-8", errors="replace")[-3000:]
        raise AssertionError(f"{exc}\ncage and chromium said:\n{tail}") from None
    finally:
        for process in processes:  # each in a process group of its own, cage's
            if _processes(2, process.pid):
                os.killpg(process.pid, signal.SIGKILL)
            if process.poll() is None:
                process.wait(10)
        log.close()
        screen.close()
        shutil.rmtree(base, ignore_errors=True)
