"""Addresses on the LAN, as the config names them: the LLM server's base URL (`[llm] server`),
the venue's PostgreSQL (`[sync] url`) and where the kiosk's screen is served (`[screen]
listen`). One parser each for the
config's check, the client that connects and the service unit that must be allowed to reach
them (`IPAddressAllow=`, see `network_allowance`); one reader of their credentials."""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from edge_agent.config import Config
from edge_agent.errors import ConfigError
from edge_agent.files import NotRegularFileError, open_regular
from edge_agent.printable import shown

API_KEY_VARIABLE = "EDGE_AGENT_LLM_API_KEY"
"""Where the LLM server's API key is read from when `[llm] server_key_file` is not set."""


@dataclass(frozen=True)
class ServerAddress:
    """Where the server is: `{scheme}://{host}:{port}{path}/chat/completions`."""

    scheme: str
    host: str
    port: int
    path: str
    """The base path, "/v1" for most servers (no trailing slash)."""

    @property
    def shown(self) -> str:
        """The address as a person reads it (never holds credentials: they are refused)."""
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"{self.scheme}://{host}:{self.port}{self.path}"


def parse_server_url(url: str, source: str = "config", key: str = "llm.server") -> ServerAddress:
    """`url` ("http://10.0.0.5:8080/v1") as an address; ConfigError naming what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(source, key, f"must be an http:// or https:// address with a host, "
                          f"like http://10.0.0.5:8080/v1, got {shown(url, 80)!r}")
    if parts.username or parts.password:
        raise ConfigError(source, key, "must not hold credentials: put the API key in the file "
                          f"llm.server_key_file names, or in ${API_KEY_VARIABLE}")
    if parts.query or parts.fragment:
        raise ConfigError(source, key, f"must be the API's base address without ?query or "
                          f"#fragment, got {shown(url, 80)!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(source, key, f"has no valid port (1-65535): {shown(url, 80)!r}") from None
    return ServerAddress(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))


@dataclass(frozen=True)
class ListenAddress:
    """Where the kiosk's screen is served."""

    host: str
    """An IP address ("127.0.0.1", "::1", "0.0.0.0") or "localhost"."""
    port: int

    @property
    def loopback(self) -> bool:
        """Only this machine can reach it."""
        return self.host == "localhost" or ipaddress.ip_address(self.host).is_loopback

    @property
    def numeric(self) -> ListenAddress:
        """The same, "localhost" as 127.0.0.1: systemd listens on addresses, not names, and a
        browser sent to it reaches it there."""
        return ListenAddress("127.0.0.1", self.port) if self.host == "localhost" else self

    @property
    def shown(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str, source: str = "config", key: str = "screen.listen") -> ListenAddress:
    """`text` ("127.0.0.1:8780", "[::]:8780") as an address; ConfigError naming what is wrong."""
    example = 'like "127.0.0.1:8780", "0.0.0.0:8780" or "[::1]:8780"'
    host, colon, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError(source, key, f"must be an address and a port (1-65535), {example}, "
                          f"got {shown(text, 80)!r}")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ConfigError(source, key, f"must name an IP address of this machine (or "
                              f"localhost), {example}, got {shown(host, 80)!r}") from None
    return ListenAddress(host, int(port_text))


@dataclass(frozen=True)
class BrokerAddress:
    """The house's MQTT broker: `mqtt://{host}:{port}` or, with TLS, `mqtts://`."""

    host: str
    port: int
    tls: bool

    @property
    def shown(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'mqtts' if self.tls else 'mqtt'}://{host}:{self.port}"


def parse_broker_url(url: str, source: str = "config", key: str = "mqtt.url") -> BrokerAddress:
    """`url` ("mqtt://192.168.1.10:1883", "mqtts://broker.home:8883") as an address;
    ConfigError naming what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(source, key, "must be an mqtt:// (or, with TLS, mqtts://) address with "
                          f"a host, like mqtt://192.168.1.10:1883, got {shown(url, 80)!r}")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(source, key, "must not hold a user or password: set mqtt.username, "
                          "and put the password in the file mqtt.password_file names")
    if parts.path.strip("/") or parts.query or parts.fragment:
        raise ConfigError(source, key, f"is only a host and a port, got {shown(url, 80)!r}")
    try:
        port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
    except ValueError:
        raise ConfigError(source, key, f"has no valid port (1-65535): {shown(url, 80)!r}") from None
    return BrokerAddress(parts.hostname, port, parts.scheme == "mqtts")


SYNC_PASSWORD_VARIABLE = "EDGE_AGENT_SYNC_PASSWORD"
"""Where the venue database's password is read from when `[sync] password_file` is not set."""


@dataclass(frozen=True)
class DatabaseAddress:
    """The venue's PostgreSQL: `postgresql://{user}@{host}:{port}/{database}?{options}`."""

    url: str
    """The address as configured (libpq reads it; it holds no password: one is refused)."""
    host: str
    port: int
    database: str
    user: str
    options: tuple[tuple[str, str], ...]
    """libpq's connection options after "?" (sslmode, sslrootcert...), passed through."""

    @property
    def shown(self) -> str:
        """The address as a person reads it, without its options."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        user = f"{self.user}@" if self.user else ""
        return f"postgresql://{user}{host}:{self.port}/{self.database}"


def parse_database_url(url: str, source: str = "config", key: str = "sync.url"
                       ) -> DatabaseAddress:
    """`url` ("postgresql://kiosk@10.0.0.5:5432/venue?sslmode=require") as an address;
    ConfigError naming what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
        raise ConfigError(source, key, "must be a postgresql:// address with a host, like "
                          f"postgresql://kiosk@10.0.0.5:5432/venue, got {shown(url, 80)!r}")
    options = tuple(parse_qsl(parts.query, keep_blank_values=True))
    if parts.password is not None or any(name == "password" for name, _ in options):
        raise ConfigError(source, key, "must not hold the password: put it in the file "
                          f"sync.password_file names, or in ${SYNC_PASSWORD_VARIABLE}")
    if "," in parts.netloc.rpartition("@")[2]:
        raise ConfigError(source, key, "names several hosts; libpq would try each, but the "
                          "service is allowed to reach the hosts the config names, one per "
                          "address: name one host (for a standby, a name that moves to the "
                          f"primary), got {shown(url, 80)!r}")
    if any(name in ("host", "hostaddr", "port", "dbname") for name, _ in options):
        raise ConfigError(source, key, "names its host, port and database in the address "
                          "itself, not as ?options")
    if any(name == "service" for name, _ in options):
        raise ConfigError(source, key, "must not name a ?service: a service file can send libpq "
                          "to another address than the one the service is allowed to reach; "
                          "write the host, port and database in the address")
    if any(name == "passfile" for name, _ in options):
        raise ConfigError(source, key, "must not name a ?passfile: put the password in the file "
                          "sync.password_file names (checked like ~/.pgpass and never read "
                          f"whole), or in ${SYNC_PASSWORD_VARIABLE}")
    try:
        port = parts.port or 5432
    except ValueError:
        raise ConfigError(source, key, f"has no valid port (1-65535): {shown(url, 80)!r}") from None
    database = parts.path.lstrip("/")
    if not database or "/" in database:
        raise ConfigError(source, key, f"must name one database after the host, like "
                          f".../venue, got {shown(url, 80)!r}")
    return DatabaseAddress(url.strip(), parts.hostname, port, database, parts.username or "",
                           options)


SECRET_MAX_BYTES = 4096
"""The most a credential file may hold: a key or a password is one line, never a whole file."""


def read_secret(secret_file: str, variable: str, source: str, key: str, what: str) -> str:
    """A credential: the first line of `secret_file` (config key `key`), else the environment
    variable `variable`, else "". Its text never appears in an error.

    The file is checked as libpq checks `~/.pgpass`, and more: it must be a regular file, not
    a link (a link to /etc/shadow would be read as a key and sent to the server), a device
    (/dev/zero never ends) or a FIFO (it would hold the start until a writer comes); nobody
    but its owner may read it, except its group when root owns it (root:edge-agent 0640, as a
    service's secrets are kept); no group or other may write it; and it holds at most
    `SECRET_MAX_BYTES`."""
    if not secret_file:
        return os.environ.get(variable, "").strip()
    path = Path(secret_file).expanduser()
    data = _read_secret_file(path, source, key)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise ConfigError(source, key, f"{path} is not UTF-8 text: its first line must be "
                          f"{what}") from None
    if not lines or not lines[0].strip():
        raise ConfigError(source, key, f"{path} is empty: its first line must be {what}")
    return lines[0].strip()


def _read_secret_file(path: Path, source: str, key: str) -> bytes:
    try:
        handle = open_regular(path, os.O_RDONLY)
    except NotRegularFileError as exc:
        fix = ("name the file itself (a link can point at any file, and its text would be sent)"
               if exc.is_link else "name a regular file that holds the secret")
        raise ConfigError(source, key, f"{path} is {exc.kind}: {fix}") from None
    except OSError as exc:
        raise ConfigError(source, key, f"cannot read {path}: {type(exc).__name__}: "
                          f"{exc.strerror}") from None
    with os.fdopen(handle, "rb") as file:
        status = os.fstat(file.fileno())
        mode = stat.S_IMODE(status.st_mode)
        group_may_read = status.st_uid == 0
        if mode & 0o007 or mode & 0o020 or (mode & 0o040 and not group_may_read):
            raise ConfigError(source, key, f"{path} may be read or changed by others (mode "
                              f"{mode:04o}): run `chmod 600 {path}` (or, owned by root, "
                              f"`chmod 640` with the service's group)")
        data = file.read(SECRET_MAX_BYTES + 1)
    if len(data) > SECRET_MAX_BYTES:
        raise ConfigError(source, key, f"{path} holds more than {SECRET_MAX_BYTES} bytes: it "
                          f"must hold the secret on its first line, nothing else")
    return data


LOOPBACK = ("127.0.0.0/8", "::1/128")
"""Where a local resolver listens (systemd-resolved's stub at 127.0.0.53)."""
Resolve = Callable[[str], Sequence[str]]


def lan_hosts(config: Config) -> list[str]:
    """The hosts of the venue's servers `config` names (none: the kiosk needs no network)."""
    hosts = [parse_server_url(config.llm.server, config.source).host] if config.llm.server else []
    if config.sync.url:
        hosts.append(parse_database_url(config.sync.url, config.source).host)
    if config.mqtt.url:
        hosts.append(parse_broker_url(config.mqtt.url, config.source).host)
    return list(dict.fromkeys(hosts))


def network_allowance(hosts: Sequence[str], resolve: Resolve | None = None,
                      resolv_conf: Path = Path("/etc/resolv.conf")) -> list[str]:
    """The addresses the service must reach for `hosts`: each address given as such; for a
    name, the addresses it resolves to now and the name servers that resolve it (the loopback
    stub, those /etc/resolv.conf lists). Empty for no hosts."""
    resolve = resolve or _resolve
    allowed: list[str] = []
    for host in hosts:
        try:
            allowed.append(str(ipaddress.ip_address(host)))
            continue
        except ValueError:
            pass
        found = list(resolve(host))
        if not found:
            raise ConfigError("config", "llm.server / sync.url / mqtt.url",
                              f"the host {shown(host, 80)!r} "
                              "does not resolve: give its address, or fix the name")
        allowed += [*found, *LOOPBACK, *_name_servers(resolv_conf)]
    return list(dict.fromkeys(allowed))


def _resolve(host: str) -> list[str]:
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except OSError:
        return []


def _name_servers(resolv_conf: Path) -> list[str]:
    try:
        lines = resolv_conf.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    servers = []
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0] == "nameserver":
            try:
                servers.append(str(ipaddress.ip_address(words[1].split("%")[0])))
            except ValueError:
                continue
    return servers
