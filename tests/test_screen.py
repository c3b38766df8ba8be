"""The kiosk's screen without a browser: what the captions hold as events come and the speaker
plays, and the server over real sockets (the page's files and their headers, the token, the
stop button, a port that is taken). The page in Chromium: test_screen_browser.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from edge_agent.clock import MonotonicClock, VirtualClock
from edge_agent.config.file import parse_config
from edge_agent.config.lan import ListenAddress
from edge_agent.conversation.playback import NowPlaying
from edge_agent.errors import ConfigError
from edge_agent.events import (
    Backchannel,
    EventLog,
    LoggedEvent,
    PlaybackStarted,
    SessionEnded,
    SessionStarted,
    UnitFinalized,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.heard.ledger import Finalize
from edge_agent.screen.captions import MAX_LINE_CHARS, MAX_LINES, Captions
from edge_agent.screen.server import POLICY, TOKEN_REFUSED, ScreenServer, ScreenUnavailableError
from tests.cli import free_port, socket_activator, wait_listening

REPO = Path(__file__).resolve().parents[1]
REPLY = "We have three tables left: at seven, at eight and at nine."
TOKEN = "0123456789abcdef0123"


def _entry(event: Any, at: float = 0.0) -> LoggedEvent:
    return LoggedEvent(at, event)


def _finalize(heard: str, generated: str = REPLY, unit_id: str = "u1") -> UnitFinalized:
    return UnitFinalized(Finalize(unit_id, generated, heard, 0, 22050, (), 0))


def test_words_light_up_as_played_and_a_cut_leaves_exactly_the_records_heard() -> None:
    captions = Captions(VirtualClock(), clear_after=60)
    assert captions.apply(_entry(UserSpeechStarted(1.0)))
    assert captions.snapshot()["caller_speaking"]
    captions.apply(_entry(UserTurn("Do you have a table tonight?", ())))
    assert captions.snapshot()["state"] == "thinking"
    captions.apply(_entry(PlaybackStarted("u1")))
    assert captions.playing(NowPlaying("u1", REPLY, "We have"))
    assert not captions.playing(NowPlaying("u1", REPLY, "We have"))  # nothing moved
    captions.playing(NowPlaying("u1", REPLY, "We have three tables"))
    snapshot = captions.snapshot()
    assert snapshot["state"] == "speaking"
    assert snapshot["lines"] == [
        {"who": "caller", "id": "t1", "text": "Do you have a table tonight?"},
        {"who": "agent", "id": "u1", "heard": "We have three tables",
         "rest": " left: at seven, at eight and at nine.", "said": "speaking"}]
    # The barge-in's Finalize: the record's heard, exactly, even where the last reading of the
    # speaker was a word further (the cut is decided at the device's position when it stopped).
    captions.playing(NowPlaying("u1", REPLY, "We have three tables left:"))
    assert captions.apply(_entry(_finalize("We have three tables")))
    agent = captions.snapshot()["lines"][1]
    assert agent == {"who": "agent", "id": "u1", "heard": "We have three tables",
                     "rest": " left: at seven, at eight and at nine.", "said": "cut"}
    assert captions.snapshot()["state"] == "listening"
    # A late reading of the speaker changes nothing of a finalized unit.
    assert not captions.playing(NowPlaying("u1", REPLY, REPLY))
    captions.apply(_entry(_finalize("Fine.", "Fine.", "u2")))
    assert captions.snapshot()["lines"][2]["said"] == "done"  # type: ignore[typeddict-item]


def test_a_backchannel_is_shown_as_one_and_is_not_a_turn() -> None:
    captions = Captions(VirtualClock(), clear_after=60)
    captions.apply(_entry(PlaybackStarted("u1")))
    captions.apply(_entry(Backchannel("mm-hm", 300)))
    lines = captions.snapshot()["lines"]
    assert [line["who"] for line in lines] == ["agent", "backchannel"]
    assert captions.snapshot()["state"] == "speaking"


def test_the_callers_words_show_while_they_speak_and_give_way_to_the_turn() -> None:
    captions = Captions(VirtualClock(), clear_after=60)
    assert not captions.hearing("stray words")  # nobody speaking: nothing shown
    assert captions.snapshot()["caller_words"] is None
    captions.apply(_entry(UserSpeechStarted(1.0)))
    assert captions.hearing("") and captions.snapshot()["caller_words"] == ""
    assert captions.hearing("a table") and not captions.hearing("a table")
    assert captions.snapshot()["caller_words"] == "a table"
    captions.hearing("y" * 10_000)
    assert len(captions.snapshot()["caller_words"] or "") == MAX_LINE_CHARS
    captions.apply(_entry(UserTurn("a table for two", ())))
    assert captions.snapshot()["caller_words"] is None  # the turn's own line replaces them
    captions.apply(_entry(UserSpeechStarted(3.0)))
    captions.hearing("mm")
    captions.apply(_entry(Backchannel("mm-hm", 300)))
    assert captions.snapshot()["caller_words"] is None


async def test_the_screen_forgets_at_the_end_of_a_session_and_after_quiet() -> None:
    clock = VirtualClock()
    captions = Captions(clock, clear_after=30, idle_state="waiting")
    assert captions.snapshot()["state"] == "waiting"
    captions.apply(_entry(SessionStarted(1, "wake")))
    captions.apply(_entry(UserTurn("hello kiosk", ())))
    captions.apply(_entry(SessionEnded(1)))
    assert captions.snapshot() == {"state": "waiting", "caller_speaking": False,
                                   "caller_words": None, "push_to_talk": False, "lines": []}

    captions.apply(_entry(UserTurn("where is the exit", ())))
    await clock.advance(29)
    assert not captions.expire()
    captions.apply(_entry(PlaybackStarted("u1")))  # still playing at the limit: kept
    await clock.advance(31)
    assert not captions.expire() and captions.snapshot()["lines"]
    captions.apply(_entry(_finalize("The exit is left.", "The exit is left.")))
    await clock.advance(30)
    assert captions.expire()
    assert captions.snapshot()["lines"] == []


def test_lines_and_text_are_bounded() -> None:
    captions = Captions(VirtualClock(), clear_after=60)
    for turn in range(MAX_LINES + 5):
        captions.apply(_entry(UserTurn(f"question {turn}", ())))
    lines = captions.snapshot()["lines"]
    assert len(lines) == MAX_LINES and lines[-1]["text"] == f"question {MAX_LINES + 4}"  # type: ignore[typeddict-item]
    word = "x" * 10_000
    captions.apply(_entry(UserTurn(word + " end", ())))
    shown = captions.snapshot()["lines"][-1]["text"]  # type: ignore[typeddict-item]
    assert len(shown) == MAX_LINE_CHARS and shown.endswith("x end") and shown[0] == "…"


# --------------------------------------------------------------------------- the config

@pytest.mark.parametrize(("toml", "key", "says"), [
    ('[screen]\nlisten = "0.0.0.0:8780"', "screen.token", "is needed to serve the screen on "
     "0.0.0.0:8780"),
    ('[screen]\nlisten = "10.0.0.5:8780"\ntoken = "short"', "screen.token", "at least 16"),
    ('[screen]\nlisten = "8780"', "screen.listen", "must be an address and a port"),
    ('[screen]\nlisten = "kiosk.local:8780"', "screen.listen", "must name an IP address"),
    ('[screen]\nlisten = "127.0.0.1:70000"', "screen.listen", "(1-65535)"),
    ('[screen]\nclear_after_s = 0', "screen.clear_after_s", ""),
], ids=["lan-without-token", "short-token", "no-host", "a-name", "bad-port", "never-clears"])
def test_a_screen_config_that_cannot_work_is_refused(toml: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(toml, "kiosk.toml")
    assert f"kiosk.toml: {key}: " in str(error.value) and says in str(error.value)


def test_a_lan_screen_with_a_token_and_ipv6_loopback_are_accepted() -> None:
    lan = parse_config(f'[screen]\nenabled = true\nlisten = "0.0.0.0:9000"\ntoken = "{TOKEN}"',
                       "k.toml")
    assert lan.screen.listen == "0.0.0.0:9000"
    assert parse_config('[screen]\nlisten = "[::1]:9000"', "k.toml").screen.token == ""


# --------------------------------------------------------------------------- the server

class Stops:
    """The stop button's target: counts the presses."""

    def __init__(self) -> None:
        self.presses = 0
        self.pressed = asyncio.Event()

    async def __call__(self) -> bool:
        self.presses += 1
        self.pressed.set()
        return True


@pytest.fixture
async def served() -> AsyncIterator[tuple[ScreenServer, EventLog, Stops, list[NowPlaying | None]]]:
    log = EventLog(VirtualClock())
    playing: list[NowPlaying | None] = [None]
    stops = Stops()
    server = ScreenServer(ListenAddress("127.0.0.1", 0), TOKEN, Captions(log.clock, 60),
                          lambda: playing[0], stops)
    server.follow(log)
    await server.start()
    yield server, log, stops, playing
    await server.close()


def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


async def test_the_page_and_its_files_are_served_with_a_strict_policy(
        served: tuple[ScreenServer, EventLog, Stops, list[NowPlaying | None]]) -> None:
    server = served[0]
    for path, kind in (("/", "text/html"), ("/screen.js", "text/javascript"),
                       ("/screen.css", "text/css")):
        status, headers, body = await asyncio.to_thread(_get, server.port, path)
        assert status == 200 and headers["Content-Type"].startswith(kind) and body
        assert headers["Content-Security-Policy"] == POLICY
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert "Server" not in headers
    page = (await asyncio.to_thread(_get, server.port, "/"))[2].decode()
    assert "<script>" not in page and "http" not in page  # nothing inline, nothing fetched
    status, _, _ = await asyncio.to_thread(_get, server.port, "/../etc/passwd")
    assert status == 404


async def test_a_page_without_the_token_gets_nothing(
        served: tuple[ScreenServer, EventLog, Stops, list[NowPlaying | None]]) -> None:
    server, log, stops, _ = served
    log.publish(UserTurn("my phone number is 555 0199", ()))
    for hello in ({"type": "hello", "token": "wrong-token-wrong-token"}, {"type": "hello"},
                  {"type": "stop"}, "not json"):
        async with connect(f"ws://127.0.0.1:{server.port}/live") as page:
            await page.send(hello if isinstance(hello, str) else json.dumps(hello))
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(page.recv(), 10)  # closed before any snapshot
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == (1000 if hello == "not json" else TOKEN_REFUSED)
    assert stops.presses == 0 and server.pages == 0


async def test_a_page_with_the_token_follows_the_speaker_and_its_stop_is_an_interruption(
        served: tuple[ScreenServer, EventLog, Stops, list[NowPlaying | None]]) -> None:
    server, log, stops, playing = served
    log.publish(UserTurn("a table for two", ()))
    async with connect(f"ws://127.0.0.1:{server.port}/live") as page:
        await page.send(json.dumps({"type": "hello", "token": TOKEN}))
        first = json.loads(await asyncio.wait_for(page.recv(), 10))
        assert first["lines"] == [{"who": "caller", "id": "t1", "text": "a table for two"}]
        log.publish(PlaybackStarted("u1"))
        for heard in ("We have", "We have three tables"):
            playing[0] = NowPlaying("u1", REPLY, heard)
            while True:  # the server reads the speaker on its own: wait for the reading
                shown = json.loads(await asyncio.wait_for(page.recv(), 10))
                if shown["lines"][-1].get("heard") == heard:
                    break
        await page.send(json.dumps({"type": "stop"}))
        await asyncio.wait_for(stops.pressed.wait(), 10)
    assert stops.presses == 1


async def test_the_callers_words_and_the_talk_button_go_between_page_and_agent() -> None:
    log = EventLog(VirtualClock())
    words: list[str | None] = [None]
    talks: list[bool] = []
    pressed = asyncio.Event()

    async def talk(held: bool) -> bool:
        talks.append(held)
        pressed.set()
        return True

    server = ScreenServer(ListenAddress("127.0.0.1", 0), "", Captions(log.clock, 60, push_to_talk=True),
                          lambda: None, Stops(), words=lambda: words[0], talk=talk)
    server.follow(log)
    await server.start()
    try:
        async with connect(f"ws://127.0.0.1:{server.port}/live") as page:
            await page.send(json.dumps({"type": "hello"}))
            assert json.loads(await asyncio.wait_for(page.recv(), 10))["push_to_talk"] is True
            log.publish(UserSpeechStarted(1.0))
            words[0] = "where is"
            while json.loads(await asyncio.wait_for(page.recv(), 10))["caller_words"] != "where is":
                pass  # read by the server on its own
            for message in ({"type": "talk", "held": True}, {"type": "talk", "held": "yes"},
                            {"type": "talk"}):
                pressed.clear()
                await page.send(json.dumps(message))
                await asyncio.wait_for(pressed.wait(), 10)
            assert talks == [True, False, False]  # only a JSON true holds it
            pressed.clear()
            await page.send(json.dumps({"type": "talk", "held": True}))
            await asyncio.wait_for(pressed.wait(), 10)
        while talks[-1] is not False:  # the page went while holding: let go
            pressed.clear()
            await asyncio.wait_for(pressed.wait(), 10)
        assert talks == [True, False, False, True, False]
    finally:
        await server.close()


async def test_an_open_page_sees_the_screen_forget_with_nothing_playing() -> None:
    """Between events an idle page costs no readings of the speaker; the quiet still clears
    the screen on time."""
    log = EventLog(MonotonicClock())
    readings = [0]

    def playing() -> None:
        readings[0] += 1

    server = ScreenServer(ListenAddress("127.0.0.1", 0), "", Captions(log.clock, 0.5),
                          playing, Stops())
    server.follow(log)
    await server.start()
    try:
        async with connect(f"ws://127.0.0.1:{server.port}/live") as page:
            await page.send(json.dumps({"type": "hello"}))
            await asyncio.wait_for(page.recv(), 10)
            log.publish(UserTurn("my room number is 214", ()))
            said = log.clock.now()
            while not json.loads(await asyncio.wait_for(page.recv(), 10))["lines"]:
                pass  # the snapshots of its connecting
            before = readings[0]
            cleared = json.loads(await asyncio.wait_for(page.recv(), 10))
            assert cleared["lines"] == [] and log.clock.now() - said >= 0.5
            assert readings[0] - before <= 2  # not every 20 ms while nothing moved
    finally:
        await server.close()


async def test_a_port_that_is_taken_is_named() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ScreenServer(ListenAddress("127.0.0.1", port), "",
                              Captions(VirtualClock(), 60), lambda: None, Stops())
        with pytest.raises(ScreenUnavailableError,
                           match=f"screen: cannot listen on 127.0.0.1:{port}: .*another program "
                                 r"has the port.*change \[screen\] listen"):
            await server.start()


async def test_a_page_that_stops_reading_is_dropped_and_the_others_go_on(
        served: tuple[ScreenServer, EventLog, Stops, list[NowPlaying | None]]) -> None:
    server, log, _, _ = served
    # A page that handshakes and then never reads: a raw socket, so nothing drains it.
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                 b"Sec-WebSocket-Version: 13\r\n\r\n")
    assert b" 101 " in await reader.readuntil(b"\r\n\r\n")
    hello = json.dumps({"type": "hello", "token": TOKEN}).encode()
    writer.write(bytes([0x81, 0x80 | len(hello)]) + b"\0\0\0\0" + hello)  # masked, key 0
    async with connect(f"ws://127.0.0.1:{server.port}/live") as page:
        await page.send(json.dumps({"type": "hello", "token": TOKEN}))
        await asyncio.wait_for(page.recv(), 10)
        sent = 0
        while server.pages == 2 and sent < 5000:  # ~24 kB snapshots until the backlog passes
            sent += 1
            log.publish(UserTurn("y" * MAX_LINE_CHARS, ()))
            await asyncio.sleep(0.005)
            while True:  # the reading page keeps up
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(page.recv(), 0.001)
                    continue
                break
        assert server.pages == 1, f"still sending to a page that reads nothing after {sent}"
        log.publish(UserTurn("still here", ()))
        while (json.loads(await asyncio.wait_for(page.recv(), 10))["lines"][-1]["text"]
               != "still here"):
            pass
    writer.close()


def test_the_socket_systemd_hands_over_is_found_by_its_name(tmp_path: Path) -> None:
    """Two sockets handed over, as systemd hands a service its socket units' (LISTEN_FDS,
    LISTEN_FDNAMES): the screen's is the second; a child the agent starts inherits neither."""
    first, second = free_port(), free_port()
    script = tmp_path / "child.py"
    script.write_text(
        "import os, sys\n"
        "from edge_agent.service.activation import inherited_socket\n"
        "found = inherited_socket('screen')\n"
        "print(found.getsockname()[1], os.get_inheritable(found.fileno()),"
        " inherited_socket('other'), inherited_socket('screen', {}))\n", encoding="utf-8")
    argv = [*socket_activator(f"127.0.0.1:{first}", f"127.0.0.1:{second}", names="web:screen",
                              env={"PYTHONPATH": str(REPO)}), sys.executable, str(script)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as child:
        assert wait_listening(first, child, 30)  # its first connection starts the child
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.split() == [str(second), "False", "None", "None"]

