"""edge-agent command line: the only place errors become messages and exit codes."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from edge_agent import __version__
from edge_agent.config import Config, load_config
from edge_agent.errors import EdgeAgentError


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

    run = commands.add_parser("run", help="the live agent on the microphone and speaker")
    run.add_argument("--json", type=Path, help="write the session record here on exit")
    run.add_argument("--duration", type=float, help="stop after this many seconds")

    models = commands.add_parser("models", help="list, fetch and verify models")
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
    try:
        config = load_config(args.config)
        if args.command == "demo":
            return _demo(config, args)
        if args.command == "run":
            return _run(config, args)
        return _models(config, args)
    except EdgeAgentError as exc:
        print(f"edge-agent: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _write_record(record: dict[str, Any], path: Path | None) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"session record: {path}")


def _demo(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.app import run_demo
    from edge_agent.demo.callfile import load_call

    call = load_call(args.call)
    print(f"edge-agent demo: {call.source} ({len(call.lines)} caller lines); loading models...")
    record = asyncio.run(run_demo(config, call, printer=lambda line: print(line, flush=True)))
    _write_record(record, args.json)
    return 0


def _run(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.app import run_live

    async def live() -> dict[str, Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        print("edge-agent: loading models and opening audio devices...", flush=True)
        return await run_live(config, stop, printer=lambda line: print(line, flush=True),
                              max_seconds=args.duration)

    record = asyncio.run(live())
    _write_record(record, args.json)
    return 0


def _models(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.errors import ModelFetchError
    from edge_agent.models.catalog import load_catalog
    from edge_agent.models.fetch import fetch_model, progress_bar

    catalog = load_catalog(config.models_dir, args.manifest)
    if args.action == "fetch":
        path = fetch_model(catalog, args.name, progress=progress_bar())
        print(f"{args.name}: verified and installed at {path}")
        return 0
    in_use = {use.reference for use in config.models_in_use()}
    if args.action == "list":
        print(f"models dir: {catalog.models_dir}")
        print(f"{'':2}{'name':24}{'kind':6}{'status':9}{'size':>10}  where")
        for name, spec in sorted(catalog.specs.items(), key=lambda kv: (kv[1].kind, kv[0])):
            status = catalog.status(name)
            mark = "* " if name in in_use else "  "
            where = str(status.path) if status.path else catalog.fetch_hint(spec)
            size = f"{status.size / 1e6:.1f} MB" if status.size else "-"
            print(f"{mark}{name:24}{spec.kind:6}{status.source:9}{size:>10}  {where}")
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
