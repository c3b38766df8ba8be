"""A real Mosquitto broker for the tests (Debian's `mosquitto`), on 127.0.0.1 with a password
file: started, stopped and restarted on the same port, and a subscriber that collects what it
publishes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import pytest

USER, PASSWORD = "agent", "correct horse battery staple"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_authority(directory: Path, name: str) -> Path:
    """A certificate authority of its own (key and certificate in `directory`): its PEM."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-keyout", str(directory / "ca.key"), "-out", str(directory / "ca.pem"),
                    "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                   check=True, capture_output=True)
    return directory / "ca.pem"


def sign_server_certificate(authority: Path, directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by `authority`'s key: (certificate, key)."""
    key, request, certificate = (directory / "server.key", directory / "server.csr",
                                 directory / "server.pem")
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                          "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
                          "authorityKeyIdentifier=keyid\n")
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key),
                    "-out", str(request), "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", str(request), "-CA", str(authority),
                    "-CAkey", str(authority.with_suffix(".key")), "-CAcreateserial",
                    "-days", "2", "-out", str(certificate), "-extfile", str(extensions)],
                   check=True, capture_output=True)
    return certificate, key


@dataclass
class Broker:
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    authority: Path | None = None
    """With TLS: the CA certificate (PEM) that signed the broker's."""

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.authority else 'mqtt'}://127.0.0.1:{self.port}"

    def use_tls(self) -> None:
        """Listen with TLS only, with a certificate for 127.0.0.1 from a CA of the test's."""
        self.authority = make_authority(self.directory / "ca", "edge-agent test CA")

    def write_files(self) -> None:
        passwords = self.directory / "passwd"
        passwords.touch(mode=0o600)
        subprocess.run(["mosquitto_passwd", "-b", str(passwords), USER, PASSWORD], check=True,
                       capture_output=True)
        lines = [f"listener {self.port} 127.0.0.1", "allow_anonymous false",
                 f"password_file {passwords}", "persistence false"]
        if self.authority is not None:
            certificate, key = sign_server_certificate(self.authority, self.directory)
            lines += [f"cafile {self.authority}", f"certfile {certificate}", f"keyfile {key}"]
        if os.geteuid() == 0:
            lines.append("user root")  # CI runs as root: stay, to read the test's files
        (self.directory / "mosquitto.conf").write_text("\n".join(lines) + "\n")

    def start(self) -> None:
        log = (self.directory / "mosquitto.log").open("ab")
        self.process = subprocess.Popen(
            ["mosquitto", "-c", str(self.directory / "mosquitto.conf")], stdout=log,
            stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 15
        while True:  # ready when it accepts a connection
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            assert self.process.poll() is None, (self.directory / "mosquitto.log").read_text()
            assert time.monotonic() < deadline, "mosquitto did not start listening in 15 s"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


def _running(directory: Path, tls: bool) -> Iterator[Broker]:
    if shutil.which("mosquitto") is None:
        pytest.fail("mosquitto is not installed (apt-get install mosquitto mosquitto-clients); "
                    ".ci/run installs it")
    running = Broker(directory)
    if tls:
        running.use_tls()
    running.write_files()
    running.start()
    yield running
    running.stop()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from _running(tmp_path, tls=False)


@pytest.fixture
def tls_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker that speaks TLS only (mqtts://), its certificate from `authority`."""
    yield from _running(tmp_path, tls=True)


class Subscriber:
    """Collects every message on `topics` (retained ones first), for a test to wait on."""

    def __init__(self, broker: Broker, *topics: str) -> None:
        self._broker = broker
        self._topics = topics
        self.messages: list[tuple[str, str, bool]] = []
        """(topic, payload, retained) in the order they came."""
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def __aenter__(self) -> Subscriber:
        self._task = asyncio.create_task(self._run())
        await asyncio.wait_for(self._ready.wait(), 10)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        authority = self._broker.authority
        context = ssl.create_default_context(cafile=authority) if authority else None
        async with aiomqtt.Client("127.0.0.1", self._broker.port, username=USER,
                                  password=PASSWORD, tls_context=context) as client:
            for topic in self._topics:
                await client.subscribe(topic, qos=1)
            self._ready.set()
            async for message in client.messages:
                payload = message.payload
                text = payload.decode() if isinstance(payload, bytes) else str(payload)
                self.messages.append((str(message.topic), text, bool(message.retain)))

    def last(self, topic: str) -> str | None:
        found = [payload for name, payload, _ in self.messages if name == topic]
        return found[-1] if found else None

    async def wait_for(self, topic: str, payload: str, within: float = 10.0) -> None:
        deadline = time.monotonic() + within
        while self.last(topic) != payload:
            assert time.monotonic() < deadline, (topic, payload, self.messages[-10:])
            await asyncio.sleep(0.02)


async def publish(broker: Broker, topic: str, payload: str | bytes, retain: bool = False) -> None:
    """Publish one message to `broker`, as the house would (QoS 1: the broker has it when this
    returns)."""
    async with aiomqtt.Client("127.0.0.1", broker.port, username=USER,
                              password=PASSWORD) as client:
        await client.publish(topic, payload, qos=1, retain=retain)
