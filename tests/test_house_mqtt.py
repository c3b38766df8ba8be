"""The house over MQTT, against a real Mosquitto broker on 127.0.0.1 with a password file: the
agent's state and its Home Assistant discovery published retained, transcripts only when asked,
a broker restart (the state republished), wrong credentials (one line, once), "offline" when the
agent stops, and the config's tools publishing (or answering that the house is unreachable
within their bound)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from edge_agent.app.house import build_house
from edge_agent.clock import MonotonicClock
from edge_agent.config import Config
from edge_agent.config.file import parse_config
from edge_agent.conversation.tools import Toolbox
from edge_agent.engines.base import ToolCall
from edge_agent.errors import ConfigError
from edge_agent.events import (
    EventLog,
    Notice,
    PlaybackStarted,
    SessionStarted,
    UserTurn,
)
from edge_agent.house.link import HouseLink
from edge_agent.house.tools import UNREACHABLE, house_tools
from tests.logged import finalized
from tests.mosquitto import (
    PASSWORD,
    USER,
    Broker,
    Subscriber,
    broker,
    make_authority,
    publish,
    tls_broker,
)

__all__ = ["broker", "tls_broker"]  # the fixtures

pytestmark = pytest.mark.mqtt

TOPIC = "edge-agent/kitchen"
LIGHT = """
[[mqtt.tools]]
name = "kitchen_light"
description = "Switch the kitchen light on or off."
topic = "home/kitchen/light/set"
payload = "{state}"
parameters = { state = { type = "string", enum = ["ON", "OFF"] } }
"""


def config(tmp_path: Path, broker: Broker, password: str = PASSWORD, extra: str = "") -> Config:
    secret = tmp_path / "mqtt-password"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    return parse_config(f'[session]\nstart = "wake"\nidle_end_s = 30\n[mqtt]\nurl = '
                        f'"{broker.url}"\nusername = "{USER}"\npassword_file = "{secret}"\n'
                        f'topic = "{TOPIC}"\ntimeout_ms = 800\n{extra}', "test.toml")


def link_of(settings: Config) -> HouseLink:
    link = build_house(settings)
    assert link is not None
    return link


async def until(condition: object, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "not reached in time"
        await asyncio.sleep(0.02)


def notices(log: EventLog) -> list[str]:
    return [e.event.text for e in log.entries if isinstance(e.event, Notice)]


async def test_the_state_and_the_discovery_are_published_retained(tmp_path: Path,
                                                                  broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker, extra=LIGHT))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: link.connected)
    # A dashboard that connects later reads all of it: retained.
    async with Subscriber(broker, f"{TOPIC}/#", "homeassistant/#") as house:
        await house.wait_for(f"{TOPIC}/state", "waiting")
        assert house.last(f"{TOPIC}/availability") == "online"
        config_topic = "homeassistant/sensor/edge-agent_kitchen/state/config"
        await until(lambda: house.last(config_topic) is not None)
        announced = json.loads(house.last(config_topic) or "{}")
        assert announced["state_topic"] == f"{TOPIC}/state"
        assert announced["availability_topic"] == f"{TOPIC}/availability"
        assert announced["device"]["identifiers"] == ["edge-agent_kitchen"]
        assert all(retained for _, _, retained in house.messages)
        for event, state in ((SessionStarted(1, "wake"), "listening"),
                             (UserTurn("turn on the light", ()), "thinking"),
                             (PlaybackStarted("u1"), "speaking"),
                             (finalized("u1", "Done."), "listening")):
            log.publish(event)
            await house.wait_for(f"{TOPIC}/state", state)
        # Transcripts are off by default: no words reach the house's broker.
        assert not [m for m in house.messages if m[0] == f"{TOPIC}/turn"]
        # Neither the last turn nor a notify entity (announcements are off) is announced.
        cleared = {topic for topic, payload in link.discovery().items() if payload == ""}
        assert cleared == {"homeassistant/sensor/edge-agent_kitchen/turn/config",
                           "homeassistant/notify/edge-agent_kitchen/say/config"}
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await house.wait_for(f"{TOPIC}/availability", "offline")  # said when it stops


async def test_transcripts_are_published_only_when_asked(tmp_path: Path,
                                                         broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker, extra="publish_transcripts = true\n"))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: link.connected)
    async with Subscriber(broker, f"{TOPIC}/turn", "homeassistant/#") as house:
        await until(lambda: house.last(
            "homeassistant/sensor/edge-agent_kitchen/turn/config") not in (None, ""))
        log.publish(UserTurn("what time is it", ()))
        log.publish(finalized("u1", "It is five past three.", "It is five"))
        await until(lambda: len([m for m in house.messages if m[0] == f"{TOPIC}/turn"]) == 2)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    turns = [json.loads(p) for t, p, _ in house.messages if t == f"{TOPIC}/turn"]
    assert turns == [{"who": "caller", "text": "what time is it"},
                     {"who": "agent", "text": "It is five", "cut": "yes"}]


async def test_a_broker_restart_loses_nothing_of_the_agents_state(tmp_path: Path,
                                                                 broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: link.connected)
    broker.stop()  # retained messages die with it (persistence is off)
    await until(lambda: not link.connected)
    log.publish(SessionStarted(1, "wake"))  # changes while the broker is down
    log.publish(UserTurn("set a timer", ()))
    await asyncio.sleep(0.2)
    broker.start()
    await until(lambda: link.connected, within=40)
    async with Subscriber(broker, f"{TOPIC}/#") as house:
        await house.wait_for(f"{TOPIC}/state", "thinking")
        assert house.last(f"{TOPIC}/availability") == "online"
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    said = notices(log)
    assert said[0] == f"mqtt: connected to {broker.url}"
    assert any(n.startswith(f"mqtt: nothing answers at {broker.url}") or
               n.startswith(f"mqtt: lost the broker at {broker.url}") for n in said), said
    assert said[-1] == f"mqtt: connected to {broker.url} again"


async def test_wrong_credentials_are_one_line_said_once(tmp_path: Path, broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker, password="wrong"))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: len(notices(log)) == 1)
    await asyncio.sleep(3.5)  # it tries again after 1 and 2 s: still one line
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    (line,) = notices(log)
    assert line.startswith(f"mqtt: the broker at {broker.url} refused the agent's credentials")
    assert "check [mqtt] username and the password in mqtt.password_file" in line
    assert "\n" not in line and "wrong" not in line  # never the password


async def test_a_tool_publishes_and_answers_within_its_bound_when_the_house_is_down(
        tmp_path: Path, broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    settings = config(tmp_path, broker, extra=LIGHT)
    link = link_of(settings)
    tools = Toolbox(house_tools(settings.mqtt.tools, link))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: link.connected)

    def call(arguments: str) -> str:
        return tools.run(ToolCall("call-1", "kitchen_light", arguments))

    async with Subscriber(broker, "home/#") as house:
        result = await asyncio.to_thread(call, '{"state": "ON"}')
        assert result == "done: sent 'ON' to home/kitchen/light/set"
        await house.wait_for("home/kitchen/light/set", "ON")
        refused = await asyncio.to_thread(call, '{"state": "BRIGHT"}')
        assert refused == "error: argument 'state' must be one of 'ON', 'OFF'"
    assert broker.process is not None
    broker.process.send_signal(signal.SIGSTOP)  # connected, but it answers nothing
    try:
        began = time.monotonic()
        hung = await asyncio.to_thread(call, '{"state": "OFF"}')
        waited = time.monotonic() - began
    finally:
        broker.process.send_signal(signal.SIGCONT)
    assert hung.startswith(UNREACHABLE) and "did not confirm within 800 ms" in hung, hung
    assert 0.8 <= waited < 0.8 + 1.0
    broker.stop()
    await until(lambda: not link.connected)
    began = time.monotonic()
    down = await asyncio.to_thread(call, '{"state": "OFF"}')
    assert down.startswith(UNREACHABLE) and "nothing was switched" in down
    assert time.monotonic() - began < 0.8 + 1.0  # timeout_ms, and then some
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_over_tls_the_broker_is_checked_against_the_ca_file(tmp_path: Path,
                                                                  tls_broker: Broker) -> None:
    assert tls_broker.authority is not None
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, tls_broker, extra=f'ca_file = "{tls_broker.authority}"\n'))
    running = asyncio.create_task(link.run(log, log.clock))
    async with Subscriber(tls_broker, f"{TOPIC}/#") as house:
        await house.wait_for(f"{TOPIC}/state", "waiting")
        assert house.last(f"{TOPIC}/availability") == "online"
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert notices(log)[0] == f"mqtt: connected to {tls_broker.url}"

    stranger = make_authority(tmp_path / "other-ca", "someone else's CA")
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, tls_broker, extra=f'ca_file = "{stranger}"\n'))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: len(notices(log)) == 1)
    await asyncio.sleep(1.5)  # it tries again after 1 s: still one line
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    (line,) = notices(log)
    assert not link.connected
    assert line.startswith(f"mqtt: the broker at {tls_broker.url} showed a certificate "
                           "that mqtt.ca_file did not sign"), line


async def test_tls_to_a_listener_without_it_is_one_line(tmp_path: Path, broker: Broker) -> None:
    plain = Broker(broker.directory, broker.port)
    plain.authority = make_authority(tmp_path / "ca", "a CA the broker does not use")
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, plain, extra=f'ca_file = "{plain.authority}"\n'))
    running = asyncio.create_task(link.run(log, log.clock))
    await until(lambda: len(notices(log)) == 1)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    (line,) = notices(log)
    assert line.startswith(f"mqtt: the broker at {plain.url} broke off the TLS handshake"), line
    assert f"does it listen for TLS on port {broker.port}?" in line


async def test_what_the_house_publishes_to_say_is_said_and_a_bad_message_is_one_line(
        tmp_path: Path, broker: Broker) -> None:
    await publish(broker, f"{TOPIC}/say", "An old message.", retain=True)  # before the agent
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker, extra="announcements = true\n"))
    said: list[str] = []

    def announce(words: str) -> str | None:
        if len(said) == 2:
            return "5 announcements are waiting to be said already"
        said.append(words)
        return None

    running = asyncio.create_task(link.run(log, log.clock, announce))
    await until(lambda: link.connected)
    await until(lambda: len(notices(log)) == 2)  # connected; the retained one is refused
    await publish(broker, f"{TOPIC}/say", "Dinner\u202e is\tready\u200b.\n")
    await publish(broker, f"{TOPIC}/say", b"\xff\xfe not text")
    await publish(broker, f"{TOPIC}/say", "word " * 120)
    await publish(broker, f"{TOPIC}/say", " \n ")
    await publish(broker, f"{TOPIC}/say", "The washing machine is done.")
    await publish(broker, f"{TOPIC}/say", "One too many.")
    await until(lambda: len(notices(log)) == 6)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert said == ["Dinner is ready .", "The washing machine is done."]
    # Home Assistant sees a notify entity whose messages go to that topic.
    notify = json.loads(link.discovery()["homeassistant/notify/edge-agent_kitchen/say/config"])
    assert notify["command_topic"] == f"{TOPIC}/say" and notify["name"] == "Say"
    refused = f"mqtt: a message to {TOPIC}/say is not said: "
    assert notices(log)[1:] == [
        refused + "it is retained (publish announcements with retain off)",
        refused + "it is not UTF-8 text",
        refused + "it is 599 characters long, more than 500",
        refused + "it holds no words",
        refused + "5 announcements are waiting to be said already"]


async def test_without_announcements_nothing_the_house_publishes_is_said(
        tmp_path: Path, broker: Broker) -> None:
    log = EventLog(MonotonicClock())
    link = link_of(config(tmp_path, broker))
    said: list[str] = []
    running = asyncio.create_task(link.run(log, log.clock, lambda words: said.append(words)))
    await until(lambda: link.connected)
    async with Subscriber(broker, f"{TOPIC}/#") as house:
        await publish(broker, f"{TOPIC}/say", "Dinner is ready.")
        await house.wait_for(f"{TOPIC}/say", "Dinner is ready.")  # the broker passed it on
        await asyncio.sleep(0.3)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    assert said == [] and notices(log) == [f"mqtt: connected to {broker.url}"]


@pytest.mark.parametrize(("text", "key", "says"), [
    ('[mqtt]\nurl = "mqtt://user:pw@10.0.0.2"\n', "mqtt.url", "must not hold a user or password"),
    ('[mqtt]\nurl = "http://10.0.0.2"\n', "mqtt.url", "must be an mqtt://"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\nca_file = "/etc/ca.pem"\n', "mqtt.ca_file",
     "is for an mqtts:// broker"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\ntopic = "home/#"\n', "mqtt.topic", "without the wildcards"),
    ('[[mqtt.tools]]\nname = "x"\n', "mqtt.tools", "needs mqtt.url"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\n' + LIGHT.replace("{state}", "{level}"),
     "mqtt.tools[0].payload", "names {level}, which is not one of the tool's parameters"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\n' + LIGHT.replace('"string"', '"colour"'),
     "mqtt.tools[0].parameters.state.type", "must be one of 'string'"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\n' + LIGHT.replace("kitchen_light", "kitchen light"),
     "mqtt.tools[0].name", "must be 1-64 letters, digits or '_'"),
    ('[mqtt]\nurl = "mqtt://10.0.0.2"\n' + LIGHT + LIGHT, "mqtt.tools[1].name", "names two tools"),
])
def test_a_bad_mqtt_config_is_one_error_naming_its_key(text: str, key: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "test.toml")
    assert caught.value.key == key and says in caught.value.reason, caught.value


def test_a_password_file_others_can_read_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "mqtt-password"
    secret.write_text("pw\n")
    secret.chmod(0o644)
    settings = parse_config(f'[mqtt]\nurl = "mqtt://10.0.0.2"\npassword_file = "{secret}"\n',
                            "test.toml")
    with pytest.raises(ConfigError, match="may be read or changed by others"):
        build_house(settings)
