"""edge-agent command line: the only place errors become messages and exit codes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from edge_agent import __version__
from edge_agent.cli.args import seconds
from edge_agent.cli.bench import add_parser as add_bench_parser
from edge_agent.cli.bench import results_path as bench_results_path
from edge_agent.cli.doctor import add_parser as add_doctor_parser
from edge_agent.cli.inspect import add_parser as add_inspect_parser
from edge_agent.cli.knowledge import add_parser as add_knowledge_parser
from edge_agent.cli.memory import add_parsers as add_memory_parsers
from edge_agent.cli.service import add_parsers as add_service_parsers
from edge_agent.cli.sync import add_parser as add_sync_parser
from edge_agent.config import Config
from edge_agent.config.file import load_config
from edge_agent.errors import EdgeAgentError, OutputError
from edge_agent.files.jsonfile import check_writable, write_json
from edge_agent.memory.record import SessionRecord
from edge_agent.service.journal import (
    StderrLines,
    journal_line,
    native_lines_logged,
    to_journal,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="edge-agent",
        description="Offline voice agent that remembers what the listener actually heard.")
    parser.add_argument("--version", action="version", version=f"edge-agent {__version__}")
    parser.add_argument("-c", "--config", type=Path,
                        help="config file (default: $EDGE_AGENT_CONFIG, "
                             "/etc/edge-agent/edge-agent.toml, else built-in defaults)")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="a whole scripted call, offline, no sound card needed")
    demo.add_argument("--call", type=Path, help="call file (TOML); default: the built-in call")
    demo.add_argument("--json", type=Path, help="write the session record here")
    demo.add_argument("--audio-dir", type=Path,
                      help="write each unit's audio, as far as it was played, to DIR/<unit_id>.wav")
    demo.add_argument("--db", type=Path,
                      help="record the call in this memory database and resume an open session "
                           "in it (default: a private database for this call only)")
    demo.set_defaults(handler=_demo)

    run = commands.add_parser("run", help="the live agent on the microphone and speaker")
    run.add_argument("--json", type=Path, help="write the session record here on exit")
    run.add_argument("--duration", type=seconds, help="stop after this many seconds")
    run.add_argument("--audio-dir", type=Path,
                     help="write each unit's audio, as far as it was played, to DIR/<unit_id>.wav")
    run.set_defaults(handler=_run)

    add_bench_parser(commands)
    add_memory_parsers(commands)
    add_doctor_parser(commands)
    add_service_parsers(commands)
    add_sync_parser(commands)
    add_inspect_parser(commands)
    add_knowledge_parser(commands)

    models = commands.add_parser("models", help="list, fetch and verify models")
    models.set_defaults(handler=_models)
    actions = models.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="what is configured and where it resolves")
    fetch = actions.add_parser("fetch", help="download a model into the data dir")
    fetch.add_argument("name")
    fetch.add_argument("--manifest", type=Path, help="use this manifest instead of the built-in")
    verify = actions.add_parser("verify", help="check models against their hashes")
    verify.add_argument("name", nargs="?")
    for sub in (actions.choices["list"], verify):
        sub.add_argument("--manifest", type=Path, help="use this manifest instead of the built-in")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with _log_to_stderr():
        return _main(args)


Handler = Callable[[Config, argparse.Namespace], int]
"""A command: what each subparser names with `set_defaults(handler=...)`."""


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "doctor":  # a broken config is one of its findings, not its end
            return int(args.handler(None, args))
        config = load_config(args.config)
        logging.getLogger("edge_agent").setLevel(config.log.level.upper())
        if args.command == "bench":
            args.json = bench_results_path(args)
        _check_outputs(args)
        handler: Handler = args.handler
        return handler(config, args)
    except EdgeAgentError as exc:
        print(f"edge-agent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _check_outputs(args: argparse.Namespace) -> None:
    """Files and directories a command will write are checked before it runs: a session
    record found unwritable at the end would be lost."""
    record = getattr(args, "json", None)
    if isinstance(record, Path):
        check_writable(record)
    audio_dir = getattr(args, "audio_dir", None)
    if audio_dir is not None:
        try:
            audio_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(audio_dir, exc) from None
        if not os.access(audio_dir, os.W_OK | os.X_OK):
            raise OutputError(audio_dir, "not writable by this user")


@contextlib.contextmanager
def _log_to_stderr() -> Iterator[None]:
    """Warnings (a suspicious config value, a damaged model copy) go to stderr, one line each,
    and only there: a library that configures the root logger on import (onnxruntime's
    quantization module does) must not print them twice. Restored on return, so `main` can be
    called in-process."""
    logger = logging.getLogger("edge_agent")
    handler = StderrLines()
    saved = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = saved


def _write_record(record: dict[str, Any], path: Path | None) -> None:
    if path is None:
        return
    write_json(record, path)
    print(f"session record: {path}")


def _demo(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.demo.callfile import load_call
    from edge_agent.runner import run_demo

    call = load_call(args.call)
    print(f"edge-agent demo: {call.source} ({len(call.lines)} caller lines); loading models...")
    with _record_kept(args.json):
        record = asyncio.run(run_demo(config, call,
                                      printer=lambda line: print(line, flush=True),
                                      audio_dir=args.audio_dir, db_path=args.db))
    _write_record(dict(record), args.json)
    return 0


@contextlib.contextmanager
def _record_kept(path: Path | None) -> Iterator[None]:
    """A unit audio file refused at the end of a session does not lose its record."""
    from edge_agent.runner import RecordedOutputError

    try:
        yield
    except RecordedOutputError as exc:
        _write_record(dict(exc.record), path)
        raise


def _run(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.datadir import data_dir_lock
    from edge_agent.memory.writer_lock import WriterLock
    from edge_agent.runner import run_live
    from edge_agent.service.notify import SystemdNotifier

    notifier = SystemdNotifier()  # does nothing unless systemd gave a notify socket

    journal = to_journal(sys.stderr)

    def printer(line: str, level: int = logging.INFO) -> None:
        if level < logging.getLogger("edge_agent").getEffectiveLevel():
            return  # conversation lines are info: [log] level = "warning" keeps them out
        if journal:  # one stream, in order, each line at its priority
            print(journal_line(line, level, None, True), file=sys.stderr, flush=True)
        else:
            print(line, flush=True)

    async def live() -> SessionRecord:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        printer("edge-agent: loading models and opening audio devices...")
        notifier.status("loading models and opening audio devices")
        return await run_live(config, stop, printer=printer,
                              warner=lambda line: printer(line, logging.WARNING),
                              max_seconds=args.duration,
                              audio_dir=args.audio_dir, notifier=notifier, lock=lock)

    # The memory database's writer lock from the start too: a `demo --db` or a `sessions
    # delete` on it is refused while the agent answers, and this agent is refused (before
    # loading models) while one of them writes it.
    with data_dir_lock(config), WriterLock.acquire(config.db_path) as lock, \
            native_lines_logged() if journal else contextlib.nullcontext(), \
            _record_kept(args.json):
        record = asyncio.run(live())
    _write_record(dict(record), args.json)
    return 0


def _models(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.errors import ModelFetchError
    from edge_agent.models.catalog import load_catalog
    from edge_agent.models.fetch import fetch_model, progress_bar

    catalog = load_catalog(config.models_dir, args.manifest, config_source=config.source)
    if args.action == "fetch":
        from edge_agent.datadir import ensure_data_dir

        ensure_data_dir(config)
        path = fetch_model(catalog, args.name, progress=progress_bar())
        print(f"{args.name}: verified and installed at {path}")
        return 0
    in_use = {use.reference for use in config.models_in_use()}
    if args.action == "list":
        print(f"models dir: {catalog.models_dir}")
        print(f"{'':2}{'name':24}{'kind':6}{'status':15}{'size':>10}  where")
        for name, spec in sorted(catalog.specs.items(), key=lambda kv: (kv[1].kind, kv[0])):
            status = catalog.status(name)
            mark = "* " if name in in_use else "  "
            where = str(status.path) if status.path else catalog.fetch_hint(spec)
            size = f"{status.size / 1e6:.1f} MB" if status.size else "-"
            print(f"{mark}{name:24}{spec.kind:6}{status.source:15}{size:>10}  {where}")
        print("* = used by the current config")
        return 0
    names = [args.name] if args.name else [
        n for n in sorted(catalog.specs) if catalog.status(n).path is not None]
    failed = 0
    for name in names:
        problems = catalog.verify(name)
        print(f"{name}: {'ok' if not problems else 'FAILED'}")
        for problem in problems:
            print(f"  {problem}")
        failed += bool(problems)
    if failed:
        raise ModelFetchError(f"{failed} model(s) failed verification")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
