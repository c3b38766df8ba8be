"""Addresses of a venue's servers on the LAN, as the config names them: the LLM server's base
URL (`[llm] server`). One parser for the config's check, the engine that connects and the
service unit that must be allowed to reach them (`IPAddressAllow=`, see `network_allowance`)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from edge_agent.config import Config
from edge_agent.errors import ConfigError
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


LOOPBACK = ("127.0.0.0/8", "::1/128")
"""Where a local resolver listens (systemd-resolved's stub at 127.0.0.53)."""
Resolve = Callable[[str], Sequence[str]]


def lan_hosts(config: Config) -> list[str]:
    """The hosts of the venue's servers `config` names (none: the kiosk needs no network)."""
    return [parse_server_url(config.llm.server, config.source).host] if config.llm.server else []


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
            raise ConfigError("config", "llm.server", f"the host {shown(host, 80)!r} does not "
                              "resolve: give its address, or fix the name")
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
