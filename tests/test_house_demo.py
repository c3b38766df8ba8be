"""The house end to end: an `edge-agent demo` process on the real engines with `[mqtt]` pointed
at a real Mosquitto broker. Home Assistant's view of it (discovery, the state as the call goes,
"offline" when the agent stops), a config-declared tool switching a light by a message on
its topic, and the house's announcement said when the agent was free."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from edge_agent.events import ToolUsed
from tests.cli import run_demo
from tests.logged import events_of
from tests.mosquitto import PASSWORD, USER, Broker, Subscriber, broker, publish

__all__ = ["broker"]  # the fixture

pytestmark = [pytest.mark.models, pytest.mark.realtime, pytest.mark.mqtt]

TOPIC = "edge-agent/lobby"
CALL = """
[agent]
greeting = ""
replies = [
  { say = "Switching it on.", tool = "kitchen_light", arguments = { state = "ON" } },
  "The kitchen light is on.",
]

[[caller]]
say = "Turn on the kitchen light, please."
at = 0.5
"""


def house_config(broker: Broker, secret: Path) -> str:
    return (f'[mqtt]\nurl = "{broker.url}"\nusername = "{USER}"\npassword_file = "{secret}"\n'
            f'topic = "{TOPIC}"\nannouncements = true\n'
            '[[mqtt.tools]]\nname = "kitchen_light"\n'
            'description = "Switch the kitchen light on or off."\n'
            'topic = "home/kitchen/light/set"\npayload = "{state}"\n'
            'parameters = { state = { type = "string", enum = ["ON", "OFF"] } }\n')


async def test_the_agent_is_a_device_of_the_house_and_switches_its_light(
        tmp_path: Path, broker: Broker) -> None:
    secret = tmp_path / "mqtt-password"
    secret.write_text(PASSWORD + "\n")
    secret.chmod(0o600)
    async with Subscriber(broker, f"{TOPIC}/#", "home/#", "homeassistant/#") as house:
        running = asyncio.create_task(asyncio.to_thread(
            run_demo, tmp_path, CALL, house_config(broker, secret)))
        await house.wait_for("home/kitchen/light/set", "ON", within=120)
        # The house answers the light with an announcement, while the agent still speaks.
        await publish(broker, f"{TOPIC}/say", "Dinner is ready.")
        demo = await running
        await house.wait_for(f"{TOPIC}/availability", "offline")
    # Said once the reply was over, as a unit of its own, and heard whole.
    last = demo.record["units"][-1]
    assert last["generated"] == last["heard"] == "Dinner is ready.", demo.stdout
    (used,) = events_of(demo.record["events"], ToolUsed)
    assert used.result == "done: sent 'ON' to home/kitchen/light/set", used
    assert ("home/kitchen/light/set", "ON", False) in house.messages
    states = [payload for topic, payload, _ in house.messages if topic == f"{TOPIC}/state"]
    # The call in order: the agent listens (it answers whoever speaks: no wake word), the
    # caller's words are in, it speaks, and it listens again.
    moments = [state for n, state in enumerate(states) if n == 0 or states[n - 1] != state]
    assert moments[:3] == ["listening", "thinking", "speaking"], states
    assert states[-1] == "listening", states
    config = json.loads(house.last("homeassistant/sensor/edge-agent_lobby/state/config") or "{}")
    assert config["state_topic"] == f"{TOPIC}/state"
    assert config["availability_topic"] == f"{TOPIC}/availability"
    assert house.last("homeassistant/sensor/edge-agent_lobby/turn/config") == ""
