"""The kiosk's screen, served from the agent's own asyncio loop (the `websockets` library: one
small wheel without dependencies that serves both the page and its WebSocket).

`GET /` is the page, `/screen.js` and `/screen.css` its script and style (nothing else: no CDN,
no font, the page works with the network unplugged), `/live` the WebSocket: a page says hello
(with the token after "#token=" in its address, when one is configured), then receives the
whole screen (`captions.Snapshot`, JSON) every time it changes, and may send {"type": "stop"}:
the stop button, an interruption like a spoken barge-in; or {"type": "talk", "held": BOOL}: the
Talk button of push-to-talk (a page that goes while holding it lets go). Every response forbids
inline script, framing and any request elsewhere (Content-Security-Policy); the page puts every
caller or model text in with `textContent`, never as markup. No transcript is written to a log
or put in an address.

While pages are connected and a unit plays or the caller speaks, the speaker's position and the
caller's words so far are read every `POLL_S` (a word lights up at most that long after the
device played it); otherwise the server only folds events in (an idle kiosk's page costs
nothing between events).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hmac
import json
import logging
import socket
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from edge_agent.config.lan import ListenAddress
from edge_agent.conversation.playback import NowPlaying
from edge_agent.errors import EdgeAgentError
from edge_agent.events import EventLog, LoggedEvent
from edge_agent.screen.captions import Captions

log = logging.getLogger("edge_agent")

POLL_S = 0.02
"""How often the speaker's played position is read while a page is open."""
HELLO_S = 5.0
"""How long a page has to say hello (with its token) before it is closed."""
MAX_MESSAGE = 4096
"""Largest message a page may send (hello, stop): anything larger closes it."""
MAX_BACKLOG = 256 * 1024
"""Bytes waiting to be sent to one page; a page that stops reading is closed past this, so a
stuck tablet never grows the agent's memory or slows the others."""
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
          "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
FILES = {"/": ("page.html", "text/html; charset=utf-8"),
         "/screen.js": ("screen.js", "text/javascript; charset=utf-8"),
         "/screen.css": ("screen.css", "text/css; charset=utf-8")}
TOKEN_REFUSED = 4401
"""The close code a page gets for a wrong or missing token (it does not retry)."""


class ScreenUnavailableError(EdgeAgentError):
    """The screen's address cannot be listened on (taken, not this machine's, or no network
    socket allowed: the service's sandbox without its socket unit)."""


class ScreenServer:
    """Serves `captions` to pages at `address`, or on `listening` when systemd opened that
    socket for it; `stop` is the stop button's interruption (True if something was being
    said); `playing` the speaker's position."""

    def __init__(self, address: ListenAddress, token: str, captions: Captions,
                 playing: Callable[[], NowPlaying | None],
                 stop: Callable[[], Awaitable[bool]],
                 listening: socket.socket | None = None, *,
                 words: Callable[[], str | None] = lambda: None,
                 talk: Callable[[bool], Awaitable[bool]] | None = None) -> None:
        """`words`: the caller's words so far; `talk`: the Talk button (push-to-talk), None
        when it is off."""
        self._address = address
        self._listening = listening
        self._token = token
        self._captions = captions
        self._playing = playing
        self._stop = stop
        self._words = words
        self._talk = talk
        self._pages: set[ServerConnection] = set()
        self._changed = asyncio.Event()
        self._server: Server | None = None
        self._feeding: asyncio.Task[None] | None = None
        self._files = {path: (resources.files("edge_agent.screen").joinpath(name).read_bytes(),
                              kind) for path, (name, kind) in FILES.items()}

    @property
    def pages(self) -> int:
        """Pages connected now."""
        return len(self._pages)

    @property
    def port(self) -> int:
        """The port listened on (the configured one; the system's pick for port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def follow(self, events: EventLog) -> None:
        """Fold every event `events` publishes into the captions."""
        events.listen(self._event)

    async def start(self) -> None:
        """Listen at the address, or on `listening` (a socket systemd opened for the agent)."""
        where: dict[str, Any] = ({"sock": self._listening} if self._listening is not None else
                                 {"host": self._address.host, "port": self._address.port})
        try:
            self._server = await serve(
                self._page, process_request=self._request, server_header=None,
                max_size=MAX_MESSAGE, ping_interval=20, ping_timeout=20, **where)
        except OSError as exc:
            raise ScreenUnavailableError(
                f"screen: cannot listen on {self._address.shown}: {exc.strerror or exc} "
                f"({_why_not(exc)})") from None
        self._feeding = asyncio.create_task(self._feed())

    async def close(self) -> None:
        if self._feeding is not None:
            self._feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._feeding
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _event(self, entry: LoggedEvent) -> None:
        if self._captions.apply(entry):
            self._changed.set()

    def _request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = request.path.partition("?")[0]
        if path == "/live":
            return None  # the WebSocket handshake goes on
        if path == "/favicon.ico":  # asked for by every browser: there is none
            return _response(204, "No Content", b"", "image/x-icon")
        found = self._files.get(path)
        if found is None:
            return _response(404, "Not Found", b"not found\n", "text/plain; charset=utf-8")
        body, kind = found
        return _response(200, "OK", body, kind)

    async def _page(self, page: ServerConnection) -> None:
        holding = False
        try:
            hello = json.loads(await asyncio.wait_for(page.recv(), HELLO_S))
            token = hello.get("token", "") if isinstance(hello, dict) else ""
            if self._token and not (isinstance(token, str) and hmac.compare_digest(
                    token.encode(), self._token.encode())):
                await page.close(TOKEN_REFUSED, "token refused")
                return
            self._captions.expire()  # nothing older than the screen keeps
            self._pages.add(page)
            self._changed.set()  # the speaker is read again, now that a page is open
            await page.send(json.dumps(self._captions.snapshot()))
            async for message in page:
                request = _request_of(message)
                if request.get("type") == "stop":
                    await self._stop()
                elif request.get("type") == "talk" and self._talk is not None:
                    holding = request.get("held") is True
                    await self._talk(holding)
        except (TimeoutError, ValueError, ConnectionClosed):
            return
        finally:
            self._pages.discard(page)
            if holding and self._talk is not None:
                await self._talk(False)  # a page that went while held lets go

    async def _feed(self) -> None:
        """Send the screen to every page when it changes; read the speaker while any is open."""
        while True:
            wait = (None if not self._pages else POLL_S if self._captions.moving
                    else self._captions.clears_in())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
            by_event = self._changed.is_set()
            self._changed.clear()
            moved = self._captions.playing(self._playing())
            moved = self._captions.hearing(self._words()) or moved
            if (self._captions.expire() or moved or by_event) and self._pages:
                self._send(json.dumps(self._captions.snapshot()))

    def _send(self, message: str) -> None:
        for page in list(self._pages):
            transport: Any = page.transport
            if transport.get_write_buffer_size() > MAX_BACKLOG:
                self._pages.discard(page)
                transport.abort()  # it stopped reading: it reconnects and starts afresh
        broadcast(self._pages, message)


def _why_not(error: OSError) -> str:
    if error.errno in (errno.EAFNOSUPPORT, errno.EPERM, errno.EACCES):
        # The service's sandbox (RestrictAddressFamilies=AF_UNIX), or a port below 1024.
        return ("no network socket is allowed here: as the service, run `sudo edge-agent "
                "service install` again, so that systemd listens for the screen "
                "(edge-agent-screen.socket) and hands the socket over")
    return ("another program has the port, or the address is not this machine's: change "
            "[screen] listen")


def _request_of(message: str | bytes) -> dict[str, Any]:
    """A page's message as a JSON object ({} for anything else)."""
    with contextlib.suppress(ValueError):
        request = json.loads(message)
        if isinstance(request, dict):
            return request
    return {}


def _response(status: int, reason: str, body: bytes, kind: str) -> Response:
    return Response(status, reason, Headers({
        "Content-Type": kind, "Content-Length": str(len(body)),
        "Content-Security-Policy": POLICY, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
        "Cross-Origin-Resource-Policy": "same-origin"}), body)
