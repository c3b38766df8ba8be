"""`edge-agent sync status` and `edge-agent sync --once`: the copy to the venue's PostgreSQL.

Part of the command line. `status` reads the kiosk's own database only (the queue and how the
last sends went), so it answers at once even while the venue is down; `--once` sends the whole
queue now and takes the venue's newer facts and profile of this identity, then exits (0, or
12 with the reason when the venue cannot be used: nothing queued is lost). Both may run while
the agent runs: sending twice stores nothing twice.
"""

from __future__ import annotations

import argparse
from typing import Any

from edge_agent.config import Config
from edge_agent.errors import ConfigError
from edge_agent.files.jsonfile import json_text
from edge_agent.printable import escape_controls
from edge_agent.sync.status import status_record


def add_parser(commands: Any) -> None:
    sync = commands.add_parser(
        "sync", help="the copy of the memory database in the venue's PostgreSQL ([sync] url): "
                     "`sync status`, `sync --once`")
    sync.add_argument("action", nargs="?", choices=["status"],
                      help="status: the queue, the last success and the last error")
    sync.add_argument("--once", action="store_true",
                      help="send everything queued now, take the venue's newer facts, exit")
    sync.add_argument("--json", action="store_true", help="status as JSON")
    sync.add_argument("--resend-refused", action="store_true",
                      help="with --once: send the rows the venue refused again")
    sync.set_defaults(handler=run)


def run(config: Config, args: argparse.Namespace) -> int:
    if (args.action == "status") == args.once:
        raise ConfigError("edge-agent sync", "ACTION", "say `edge-agent sync status` or "
                          "`edge-agent sync --once` (one of them)")
    if args.action == "status":
        return _status(config, args.json)
    if not config.sync.url:
        raise ConfigError(config.source, "sync.url", "is not set: name the venue's PostgreSQL, "
                          "like postgresql://kiosk@10.0.0.5:5432/venue")
    from edge_agent.app import venue_sync
    sync = venue_sync(config, config.db_path)
    try:
        if args.resend_refused:
            print(f"{sync.outbox.resend_refused()} refused row(s) queued again")
        backfilled = sync.prepare_queue()
        if backfilled:
            print(f"every row of {config.db_path} queued for {sync.address}")
        done = sync.run_once()
    finally:
        sync.close()
    if done.error is not None:
        raise done.error
    print(f"sync: {done.sent} row(s) sent to {sync.address} in {done.batches} batch(es); "
          f"{done.taken} fact(s) taken from other kiosks; {done.waiting} waiting"
          + (f"; {done.refused} refused (see `edge-agent sync status`)" if done.refused else ""))
    return 0


def _status(config: Config, as_json: bool) -> int:
    record = status_record(config)
    if as_json:
        print(json_text(dict(record)))
        return 0
    if record["url"] is None:
        print("sync: never switched on (set [sync] url, then run the agent or `edge-agent sync "
              "--once`)")
        return 0
    def text(value: object) -> str:
        return escape_controls(str(value)) if value is not None else "never"

    age = record["oldest_waiting_s"]
    print(f"venue store:   {text(record['url'])} as kiosk {text(record['kiosk_id'])}")
    print(f"queue:         {record['queue']}, {record['waiting']} row(s) waiting"
          + (f", the oldest for {age:g} s" if age is not None else ""))
    print(f"sent:          {record['sent_rows']} row(s); last success {text(record['last_success_at'])}")
    print(f"last attempt:  {text(record['last_attempt_at'])}")
    if record["last_error"]:
        print(f"last error:    {text(record['last_error'])} ({text(record['last_error_at'])}, "
              f"{record['failures']} failure(s) in a row)")
    print(f"venue memory:  last read {text(record['pulled_at'])}")
    if record["refused"]:
        print(f"refused:       {record['refused']} row(s) set aside, e.g.:")
        for refusal in record["refusals"]:
            print(f"  {refusal['table']} {text(refusal['key'])}: {text(refusal['reason'])}")
    return 0
