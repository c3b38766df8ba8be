"""The doctor's lines about the venue: its LLM server on the LAN (reached, timed, and how it
takes tools), its PostgreSQL, and its knowledge files. Each asks the real thing and changes
nothing there."""

from __future__ import annotations

import contextlib
import time

from edge_agent.config import Config
from edge_agent.doctor.report import CheckRecord, check
from edge_agent.engines.base import ToolSpec


def llm_server_line(config: Config) -> CheckRecord:
    """The LAN server `[llm] server` names, asked for one word: how long its first word takes
    against `server_timeout_ms` (past it, the kiosk answers on-device)."""
    from edge_agent.app import lan_server
    from edge_agent.engines.llm.server import ServerUnavailable

    llm = config.llm
    server = lan_server(config, timeout_s=30.0, max_tokens=4)
    address = server.address
    began = time.monotonic()
    try:
        with contextlib.closing(server.stream([{"role": "user", "content": "Say OK."}])) as pieces:
            next(pieces)
    except ServerUnavailable as exc:
        return check("llm server", "warn", f"{exc}: replies come from the on-device model",
                     "start the server, or check [llm] server (its address and port) and the "
                     "network between them")
    took_ms = (time.monotonic() - began) * 1000
    if took_ms > llm.server_timeout_ms:
        return check("llm server", "warn", f"{address.shown}: first word in {took_ms:.0f} ms, "
                     f"more than llm.server_timeout_ms ({llm.server_timeout_ms}): replies "
                     "come from the on-device model", "raise llm.server_timeout_ms, or give the "
                     "server a faster model or fewer kiosks")
    detail = (f"{address.shown}: first word in {took_ms:.0f} ms (llm.server_timeout_ms "
              f"{llm.server_timeout_ms})")
    if config.tools.enabled and config.tools.max_hops > 0:
        tools, fix = _server_tools(config)
        if fix:
            return check("llm server", "warn", f"{detail}; {tools}", fix)
        detail += f"; {tools}"
    return check("llm server", "ok", detail)


PING: ToolSpec = {"type": "function", "function": {
    "name": "ping", "description": "Answers pong.",
    "parameters": {"type": "object", "properties": {}}}}
"""The tool `doctor` asks the server to call (nothing runs it)."""


def _server_tools(config: Config) -> tuple[str, str]:
    """How the server takes tools (`[llm] server_tools`), found by asking it to call one: the
    words for the line, and a fix when they will not work."""
    from edge_agent.app import lan_server
    from edge_agent.engines.base import ToolCall
    from edge_agent.engines.llm.server import ServerUnavailable

    server = lan_server(config, timeout_s=30.0, max_tokens=40)
    said: list[str] = []
    server.announce_to(said.append)
    asked = config.llm.server_tools
    try:
        with contextlib.closing(server.stream([{"role": "user", "content": "Call the ping tool."}],
                                              [PING])) as pieces:
            called = any(isinstance(p, ToolCall) for p in pieces)
    except ServerUnavailable as exc:
        return (f"tools ({asked}): {exc}", 'set [llm] server_tools = "json" (or "native" '
                "after starting the server with tool calling: llama-server --jinja)")
    mode = server.tools_mode
    if called:
        return f"tools: {mode} (it called the test tool)", ""
    if mode == "json" and asked == "auto":
        return f"tools: json ({said[0] if said else 'chosen'})", ""
    return (f"tools: {mode}, but asked to call a test tool it answered in words",
            'if its tools never run, set [llm] server_tools = "json" (the JSON reply format, '
            "which the llama.cpp servers enforce), or start it with tool calling")


def knowledge_line(config: Config) -> CheckRecord:
    """The venue's knowledge files read and indexed in this process (the database is not
    touched), with what `knowledge check` would warn about."""
    from edge_agent.app import open_knowledge
    from edge_agent.errors import ConfigError
    from edge_agent.knowledge.check import findings

    try:
        knowledge = open_knowledge(config, None)
    except ConfigError as exc:
        return check("knowledge", "FAIL", str(exc), "correct the file (`edge-agent knowledge "
                     "check FILE` reads it alone); the agent will not start with it")
    assert knowledge is not None  # files are named
    try:
        contents, found = knowledge.contents, findings(knowledge)
    finally:
        knowledge.close()
    detail = (f"{len(contents.files)} file(s), {len(contents.entries)} entries, "
              f"{'opening hours' if contents.schedules else 'no opening hours'}")
    if found:
        return check("knowledge", "warn", f"{detail}; {len(found)} warning(s), the first: "
                     f"{found[0].text}", "see `edge-agent knowledge check` on the files")
    return check("knowledge", "ok", detail)


def venue_store_line(config: Config) -> CheckRecord:
    """The venue's PostgreSQL `[sync] url` names: reached with the configured credentials, its
    schema readable by this edge-agent, and how much waits in the kiosk's queue. Nothing is
    changed there. A warning, not a failure: the kiosk works and queues without it."""
    from edge_agent.app import sync_credentials
    from edge_agent.errors import StoreError, SyncError
    from edge_agent.sync import central
    from edge_agent.sync.status import status_record

    credentials = sync_credentials(config)
    began = time.monotonic()
    try:
        version = central.probe(credentials)
    except SyncError as exc:
        return check("venue store", "warn", f"{exc.where}: {exc.reason}; changes are queued on "
                     "the kiosk meanwhile", exc.fix)
    took_ms = (time.monotonic() - began) * 1000
    queued = ""
    with contextlib.suppress(StoreError):  # no database yet: nothing queued
        record = status_record(config)
        queued = (f"; {record['waiting']} row(s) queued here, last sent "
                  f"{record['last_success_at'] or 'never'}")
    tables = (f"schema {version}" if version
              else "no edge-agent tables yet (the first sync makes them)")
    return check("venue store", "ok", f"{credentials.address.shown} as kiosk "
                 f"{credentials.kiosk_id}: answered in {took_ms:.0f} ms, {tables}{queued}")
