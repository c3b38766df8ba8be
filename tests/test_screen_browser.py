"""The kiosk's screen in a real headless browser (Debian's chromium driven by Playwright).

The server runs on a loop of its own thread, fed events and speaker readings by the test (no
models), for what the page shows, hostile text, the layouts, the stop button, a restart and a
refused token; and a real `edge-agent demo` call with a barge-in, watched through the page,
whose screen must call heard exactly what the record does."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from edge_agent.clock import MonotonicClock
from edge_agent.config.lan import ListenAddress
from edge_agent.conversation.playback import NowPlaying
from edge_agent.events import (
    Event,
    EventLog,
    PlaybackStarted,
    UnitFinalized,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize
from edge_agent.screen.captions import MAX_LINE_CHARS, Captions
from edge_agent.screen.server import ScreenServer
from tests.cli import command, environment, free_port, socket_activator, wait_listening, write_config

pytestmark = pytest.mark.browser

TOKEN = "kiosk-screen-token-0001"
REPLY = "We have three tables left: at seven, at eight and at nine."
WAIT_MS = 10_000


class LiveScreen:
    """A ScreenServer on a loop of its own thread: the test publishes events and sets what the
    speaker plays from the main thread, where Playwright runs."""

    def __init__(self, port: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.playing: NowPlaying | None = None
        self.words: str | None = None
        self.stops = 0
        self.talks: list[bool] = []
        self.log = EventLog(MonotonicClock())
        self.server = self._run(self._start(port))

    def _run(self, work: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(work, self.loop)
        return future.result(30)

    async def _start(self, port: int) -> ScreenServer:
        async def stop() -> bool:
            self.stops += 1
            return True

        async def talk(held: bool) -> bool:
            self.talks.append(held)
            return True

        server = ScreenServer(ListenAddress("127.0.0.1", port), TOKEN,
                              Captions(self.log.clock, 60, push_to_talk=True),
                              lambda: self.playing, stop, words=lambda: self.words, talk=talk)
        server.follow(self.log)
        await server.start()
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/#token={TOKEN}"

    def publish(self, event: Event) -> None:
        async def publish() -> None:
            self.log.publish(event)

        self._run(publish())

    def restart(self) -> None:
        port = self.server.port
        self._run(self.server.close())
        self.log = EventLog(MonotonicClock())
        self.server = self._run(self._start(port))

    def close(self) -> None:
        self._run(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def screen() -> Iterator[LiveScreen]:
    live = LiveScreen()
    yield live
    live.close()


class Opened:
    """A page on the screen, with the errors and requests it made."""

    def __init__(self, browser: Any, url: str, width: int = 1024, height: int = 600) -> None:
        self.page = browser.new_page(viewport={"width": width, "height": height})
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.goto(url, wait_until="load")

    def status(self) -> str:
        return str(self.page.text_content("#state"))

    def until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_MS / 1000
        while not check():
            assert time.monotonic() < deadline, f"the page never showed {what}"
            self.page.wait_for_timeout(20)


def test_the_callers_words_and_the_agents_as_played_then_cut(browser: Any,
                                                             screen: LiveScreen) -> None:
    opened = Opened(browser, screen.url)
    opened.until(lambda: opened.status() == "Listening", "Listening")
    # While the caller speaks: their words so far, set apart, and not read out yet.
    screen.words = ""
    screen.publish(UserSpeechStarted(1.0))
    opened.until(lambda: opened.status() == "Listening to you…", "Listening to you…")
    assert opened.page.is_hidden("#partial")
    for words in ("Do you", "Do you have a table"):
        screen.words = words
        opened.until(lambda w=words: opened.page.text_content("#partial") == w,  # type: ignore[misc]
                     f"{words!r} as it is said")
    assert opened.page.locator("li").count() == 0
    screen.publish(UserTurn("Do you have a table tonight?", ()))
    opened.page.wait_for_selector('li[data-who="caller"]', timeout=WAIT_MS)
    opened.until(lambda: opened.page.is_hidden("#partial"), "the words so far gone")
    screen.words = None
    assert opened.page.text_content('li[data-who="caller"] .text') == \
        "Do you have a table tonight?"
    assert opened.status() == "Thinking…"
    assert opened.page.is_hidden("#stop")

    screen.publish(PlaybackStarted("u1"))
    agent = 'li[data-who="agent"]'
    for heard in ("We have", "We have three", "We have three tables"):
        screen.playing = NowPlaying("u1", REPLY, heard)
        opened.until(lambda h=heard: opened.page.text_content(f"{agent} .heard") == h,  # type: ignore[misc]
                     f"{heard!r} lit")
        assert opened.page.text_content(f"{agent} .rest") == REPLY[len(heard):]
    assert opened.status() == "Speaking" and opened.page.is_visible("#stop")

    opened.page.click("#stop")
    opened.until(lambda: screen.stops == 1, "the stop reaching the agent")
    screen.publish(UnitFinalized(Finalize("u1", REPLY, "We have three tables", 0, 22050, (), 0)))
    opened.page.wait_for_selector(f'{agent}[data-said="cut"]', timeout=WAIT_MS)
    assert opened.page.text_content(f"{agent} .heard") == "We have three tables"
    rest = opened.page.locator(f"{agent} .rest")
    assert rest.text_content() == " left: at seven, at eight and at nine."
    assert "line-through" in rest.evaluate("e => getComputedStyle(e).textDecorationLine")
    assert opened.page.text_content(f"{agent} .sr-only") == " (not said)"
    # A screen reader hears each line once, when it is done, not each word as it lit up.
    assert opened.page.eval_on_selector_all("#announce span", "s => s.map(e => e.textContent)") \
        == ["You: Do you have a table tonight?", "Agent, cut short: We have three tables"]
    assert opened.errors == []
    origin = screen.url.split("#")[0]
    assert {url.split("#")[0] for url in opened.requests} <= {
        origin, f"{origin}screen.css", f"{origin}screen.js", f"{origin}favicon.ico"}


def test_the_talk_button_is_held_with_a_finger_or_a_key_and_let_go(browser: Any,
                                                                    screen: LiveScreen) -> None:
    opened = Opened(browser, screen.url, 800, 480)
    opened.until(lambda: opened.page.is_visible("#talk"), "the Talk button")
    talk = opened.page.locator("#talk")
    box = talk.bounding_box()
    assert box is not None and box["height"] >= 48 and box["y"] + box["height"] <= 480
    talk.dispatch_event("pointerdown", {"pointerId": 1, "isPrimary": True})
    opened.until(lambda: screen.talks == [True], "the press reaching the agent")
    assert talk.get_attribute("aria-pressed") == "true"
    talk.dispatch_event("pointerup", {"pointerId": 1, "isPrimary": True})
    opened.until(lambda: screen.talks == [True, False], "the release")
    assert talk.get_attribute("aria-pressed") == "false"
    talk.focus()
    opened.page.keyboard.down(" ")
    opened.page.keyboard.down(" ")  # a key held repeats: one press
    opened.until(lambda: screen.talks == [True, False, True], "the space bar held")
    opened.page.keyboard.up(" ")
    opened.until(lambda: screen.talks == [True, False, True, False], "the space bar let go")
    # A page that goes while the button is held lets go.
    opened.page.keyboard.down(" ")
    opened.until(lambda: screen.talks[-1] is True, "held again")
    opened.page.close()
    deadline = time.monotonic() + WAIT_MS / 1000
    while screen.talks[-1] is not False:
        assert time.monotonic() < deadline, "a page gone while holding never let go"
        time.sleep(0.02)
    assert opened.errors == []


HOSTILE = ['</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">',
           "\u202egnp.exe\u202c and \u2067right to left\u2069 <b>bold</b>",
           "w" * 10_000]


@pytest.mark.parametrize(("width", "height"), [(800, 480), (480, 800), (1024, 600),
                                               (1920, 1080)])
def test_hostile_text_is_text_and_every_layout_fits(browser: Any, screen: LiveScreen,
                                                     width: int, height: int) -> None:
    opened = Opened(browser, screen.url, width, height)
    for text in HOSTILE:
        screen.publish(UserTurn(text, ()))
    screen.publish(PlaybackStarted("u1"))
    screen.playing = NowPlaying("u1", HOSTILE[0] + " " + REPLY, HOSTILE[0])
    opened.page.wait_for_selector('li[data-who="agent"]', timeout=WAIT_MS)
    opened.until(lambda: opened.page.text_content('li[data-who="agent"] .heard') == HOSTILE[0],
                 "the hostile reply")
    shown = opened.page.eval_on_selector_all('li[data-who="caller"] .text',
                                             "items => items.map(e => e.textContent)")
    assert shown == [*HOSTILE[:2], "…" + "w" * (MAX_LINE_CHARS - 1)]  # a line's end is kept
    assert opened.page.evaluate("window.pwned") is None
    assert opened.page.locator("li script, li img, li b").count() == 0
    fits = opened.page.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert fits[0] <= fits[1], f"wider than the screen at {width}x{height}: {fits}"
    # Readable at 1.5 m: captions at least 24 px high on the smallest screen, larger on larger.
    size = float(opened.page.eval_on_selector(
        'li[data-who="caller"] .text', "e => parseFloat(getComputedStyle(e).fontSize)"))
    assert size >= 24
    box = opened.page.locator("#stop").bounding_box()
    assert box is not None and box["y"] + box["height"] <= height and box["height"] >= 48
    assert opened.errors == []


AXE_RULES = ["wcag2a", "wcag2aa", "wcag2aaa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
"""What axe-core checks: WCAG 2.x A to AAA (AAA holds the 7:1 text contrast,
color-contrast-enhanced) and its best practices."""


@pytest.mark.parametrize(("width", "height"), [(800, 480), (1920, 1080)])
def test_axe_core_finds_nothing_and_text_contrast_is_7_to_1(
        browser: Any, screen: LiveScreen, width: int, height: int) -> None:
    """axe-core (the engine of the npm package, as axe-playwright-python ships it) run in the
    page while it shows every kind of line and the stop button."""
    from axe_playwright_python.sync_playwright import Axe

    opened = Opened(browser, screen.url, width, height)
    screen.publish(UserTurn("Do you have a table tonight?", ()))
    screen.publish(PlaybackStarted("u1"))
    screen.publish(UnitFinalized(Finalize("u1", REPLY, "We have three tables", 0, 22050, (), 0)))
    screen.publish(UserTurn("Seven, please.", ()))
    screen.publish(PlaybackStarted("u2"))
    screen.playing = NowPlaying("u2", "Seven it is. Your name, please?", "Seven it is.")
    opened.until(lambda: opened.page.locator("li").count() == 4
                 and opened.page.is_visible("#stop"), "four lines and the stop button")
    results = Axe().run(opened.page, options={"runOnly": {"type": "tag", "values": AXE_RULES}})
    violations = results.response["violations"]
    assert [(v["id"], v["impact"], v["help"]) for v in violations] == []  # not even minor
    checked = {rule["id"] for rule in results.response["passes"]}
    assert {"color-contrast-enhanced", "button-name", "html-has-lang"} <= checked


def test_a_restarted_agent_is_reconnected_to_and_a_wrong_token_is_told(
        browser: Any, screen: LiveScreen) -> None:
    opened = Opened(browser, screen.url)
    screen.publish(UserTurn("before the restart", ()))
    opened.page.wait_for_selector('li[data-who="caller"]', timeout=WAIT_MS)
    screen.restart()
    opened.until(lambda: opened.page.locator("li").count() == 0, "the captions cleared")
    screen.publish(UserTurn("after the restart", ()))
    opened.until(lambda: opened.page.locator("li").count() == 1
                 and opened.page.text_content("li .text") == "after the restart",
                 "the restarted agent's captions")
    refused = Opened(browser, screen.url.replace(TOKEN, "not-the-token-at-all"))
    refused.until(lambda: "refused" in refused.status(), "the token refused")
    assert refused.page.locator("li").count() == 0


# --------------------------------------------------------------------------- a real call

@pytest.mark.models
@pytest.mark.realtime
def test_a_demo_call_with_a_barge_in_shows_on_the_screen_what_the_record_calls_heard(
        browser: Any, tmp_path: Path) -> None:
    """The agent is handed its listening socket as the service's socket unit hands it
    (systemd-socket-activate: LISTEN_FDS, FileDescriptorName=screen), at another port than
    `[screen] listen` names, which stays closed."""
    port, configured = free_port(), free_port()
    config = write_config(tmp_path, f'[screen]\nenabled = true\nlisten = "127.0.0.1:{configured}"\n')
    out = tmp_path / "session.json"
    snapshots: list[dict[str, Any]] = []
    page = browser.new_page(viewport={"width": 1024, "height": 600})
    page.on("websocket", lambda socket: socket.on(
        "framereceived", lambda frame: snapshots.append(json.loads(frame))))
    console, errors = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with console.open("w") as stdout_file, errors.open("w") as stderr_file:  # never a full pipe
        demo = subprocess.Popen([*socket_activator(f"127.0.0.1:{port}", names="screen",
                                                   env=environment()),
                                 *command("demo", "--json", out, config=config)],
                                cwd=tmp_path, stdin=subprocess.DEVNULL,
                                stdout=stdout_file, stderr=stderr_file)
    try:
        assert wait_listening(port, demo), errors.read_text()[-3000:]  # starts the demo
        page.goto(f"http://127.0.0.1:{port}/", wait_until="load", timeout=120_000)  # models load
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", configured)) != 0  # it listened on no other
        cut_on_screen = ""
        while demo.poll() is None:  # the page follows the call until the demo ends
            page.wait_for_timeout(50)
            # One reading in the page: the line may go between two calls (the screen forgets
            # when the session ends), and a locator would then wait for it.
            cut = page.eval_on_selector_all('li[data-who="agent"][data-said="cut"] .heard',
                                            "found => found.length ? found[0].textContent : null")
            if cut is not None:
                cut_on_screen = str(cut)
        demo.wait(60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(10)
    stdout, stderr = console.read_text(), errors.read_text()
    assert demo.returncode == 0, stderr[-3000:]
    record = json.loads(out.read_text(encoding="utf-8"))
    [cut_unit] = [u for u in record["units"] if u["interrupted"]]
    assert cut_on_screen == cut_unit["heard"] and cut_unit["heard"]
    # Word by word: the cut unit's heard part grew through several readings of the speaker,
    # each a prefix of the next and of the record's.
    growing = [line["heard"] for shot in snapshots for line in shot["lines"]
               if line["who"] == "agent" and line["id"] == cut_unit["unit_id"]]
    distinct = list(dict.fromkeys(growing))
    assert len(distinct) >= 3, distinct
    assert all(cut_unit["generated"].startswith(heard) for heard in distinct)
    last = [shot for shot in snapshots if shot["lines"]][-1]["lines"]  # before it cleared
    final = {line["id"]: line["heard"] for line in last if line["who"] == "agent"}
    assert final == {u["unit_id"]: u["heard"] for u in record["units"] if u["unit_id"] in final}
    callers = [line["text"] for line in last if line["who"] == "caller"]
    users = [t["text"] for t in record["turns"] if t["role"] == "user"]
    assert callers == users[-len(callers):] and callers
    assert "Traceback" not in stderr and stdout
