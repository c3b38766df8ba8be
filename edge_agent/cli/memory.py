"""`edge-agent sessions ...` and `edge-agent memory ...`: the memory database for operators.

Part of the command line (messages and exit codes are made here and in `cli`). Every command
opens the database the config names (`data_dir/edge-agent.db`). Reading commands may run while
the agent runs (read-only; WAL: they never block it); the commands that change it (`sessions
delete`, `memory forget`, `memory consolidate`) take its writer lock, so they are refused while
an agent or a `demo --db` writes it, naming that process. Every stored string is printed
escaped: a transcript or an identity never drives the operator's terminal.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.errors import ConfigError
from edge_agent.files.jsonfile import json_text, write_json
from edge_agent.memory.consolidate import consolidate
from edge_agent.memory.context import KEY_NAMES
from edge_agent.memory.database_file import database_error, exists_as_file
from edge_agent.memory.record import named_session, require_database, session_record
from edge_agent.memory.store import MemoryStore
from edge_agent.printable import escape_controls
from edge_agent.replay import EXIT_DIFFERS


def add_parsers(commands: Any) -> None:
    sessions = commands.add_parser("sessions", help="list, show, export and delete the sessions "
                                                    "in the memory database")
    sessions.set_defaults(handler=run)
    actions = sessions.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every session: id, start, state, turns")
    show = actions.add_parser("show", help="one session's turns (heard vs generated)")
    show.add_argument("id", help="session id (or an unambiguous prefix)")
    show.add_argument("--json", action="store_true",
                      help="print the session record (the same record as `demo --json`)")
    export = actions.add_parser("export", help="the record with its summaries and facts, as JSON")
    export.add_argument("id")
    export.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    delete = actions.add_parser("delete", help="forget a session: its turns, units, events, "
                                               "summaries and the facts it gave")
    delete.add_argument("id")
    replay = actions.add_parser(
        "replay", help="play a recorded session again through the current code and config "
                       "(virtual clock) and show which turn-taking decisions and heard texts "
                       f"would differ (exit {EXIT_DIFFERS} if any)")
    replay.add_argument("id", help="session id (or an unambiguous prefix)")
    replay.add_argument("--json", type=Path, metavar="OUT",
                        help="also write the comparison here (JSON)")
    replay.add_argument("--echo-gain", type=float, default=0.0, metavar="G",
                        help="the microphone hears the agent at this level (0-1; a demo's "
                             "echo_gain, which the record does not keep; ignored with kept "
                             "audio, which holds the echo the microphone heard)")

    memory = commands.add_parser("memory", help="facts, profiles and consolidation")
    memory.set_defaults(handler=run)
    memory_actions = memory.add_subparsers(dest="action", required=True)
    memory_actions.add_parser("show", help="profiles, current facts, last summaries")
    forget = memory_actions.add_parser("forget", help="delete every value of one fact key")
    forget.add_argument("key", help='e.g. "phone" or "booking_id"')
    memory_actions.add_parser("consolidate", help="merge duplicate facts, newest wins on a "
                                                  "contradiction, drop expired facts")


WRITING = {("sessions", "delete"), ("memory", "forget"), ("memory", "consolidate")}
"""The commands that change the database: they take its writer lock (refused while an agent
writes it); every other command only reads."""


def run(config: Config, args: argparse.Namespace) -> int:
    path = config.db_path
    session_id = getattr(args, "id", None)
    if session_id is not None and not session_id.strip():
        raise ConfigError(f"edge-agent {args.command} {args.action}", "ID",
                          "is empty: give a session id or a prefix of one (`edge-agent sessions "
                          "list` shows them)")
    if not exists_as_file(path):
        if session_id is not None:
            require_database(path, session_id)
        print(f"no memory database yet at {path} (the agent creates it on its first run)")
        return 0
    writing = (args.command, args.action) in WRITING
    store = MemoryStore.open(path) if writing else MemoryStore.open_reader(path)
    try:
        if args.command == "sessions" and args.action == "replay":
            return _replay(config, store, args)
        if args.command == "sessions":
            return _sessions(store, args)
        return _memory(store, args)
    except sqlite3.Error as exc:  # locked by another program, a table gone, a full disk
        raise database_error(path, exc) from None
    finally:
        store.close()


def _replay(config: Config, store: MemoryStore, args: argparse.Namespace) -> int:
    from edge_agent.replay.report import run_replay  # loads the engines' modules

    if not 0.0 <= args.echo_gain <= 1.0:
        raise ConfigError("sessions replay", "--echo-gain",
                          f"must be between 0 and 1 (got {args.echo_gain:g})")
    return run_replay(config, store, str(named_session(store, args.id)["id"]), args.json,
                      args.echo_gain, lambda line: print(line, flush=True))


def _sessions(store: MemoryStore, args: argparse.Namespace) -> int:
    if args.action == "list":
        rows = store.sessions()
        print(f"{'id':14}{'started (UTC)':21}{'state':8}{'turns':>6}  {'how':10}identity")
        for row in rows:
            _show(f"{_text(row['id']):14}{_text(row['started_at'])[:19]:21}"
                  f"{_text(row['state']):8}{row['turns']:>6}  {_text(row['how']):10}"
                  f"{_text(row['identity'])}")
        _show(f"{len(rows)} session(s) in {store.path}")
        return 0
    session = named_session(store, args.id)
    session_id = session["id"]
    if args.action == "delete":
        store.delete_session(session_id)
        _show(f"session {session_id} deleted (turns, units, events, requests, summaries and "
              "the facts it gave)")
        return 0
    record = session_record(store, [session_id])
    if args.action == "export":
        data = {**record, "summaries": store.summaries(session_id),
                "facts": store.session_facts(session_id)}
        _emit(data, args.output)
        return 0
    if args.json:
        _emit(dict(record), None)
        return 0
    _show(f"session {session_id} ({session['state']}, {session['how']}, started "
          f"{_text(session['started_at'])[:19]} UTC, identity {session['identity']})")
    for turn in record["turns"]:
        if turn["role"] == "tool":
            _show(f"  tool   {turn['name']}({turn['arguments']}) -> {turn['result']}")
        elif turn["role"] == "assistant" and turn["interrupted"]:
            unheard = turn["generated"][len(turn["text"]):]
            _show(f"  agent  {turn['text']} [cut; never heard: {unheard}]")
        else:
            who = "agent" if turn["role"] == "assistant" else "user"
            _show(f"  {who:6} {turn['text']}")
    summary = store.latest_summary(session_id, "session") or store.latest_summary(
        session_id, "running")
    if summary:
        _show(f"summary ({summary['kind']}): {summary['text']}")
    return 0


def _memory(store: MemoryStore, args: argparse.Namespace) -> int:
    if args.action == "forget":
        count = store.forget_fact(args.key)
        _show(f"forgot {count} value(s) of {args.key!r}")
        return 0
    if args.action == "consolidate":
        with store.transaction(durable=True):
            report = consolidate(store, datetime.now(UTC).isoformat(timespec="milliseconds"))
        print(f"consolidated: {report.merged} duplicate(s) merged, {report.resolved} "
              f"contradiction(s) resolved (newest kept), {report.expired} expired fact(s) dropped")
        return 0
    identities = store.identities()
    if not identities:
        print("memory is empty")
    for identity in identities:
        profile = store.profile(identity) or {}
        _show(f"{identity}" + (f" (name: {profile['name']})" if profile.get("name") else ""))
        for fact in store.open_facts(identity):
            key = KEY_NAMES.get(fact["key"], fact["key"])
            _show(f"  {key}: {fact['value']}  ({fact['source']}, {fact['at'][:19]})")
        last = store.last_closed_session(identity)
        summary = store.latest_summary(last["id"], "session") if last else None
        if summary:
            _show(f"  last session {summary['session_id']}: {summary['text']}")
    return 0


def _emit(data: dict[str, Any], output: Path | None) -> None:
    if output is None:
        sys.stdout.write(json_text(data))
        return
    write_json(data, output)
    print(f"exported to {output}")


def _text(value: object) -> str:
    """A stored value as text (a hand-edited row may hold a number or NULL anywhere)."""
    return "" if value is None else str(value)


def _show(line: str) -> None:
    """Stored text came from callers and models: control characters are shown escaped, so a
    transcript never drives the operator's terminal."""
    print(escape_controls(line))
