"""`edge-agent knowledge check FILE...` and `edge-agent knowledge ask "question"`: the venue's
knowledge files read and tried, without the agent or any model.

Part of the command line. Both index the files in this process only (the agent's database is
not touched, so they run beside a live agent); `ask` uses the config's `[knowledge]` settings
and files (or `--file`), and answers on the device's clock or `--at`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from edge_agent.config import Config
from edge_agent.errors import ConfigError
from edge_agent.printable import clip, escape_controls


def add_parser(commands: Any) -> None:
    knowledge = commands.add_parser(
        "knowledge", help="the venue's knowledge files: `knowledge check FILE...`, "
                          "`knowledge ask \"question\"`")
    actions = knowledge.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="read knowledge files: their topics and FAQ "
                                             "entries, duplicates, and entries that one question "
                                             "finds equally")
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    ask = actions.add_parser("ask", help="what the agent would answer to a question, with the "
                                         "entries found and their scores")
    ask.add_argument("question")
    ask.add_argument("--file", type=Path, action="append", dest="files",
                     help="a knowledge file (repeat for several; default: [knowledge] files)")
    ask.add_argument("--at", type=_moment, metavar="WHEN",
                     help="ask at this local time, like 2026-12-24T16:30 (default: now)")
    knowledge.set_defaults(handler=run)


def run(config: Config, args: argparse.Namespace) -> int:
    return _check(config, args) if args.action == "check" else _ask(config, args)


def _moment(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a time: {text!r}; write it like "
                                         "2026-12-24T16:30") from None


def _with_files(config: Config, files: list[Path]) -> Config:
    named = [str(f.resolve()) for f in files]
    return dataclasses.replace(config, knowledge=dataclasses.replace(config.knowledge,
                                                                     files=named))


def _check(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.app import open_knowledge
    from edge_agent.knowledge.check import findings

    knowledge = open_knowledge(_with_files(config, args.files), None)
    assert knowledge is not None  # files were named
    try:
        contents = knowledge.contents
        for path in contents.files:
            entries = [e for e in contents.entries if e.file == path]
            kinds = Counter(e.kind for e in entries)
            parts = [f"{kinds[k]} {one if kinds[k] == 1 else many}"
                     for k, one, many in (("faq", "FAQ entry", "FAQ entries"),
                                          ("section", "section", "sections"),
                                          ("fact", "fact", "facts")) if kinds[k]]
            print(f"{escape_controls(path)}: {', '.join(parts) or 'no entries'}")
        for schedule in contents.schedules:
            print(f"  opening hours of {schedule.place or 'the venue'}"
                  f"{' (' + ', '.join(schedule.names) + ')' if schedule.names else ''}"
                  f"{f'; {len(schedule.dates)} special date(s)' if schedule.dates else ''}")
        if contents.synonyms:
            print(f"  {len(contents.synonyms)} synonym group(s)")
        for entry in contents.entries:
            shown = " | ".join(entry.questions) if entry.kind == "faq" else entry.topic
            print(f"  {entry.ref:<22} {entry.kind:<8} {escape_controls(clip(shown, 100))}")
        found = findings(knowledge)
        for finding in found:
            print(f"warning: {escape_controls(finding.text)}")
        print(f"{len(contents.entries)} entries; {len(found)} warning(s)")
    finally:
        knowledge.close()
    return 0


def _ask(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.app import open_knowledge
    from edge_agent.knowledge.ground import COVERAGE_MIN

    if args.files:
        config = _with_files(config, args.files)
    if not config.knowledge.files:
        raise ConfigError(config.source, "knowledge.files", "names no knowledge file: set "
                          "[knowledge] files, or pass --file FILE")
    zone = ZoneInfo(config.knowledge.timezone) if config.knowledge.timezone else None
    moment = args.at or datetime.now(zone)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone) if zone else moment.astimezone()
    knowledge = open_knowledge(config, None, wall=lambda: moment)
    assert knowledge is not None
    try:
        grounding = knowledge.ground(args.question)
        found = knowledge.matches(args.question)
    finally:
        knowledge.close()
    print(f"asked at {moment.isoformat(timespec='minutes')}: {escape_controls(args.question)}")
    print(f"decision: {grounding.how} ({_HOW[grounding.how]}); lookup {grounding.ms:.1f} ms")
    if grounding.say:
        print(f"says: {escape_controls(grounding.say)}")
    if grounding.note:
        print("the model's prompt gets, before the question:")
        for line in grounding.note.splitlines():
            print(f"  {escape_controls(line)}")
    settings = knowledge.settings
    print(f"entries found (direct from {settings.direct_above}, margin {settings.margin}; "
          f"model from {settings.relevant_above}; an entry must hold "
          f"{COVERAGE_MIN:.0%} of the question):")
    for match in found[:5]:
        print(f"  {match.score:.2f} (holds {match.coverage:.0%})  {match.entry.ref:<22} "
              f"{match.entry.kind:<8} {escape_controls(clip(match.entry.topic, 80))}")
    if not found:
        print("  none")
    return 0


_HOW = {"direct": "an entry's answer, said as written, no model",
        "hours": "the opening hours, on the clock, no model",
        "fallback": "a question the knowledge does not cover: the fallback line, no model",
        "model": "the model answers, with these entries in its prompt",
        "chat": "not a question for the venue: the model answers as without knowledge"}
