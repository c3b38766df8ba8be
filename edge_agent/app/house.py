"""The composition root's house: `[mqtt]` -> the link to the broker (None without one)."""

from __future__ import annotations

import socket
from pathlib import Path

from edge_agent.config import Config
from edge_agent.config.lan import parse_broker_url, read_secret
from edge_agent.errors import ConfigError
from edge_agent.house.link import HouseLink, HouseSettings

MQTT_PASSWORD_VARIABLE = "EDGE_AGENT_MQTT_PASSWORD"
"""Where the broker password is read from when `[mqtt] password_file` is not set."""


def build_house(config: Config) -> HouseLink | None:
    """The link `[mqtt]` asks for, its password read now (a missing or unsafe file is a
    ConfigError before any model loads); None without `url`."""
    mqtt = config.mqtt
    if not mqtt.url:
        return None
    address = parse_broker_url(mqtt.url, config.source)
    password = read_secret(mqtt.password_file, MQTT_PASSWORD_VARIABLE, config.source,
                           "mqtt.password_file", "the broker password")
    if mqtt.ca_file and not Path(mqtt.ca_file).is_file():
        raise ConfigError(config.source, "mqtt.ca_file", f"{mqtt.ca_file} is not a file: name "
                          "the CA certificate (PEM) that signed the broker's")
    return HouseLink(HouseSettings(
        address=address, username=mqtt.username, password=password, ca_file=mqtt.ca_file,
        topic=mqtt.topic or f"edge-agent/{socket.gethostname()}",
        discovery_prefix=mqtt.discovery_prefix, publish_transcripts=mqtt.publish_transcripts,
        announcements=mqtt.announcements,
        timeout_s=mqtt.timeout_ms / 1000,
        idle_state="listening" if config.session.start == "immediate" else "waiting"))
