"""`edge-agent inspect SESSION_ID [-o page.html] [--json FILE]`: a session as one HTML page.

Part of the command line. The session comes from the memory database the config names (an id
or an unambiguous prefix, as `sessions list` shows them), with its kept audio drawn as
waveforms; or, with `--json FILE`, from a session record file (`demo --json`, `run --json`,
`sessions show --json`), the id then optional. The page is written whole, readable by its
owner only (it holds transcripts), and opens offline in any browser.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from edge_agent.config import Config
from edge_agent.errors import ConfigError


def add_parser(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect", help="draw a session as one self-contained HTML page: both voices on one "
                        "time axis, every agent word where it played (heard or never heard), "
                        "barge-ins, backchannels, echo, tools and each turn's latency")
    inspect.add_argument("session_id", nargs="?", metavar="SESSION_ID",
                         help="session id or an unambiguous prefix (`edge-agent sessions list`); "
                              "optional with --json")
    inspect.add_argument("-o", "--output", type=Path,
                         help="page to write (default: session-<id>.html here)")
    inspect.add_argument("--json", dest="record_file", type=Path, metavar="FILE",
                         help="draw this session record file instead of reading the memory "
                              "database (no waveforms: a record holds no audio)")
    inspect.set_defaults(handler=run)


def run(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.inspect.layout import AxisTooLongError
    from edge_agent.inspect.page import render_page, write_page
    from edge_agent.inspect.source import read_record_file, read_session
    from edge_agent.inspect.timeline import build_timeline
    from edge_agent.memory.kept_audio import AudioClip

    clips: list[AudioClip] = []  # a record file holds no audio
    if args.record_file is not None:
        record = read_record_file(args.record_file, args.session_id)
        source = str(args.record_file)
    elif args.session_id:
        record, clips = read_session(config.db_path, args.session_id)
        source = f"{config.db_path}: session {record['session_id']}"
    else:
        raise ConfigError("edge-agent inspect", "SESSION_ID", "give a session id (`edge-agent "
                          "sessions list` shows them) or --json FILE")
    output = args.output or Path(f"session-{_file_safe(record['session_id'])}.html")
    try:
        page = render_page(build_timeline(record, clips))
    except AxisTooLongError as exc:
        raise ConfigError(source, "events", f"too long to draw on one page: {exc}") from None
    write_page(page, output)
    print(output)
    return 0


def _file_safe(session_id: str) -> str:
    """A record file's id, usable as part of a file name (it could hold anything)."""
    kept = "".join(c for c in session_id if c.isalnum() or c in "-_")[:40]
    return kept or "session"
