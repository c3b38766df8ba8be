"""The house's MQTT broker: the agent's state for Home Assistant, Node-RED or openHAB, and the
config's tools that switch things.

One asyncio task keeps the connection (aiomqtt, over paho-mqtt). Connected, it announces the
agent to Home Assistant (MQTT discovery, retained, so the agent appears as a device), publishes
"online" to `<topic>/availability` (the broker publishes "offline" there for it when the
connection drops: its last will) and its state to `<topic>/state` ("waiting" for the wake word,
"listening", "thinking", "speaking"; retained, so a dashboard that starts later reads it). With
`publish_transcripts`, each user turn and what the listener heard of each unit go to
`<topic>/turn` (not retained). When Home Assistant restarts (it publishes "online" to
`<prefix>/status`), the discovery is published again. With `announcements`, what the house
publishes to `<topic>/say` (plain UTF-8 text, not retained) is said when nobody is talking.

A broker that is down never holds the conversation up: the state is only remembered while the
link is down, and republished (retained) as soon as it is back; the link retries with a
growing pause (1 to 30 s). A tool waits at most `timeout_ms` for the broker to confirm its
message (QoS 1), then answers that the house could not be reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiomqtt

from edge_agent import __version__
from edge_agent.clock import Clock
from edge_agent.config.lan import BrokerAddress
from edge_agent.events import (
    BargeIn,
    Event,
    EventLog,
    Notice,
    PlaybackStarted,
    SessionEnded,
    SessionStarted,
    TurnDropped,
    UnitFinalized,
    UserTurn,
)

MAX_ANNOUNCEMENT_CHARS = 500
"""The longest announcement said (about half a minute of speech)."""
Announce = Callable[[str], str | None]
"""Has the agent say an announcement: None, or why it will not be said."""
RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0
KEEPALIVE_S = 15
"""A broker that stops answering is noticed within about 1.5 times this."""
STATE_SETTLE_S = 0.05
"""State changes this close together are published once, as the last of them (a reply of
several units goes listening/speaking between them)."""


@dataclass(frozen=True)
class HouseSettings:
    address: BrokerAddress
    """The broker."""
    username: str
    """"" : anonymous."""
    password: str
    """The username's password ("" : none)."""
    ca_file: str
    """For TLS: the CA that signed the broker's certificate ("" : the system's CAs)."""
    topic: str
    """The agent's topics start with this."""
    discovery_prefix: str
    """Home Assistant's discovery prefix ("" : no announcement)."""
    publish_transcripts: bool
    """Publish each turn's words to `<topic>/turn`."""
    announcements: bool
    """Say what arrives on `<topic>/say`."""
    timeout_s: float
    """The longest a tool waits for the broker."""
    idle_state: str
    """The state with no session open: "waiting" (for the wake word or speech) or
    "listening" (the agent answers whoever speaks)."""


class HouseLink:
    """The connection to the house's broker, kept by `run`."""

    def __init__(self, settings: HouseSettings) -> None:
        self.settings = settings
        self.state = settings.idle_state
        """What the agent is doing, as published."""
        self._session_open = False
        self._turns: deque[dict[str, str]] = deque(maxlen=16)
        self._changed = asyncio.Event()
        self._announce_to: Announce | None = None
        self._log: EventLog | None = None
        self._client: aiomqtt.Client | None = None
        self._tried = asyncio.Event()
        """Set once the first connection attempt has ended (connected or not)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self.node_id = re.sub(r"[^A-Za-z0-9_-]", "_", settings.topic)
        """Home Assistant's id for the device."""

    @property
    def connected(self) -> bool:
        return self._client is not None

    async def run(self, log: EventLog, clock: Clock,
                  announce: Announce | None = None) -> None:
        """Follow the agent's events and keep the broker informed, until cancelled (then
        "offline" is published, if the broker is there). `announce(words)`: has the agent say
        the words of a message to `<topic>/say` (with `announcements`); None, or why not."""
        self._loop = asyncio.get_running_loop()
        self._announce_to = announce if self.settings.announcements else None
        self._log = log
        events = log.subscribe()
        watching = asyncio.create_task(self._watch(events), name="mqtt-state")
        try:
            await self._keep_connected(log, clock)
        finally:
            watching.cancel()
            log.unsubscribe(events)

    # -- the agent's state ----------------------------------------------------------------

    async def _watch(self, events: asyncio.Queue[Any]) -> None:
        while True:
            entry = await events.get()
            self.follow(entry.event)

    def follow(self, event: Event) -> None:
        """The state (and, with transcripts, the turn) `event` leads to."""
        state = self._next_state(event)
        if state is not None and state != self.state:
            self.state = state
            self._changed.set()
        if not self.settings.publish_transcripts:
            return
        if isinstance(event, UserTurn):
            self._turns.append({"who": "caller", "text": event.text})
        elif isinstance(event, UnitFinalized) and event.finalize.generated:
            finalize = event.finalize
            self._turns.append({"who": "agent", "text": finalize.heard,
                                "cut": "yes" if finalize.interrupted else "no"})
        else:
            return
        self._changed.set()

    def _next_state(self, event: Event) -> str | None:
        settled = "listening" if self._session_open else self.settings.idle_state
        if isinstance(event, SessionStarted):
            self._session_open = True
            return "listening"
        if isinstance(event, SessionEnded):
            self._session_open = False
            return self.settings.idle_state
        if isinstance(event, UserTurn):
            return "thinking"
        if isinstance(event, PlaybackStarted):
            return "speaking"
        if isinstance(event, UnitFinalized | TurnDropped | BargeIn):
            return settled
        return None

    # -- the connection ---------------------------------------------------------------------

    def _connect(self) -> aiomqtt.Client:
        settings = self.settings
        context = None
        if settings.address.tls:
            context = ssl.create_default_context(cafile=settings.ca_file or None)
        return aiomqtt.Client(
            settings.address.host, settings.address.port,
            username=settings.username or None, password=settings.password or None,
            identifier=f"edge-agent-{self.node_id}"[:64], keepalive=KEEPALIVE_S,
            timeout=max(5.0, settings.timeout_s), tls_context=context,
            will=aiomqtt.Will(self._topic("availability"), "offline", qos=1, retain=True))

    async def _keep_connected(self, log: EventLog, clock: Clock) -> None:
        delay = RETRY_MIN_S
        reported = ""
        shown = self.settings.address.shown
        try:
            while True:
                try:
                    async with self._connect() as client:
                        self._client = client
                        self._tried.set()
                        delay = RETRY_MIN_S
                        log.publish(Notice(f"mqtt: connected to {shown}"
                                           + (" again" if reported else "")))
                        reported = ""
                        await self._serve(client)
                except aiomqtt.MqttError as exc:
                    self._client = None
                    self._tried.set()
                    problem = broker_problem(exc, self.settings)
                    if problem != reported:  # once per kind of trouble, not every retry
                        log.publish(Notice(f"mqtt: {problem}; trying again every "
                                           f"{RETRY_MIN_S:g}-{RETRY_MAX_S:g} s"))
                        reported = problem
                    await clock.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
        finally:
            self._client = None

    async def _serve(self, client: aiomqtt.Client) -> None:
        """Announce, then publish changes while listening for Home Assistant's restarts; the
        messages end (MqttError) when the connection is lost."""
        status = f"{self.settings.discovery_prefix}/status"
        await client.subscribe(status if self.settings.discovery_prefix
                               else self._topic("availability"))
        if self._announce_to is not None:
            await client.subscribe(self._topic("say"), qos=1)
        await self._make_known(client)
        publishing = asyncio.create_task(self._publish_changes(client), name="mqtt-publish")
        try:
            async for message in client.messages:
                if (self.settings.discovery_prefix and message.topic.matches(status)
                        and message.payload == b"online"):
                    await self._make_known(client)
                elif self._announce_to is not None and message.topic.matches(self._topic("say")):
                    self._heard_say(message.payload, bool(message.retain))
                if publishing.done():
                    publishing.result()  # its MqttError: the connection is gone
        except asyncio.CancelledError:
            # The agent stops: a clean disconnect does not fire the will, so say it here.
            with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                await asyncio.wait_for(client.publish(
                    self._topic("availability"), "offline", qos=1, retain=True), 2.0)
            raise
        finally:
            publishing.cancel()
            with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                await publishing

    async def _make_known(self, client: aiomqtt.Client) -> None:
        """Discovery, availability and the state, all retained."""
        for topic, payload in self.discovery().items():
            await client.publish(topic, payload, qos=1, retain=True)
        await client.publish(self._topic("availability"), "online", qos=1, retain=True)
        await client.publish(self._topic("state"), self.state, qos=1, retain=True)

    async def _publish_changes(self, client: aiomqtt.Client) -> None:
        published = self.state
        while True:
            await self._changed.wait()
            await asyncio.sleep(STATE_SETTLE_S)
            self._changed.clear()
            while self._turns:
                await client.publish(self._topic("turn"), json.dumps(self._turns[0]), qos=1)
                self._turns.popleft()
            if self.state != published:
                published = self.state
                await client.publish(self._topic("state"), published, qos=1, retain=True)

    def _heard_say(self, payload: object, retained: bool) -> None:
        """A message to `<topic>/say`: its words said, or one line on the console why not."""
        assert self._announce_to is not None and self._log is not None
        words, problem = read_announcement(payload, retained)
        if words:
            problem = self._announce_to(words)
        if problem is not None:
            self._log.publish(Notice(f"mqtt: a message to {self._topic('say')} is not said: "
                                     f"{problem}"))

    def discovery(self) -> dict[str, str]:
        """Home Assistant's discovery messages (topic -> JSON): the agent's state as a sensor
        of an "edge-agent" device, its last turn when transcripts are published, and a notify
        entity that says its message with announcements (an empty payload removes an entity
        announced before)."""
        prefix = self.settings.discovery_prefix
        if not prefix:
            return {}
        device = {"identifiers": [self.node_id], "name": f"edge-agent {self.settings.topic}",
                  "manufacturer": "edge-agent", "model": "offline voice agent",
                  "sw_version": __version__}
        common = {"availability_topic": self._topic("availability"), "device": device}
        state = {"name": "State", "unique_id": f"{self.node_id}_state",
                 "state_topic": self._topic("state"), "icon": "mdi:account-voice", **common}
        turn_topic = f"{prefix}/sensor/{self.node_id}/turn/config"
        messages = {f"{prefix}/sensor/{self.node_id}/state/config": json.dumps(state),
                    turn_topic: ""}
        say_topic = f"{prefix}/notify/{self.node_id}/say/config"
        messages[say_topic] = ""
        if self.settings.announcements:  # Home Assistant's notify.send_message says it
            say = {"name": "Say", "unique_id": f"{self.node_id}_say",
                   "command_topic": self._topic("say"), "icon": "mdi:bullhorn", **common}
            messages[say_topic] = json.dumps(say)
        if self.settings.publish_transcripts:
            turn = {"name": "Last turn", "unique_id": f"{self.node_id}_turn",
                    "state_topic": self._topic("turn"),
                    "value_template": "{{ value_json.text[:255] }}",
                    "json_attributes_topic": self._topic("turn"), "icon": "mdi:message-text",
                    **common}
            messages[turn_topic] = json.dumps(turn)
        return messages

    def _topic(self, leaf: str) -> str:
        return f"{self.settings.topic}/{leaf}"

    # -- tools ------------------------------------------------------------------------------

    def send(self, topic: str, payload: str, retain: bool) -> str | None:
        """Publish for a tool, from its thread (not the loop's): None once the broker has
        confirmed it, else why not, after at most `timeout_s`."""
        loop = self._loop
        if loop is None:
            return "the link to the house has not started"
        future = asyncio.run_coroutine_threadsafe(self._send(topic, payload, retain), loop)
        try:
            return future.result(timeout=self.settings.timeout_s + 1.0)
        except TimeoutError:
            future.cancel()
            return "the broker did not answer in time"

    async def _send(self, topic: str, payload: str, retain: bool) -> str | None:
        shown = self.settings.address.shown
        limit = self.settings.timeout_s
        try:
            async with asyncio.timeout(limit):
                # A tool called while the agent is still connecting waits for that first try.
                await self._tried.wait()
                client = self._client
                if client is None:
                    return f"not connected to the broker at {shown}"
                await client.publish(topic, payload, qos=1, retain=retain)
        except TimeoutError:
            return f"the broker at {shown} did not confirm within {limit * 1000:.0f} ms"
        except aiomqtt.MqttError as exc:
            return broker_problem(exc, self.settings)
        return None


TLS_REFUSED = ("Connection reset", "WRONG_VERSION_NUMBER", "EOF occurred in violation")
"""How a listener that does not speak TLS answers a TLS handshake."""


def broker_problem(exc: aiomqtt.MqttError, settings: HouseSettings) -> str:
    """What went wrong with the broker, in one line a person can act on."""
    text = str(exc)
    shown = settings.address.shown
    if isinstance(exc, aiomqtt.MqttCodeError) and exc.rc in (4, 5, 134, 135):
        return (f"the broker at {shown} refused the agent's credentials ({text}): check "
                "[mqtt] username and the password in mqtt.password_file")
    if "CERTIFICATE_VERIFY_FAILED" in text:
        signer = "mqtt.ca_file" if settings.ca_file else "none of the system's CAs"
        why = text.split("certificate verify failed:", 1)[-1].split("(_ssl", 1)[0].strip()
        return (f"the broker at {shown} showed a certificate that {signer} did not sign "
                f"({why}): set [mqtt] ca_file to the CA certificate that signed the broker's")
    if settings.address.tls and any(sign in text for sign in TLS_REFUSED):
        return (f"the broker at {shown} broke off the TLS handshake ({text}): does it listen "
                f"for TLS on port {settings.address.port}? (mqtt:// is without TLS)")
    if "Connection refused" in text or "Errno 111" in text:
        return f"nothing answers at {shown} (connection refused): is the broker running?"
    return f"lost the broker at {shown} ({text})"


def announcement_words(text: str) -> str:
    """`text` as it may be said: control and formatting characters (bidi overrides, zero
    widths) dropped, white space made single spaces."""
    kept = "".join(c if unicodedata.category(c) not in ("Cc", "Cf") else " " for c in text)
    return " ".join(kept.split())


def read_announcement(payload: object, retained: bool) -> tuple[str, str | None]:
    """The words of a message to `<topic>/say`, or "" and why they are not said."""
    if retained:  # it would be said again at every reconnect
        return "", "it is retained (publish announcements with retain off)"
    if not isinstance(payload, bytes):
        return "", "it is not text"
    try:
        words = announcement_words(payload.decode("utf-8"))
    except UnicodeDecodeError:
        return "", "it is not UTF-8 text"
    if not words:
        return "", "it holds no words"
    if len(words) > MAX_ANNOUNCEMENT_CHARS:
        return "", f"it is {len(words)} characters long, more than {MAX_ANNOUNCEMENT_CHARS}"
    return words, None
