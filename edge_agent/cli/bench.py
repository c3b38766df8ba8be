"""`edge-agent bench [--quick] [--json OUT]`: every benchmark on this machine, one table; and
`edge-agent bench engines | heard | latency | backchannel | stt | memory | rooms | service`: one
part; `edge-agent bench lan`, the venue's LLM server (not part of `bench`: it needs one), and
`bench screen`, `knowledge`, `sync`, `wake`, which `bench` does not run either.

Part of the command line (messages and exit codes are made here and in `cli`). `bench` and a
part's subcommand call the same function (`bench.parts`) and get the same part JSON: the
subcommand writes it alone, `bench` writes it as `parts[i].result` of its document
(`bench.document`), next to the machine and the models. `bench` prints its progress on
stderr and the table on stdout; exit status 1 when a part failed (skipped parts do not count).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_agent.bench import sizes
from edge_agent.bench.sound_server import SOUND_SERVERS
from edge_agent.cli.args import busy_count, positive_int, seconds
from edge_agent.config import Config
from edge_agent.files.jsonfile import write_json

if TYPE_CHECKING:
    from edge_agent.bench.workbench import Workbench
    from edge_agent.engines.base import LanguageModel

PartCommand = Callable[[Config, argparse.Namespace], tuple[dict[str, Any], str]]


BUSY_HELP = ("N other processes each keep a core busy while it measures (a kiosk's browser "
             "at its worst; one per core: every core wanted by someone else); default 0")


def add_parser(commands: Any) -> None:
    bench = commands.add_parser(
        "bench", help="benchmarks: every part on this machine (or one part), one table, JSON",
        description="Without a part: every part on this machine, one table with the machine "
                    "it ran on, every raw sample in --json (see bench.schema.json).")
    bench.add_argument("--quick", action="store_true",
                       help="fewer runs, clips and turns, a short idle, nothing killed or "
                            "unplugged: a few minutes on a 2-core PC (rooms alone ~2)")
    bench.add_argument("--seed", type=int, default=1, help="random seed (cut and cue times)")
    # No default here: `bench --json FILE PART` must keep FILE (a part's own default would
    # replace it); `results_path` gives the default once the part is known.
    bench.add_argument("--json", type=Path, default=None,
                       help="results file (default: bench.json, or bench-PART.json for a part)")
    bench.set_defaults(handler=run)
    benchmarks = bench.add_subparsers(dest="benchmark", required=False, metavar="PART")
    engines = _part_parser(
        benchmarks, "engines", "each engine alone: load time, the voice's and the recognizer's "
                               "real-time factors, the LLM's first token and tokens/s")
    engines.add_argument("--sentences", type=positive_int, default=sizes.ENGINE_SENTENCES.full,
                         help="sentences through the voice and the recognizer (default "
                              "%(default)s)")
    engines.add_argument("--prompts", type=positive_int, default=sizes.LLM_PROMPTS.full,
                         help="questions to the LLM (default %(default)s)")
    engines.add_argument("--busy", type=busy_count, default=0, metavar="N",
                         help=BUSY_HELP)

    heard = _part_parser(
        benchmarks, "heard", "played position and heard words against the recorded output "
                             "(starts a private PulseAudio server)",
        seed_help="random seed for the cut times")
    heard.add_argument("--runs", type=positive_int, default=sizes.HEARD_RUNS.full,
                       help="barge-ins (default %(default)s)")

    latency = _part_parser(
        benchmarks, "latency", "answer gap, stop and barge-in latency and false interruptions, "
                               "from the recorded audio of the live agent on a private "
                               "PulseAudio server or yours", seed_help="random seed for the cue times")
    latency.add_argument("--exchanges", type=positive_int, default=sizes.LATENCY_EXCHANGES.full,
                         help="questions asked (each followed by a backchannel or, once in "
                              f"{sizes.LATENCY_INTERRUPT_EVERY.full}, an interruption; "
                              "default %(default)s)")
    latency.add_argument("--llm", choices=("scripted", "config"), default="scripted",
                         help="scripted replies (pipeline only, the default) or the configured LLM")
    latency.add_argument("--caller", default="",
                         help="the caller's voice, a clip-set voice (e.g. espeak-us, "
                              "espeak-rp-m3; see `bench stt`); default: the agent's voice")
    latency.add_argument("--busy", type=busy_count, default=0, metavar="N", help=BUSY_HELP)
    latency.add_argument("--lines", choices=("questions", "natural"), default="questions",
                         help="the caller's turns: written questions (the default), or turns "
                              "as people end them (on a comma, in two words, some with a "
                              "0.5 s pause inside, which must not end them)")
    latency.add_argument("--sound-server", choices=list(SOUND_SERVERS),
                         default=next(iter(SOUND_SERVERS)),
                         help="private: the bench's own PulseAudio, its devices at the agent's "
                              "rates (the default); default: the sound server you have "
                              "(PulseAudio or PipeWire's pulse server), the bench's devices "
                              "added at its default format for the call and removed after")

    corpus = _part_parser(
        benchmarks, "backchannel", "the backchannel classifier on corpus clips spoken by Piper and "
                                   "espeak-ng voices through the configured recognizer: accuracy, "
                                   "false and missed interruptions")
    corpus.add_argument("--corpus", type=Path, help="corpus file (default: the built-in one)")

    stt = _part_parser(
        benchmarks, "stt", "word error rate and speed of each recognizer on a clip set of "
                           "espeak-ng and Piper voices, clean, in noise, in babble and in a room")
    # SUPPRESS: else the subcommand's default (False) would undo `bench --quick stt`.
    stt.add_argument("--quick", action="store_true", default=argparse.SUPPRESS,
                     help=f"every {sizes.STT_CLIP_EVERY.quick}th clip "
                          f"({96 // sizes.STT_CLIP_EVERY.quick} of 96)")
    stt.add_argument("--engines", type=recognizer_names, default="moonshine,pocketsphinx",
                     help="comma-separated recognizers (moonshine, pocketsphinx, vosk: vosk "
                          "needs [stt] vosk_model); default: moonshine,pocketsphinx")

    memory = _part_parser(
        benchmarks, "memory", "prompt assembly and first token at turns 5/100/300, commit "
                              "cost, restart with the saved prefix state, and SIGKILL "
                              "durability", seed_help="random seed for the kill times")
    memory.add_argument("--turns", type=positive_int, default=sizes.MEMORY_TURNS.full,
                        help="turns of the synthetic session (default %(default)s)")
    memory.add_argument("--kills", type=int, default=sizes.MEMORY_KILLS.full,
                        help="SIGKILLs of a real agent at random moments of a call (default "
                             "%(default)s)")

    rooms = _part_parser(
        benchmarks, "rooms", "the echo canceller and the agent in a simulated room (echo, "
                             "reverberation, noise) through the real engines: ERLE, double "
                             "talk, barge-in, self-interruptions, CPU and latency",
        seed_help="random seed for the interruption cues")
    rooms.add_argument("--quick", action="store_true", default=argparse.SUPPRESS,
                       help=f"{sizes.ROOM_INTERRUPTIONS.quick} interruptions per echo gain, "
                            f"{sizes.ROOM_REPLIES.quick} replies, 2 questions per room")
    rooms.add_argument("--interruptions", type=positive_int, default=None,
                       help=f"interruptions per echo gain (default "
                            f"{sizes.ROOM_INTERRUPTIONS.full}; --quick "
                            f"{sizes.ROOM_INTERRUPTIONS.quick})")
    rooms.add_argument("--replies", type=positive_int, default=None,
                       help=f"replies watched for self-interruptions (default "
                            f"{sizes.ROOM_REPLIES.full}; --quick {sizes.ROOM_REPLIES.quick})")

    service = _part_parser(
        benchmarks, "service", "the agent as a service: start to READY, idle CPU and RSS, "
                               "watchdog pings, recovery after the microphone and the speaker "
                               "return (private PulseAudio)")
    service.add_argument("--idle", type=seconds, default=float(sizes.SERVICE_IDLE_S.full),
                         help="seconds the idle agent is watched (default %(default)g)")

    screen = _part_parser(
        benchmarks, "screen", "the kiosk's screen: each word's caption against the speaker's "
                              "recording, the server's CPU and the loop's lag with 0, 1 and 4 "
                              "pages open (starts a private PulseAudio server; not run by "
                              "`bench`)")
    screen.add_argument("--units", type=positive_int, default=sizes.SCREEN_UNITS.full,
                        help="Piper units played with each number of pages (default "
                             "%(default)s)")

    lan = _part_parser(
        benchmarks, "lan", "the venue's LLM server ([llm] server) against the on-device model: "
                           "first word from each, and when the server is down or silent "
                           "(not run by `bench`)")
    lan.add_argument("--questions", type=positive_int, default=sizes.LAN_QUESTIONS.full,
                     help="questions asked each way (default %(default)s)")

    knowledge = _part_parser(
        benchmarks, "knowledge", "the venue's knowledge: a question set (paraphrases, words as a "
                                 "recognizer writes them, questions on the venue's clock, out of "
                                 "scope) asked as written and spoken through the recognizer, "
                                 "answered as the agent would; the lookup with 10 000 passages "
                                 "(not run by `bench`)")
    knowledge.add_argument("--questions", type=Path, default=None,
                           help="a question file naming its venue's files (default: the "
                                "built-in Harbour Museum's)")
    knowledge.add_argument("--voices", type=voice_names, default=",".join(sizes.KNOWLEDGE_VOICES),
                           help="callers' voices, comma-separated (default %(default)s)")

    wake = _part_parser(
        benchmarks, "wake", "the wake word models: detection by every voice in quiet, noise, "
                            "talkers and the agent's echo; wake -> listening time; false wakes "
                            "per hour of room speech; CPU while waiting (not run by `bench`)",
        seed_help="seed of the rooms and the room speech (default: bench --seed's)")
    wake.add_argument("--quick", action="store_true", default=argparse.SUPPRESS,
                      help=f"2 voices (at 2 speeds), {sizes.WAKE_ROOM_MINUTES.quick} min of room "
                           "speech")
    wake.add_argument("--minutes", type=positive_int, default=None,
                      help=f"minutes of room speech without a wake word (default "
                           f"{sizes.WAKE_ROOM_MINUTES.full}; --quick "
                           f"{sizes.WAKE_ROOM_MINUTES.quick})")

    sync = _part_parser(
        benchmarks, "sync", "N simulated kiosks copying replayed sessions to one PostgreSQL on "
                            "127.0.0.1: rows/s, sync lag, the server's CPU, the drain after an "
                            "outage (not run by `bench`)")
    sync.add_argument("--kiosks", type=kiosk_counts, default=(1, 10, 50),
                      help="comma-separated numbers of kiosks, one run each (default 1,10,50)")
    sync.add_argument("--seconds", type=seconds, default=30.0,
                      help="the steady window measured at each number (default %(default)g)")
    sync.add_argument("--outage", type=seconds, default=600.0,
                      help="the outage, as seconds of each kiosk's talk written while the "
                           "server is down (default %(default)g)")
    sync.add_argument("--from-db", type=Path,
                      help="replay this memory database's sessions (default: the demo call, "
                           "recorded first with scripted replies)")


def _part_parser(benchmarks: Any, name: str, what: str, seed_help: str = ""
                 ) -> argparse.ArgumentParser:
    """`bench NAME`, with what every part's subcommand takes: `--json` (bench-NAME.json) and,
    for a part that draws random times, `--seed` (default: `bench --seed`'s)."""
    parser: argparse.ArgumentParser = benchmarks.add_parser(name, help=what)
    parser.add_argument("--json", type=Path, default=argparse.SUPPRESS,
                        help=f"results file (default: `bench --json`'s, else bench-{name}.json)")
    if seed_help:
        parser.add_argument("--seed", type=int, default=argparse.SUPPRESS, help=seed_help)
    return parser


def results_path(args: argparse.Namespace) -> Path:
    """Where `bench` writes its results: `--json` wherever it was given (before or after the
    part), else bench.json for every part, bench-PART.json for one."""
    if args.json is not None:
        return Path(args.json)
    return Path("bench.json" if args.benchmark is None else f"bench-{args.benchmark}.json")


def kiosk_counts(text: str) -> tuple[int, ...]:
    """`--kiosks`: comma-separated positive numbers."""
    try:
        counts = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        counts = ()
    if not counts or any(not 1 <= count <= 500 for count in counts):
        raise argparse.ArgumentTypeError(f"give numbers of kiosks from 1 to 500, like 1,10,50; "
                                         f"got {text!r}")
    return counts


def voice_names(text: str) -> list[str]:
    """`--voices`: comma-separated callers' voices, each known."""
    from edge_agent.demo.voices import VOICES

    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    known = [voice.name for voice in VOICES]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown voice {unknown[0]!r} (known: "
                                         f"{', '.join(known)})")
    return names


def recognizer_names(text: str) -> list[str]:
    """`--engines`: comma-separated recognizers, at least one, each known, each once."""
    from edge_agent.config import STT_ENGINES

    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise argparse.ArgumentTypeError(f"name at least one recognizer (known: "
                                         f"{', '.join(STT_ENGINES)}), got {text!r}")
    unknown = [name for name in names if name not in STT_ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown recognizer {unknown[0]!r} (known: "
                                         f"{', '.join(STT_ENGINES)})")
    return names


def run(config: Config, args: argparse.Namespace) -> int:
    if args.benchmark is None:
        return _run_all(config, args)
    command: PartCommand = {
        "engines": _engines, "heard": _heard, "latency": _latency, "backchannel": _backchannel, "stt": _stt,
        "memory": _memory, "rooms": _rooms, "service": _service, "lan": _lan, "screen": _screen,
        "sync": _sync, "knowledge": _knowledge, "wake": _wake}[args.benchmark]
    result, figures = command(config, args)
    write_json(result, args.json)
    print(figures)
    print(f"results: {args.json}")
    return 0


def _run_all(config: Config, args: argparse.Namespace) -> int:
    from edge_agent.bench.needs import PartsFailed
    from edge_agent.bench.suite import run_suite
    from edge_agent.bench.summary import table

    document = run_suite(config, args.quick, args.seed, sys.stderr)
    write_json(dict(document), args.json)
    print(table(document), flush=True)
    print(f"results: {args.json}")
    failed = [part["name"] for part in document["parts"] if part["status"] == "failed"]
    if failed:
        raise PartsFailed(f"{len(failed)} bench part(s) failed: {', '.join(failed)} (their "
                          f"errors are in the table and in {args.json})")
    return 0


def _workbench(config: Config) -> Workbench:
    from edge_agent.bench.workbench import Workbench

    return Workbench(config, lambda line: print(f"  {line}", flush=True))


def _engines(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.parts import engines_part
    from edge_agent.bench.speeds import table

    beside = f", {args.busy} busy processes beside them" if args.busy else ""
    print(f"edge-agent bench engines: each engine alone, then together{beside}", flush=True)
    result = engines_part(_workbench(config), args.sentences, args.prompts, args.busy)
    return result, table(result)


def _heard(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.heard import table
    from edge_agent.bench.parts import heard_part

    print(f"edge-agent bench heard: {args.runs} barge-ins (seed {args.seed})", flush=True)
    result = heard_part(_workbench(config), args.runs, args.seed)
    return result, table(result)


def _screen(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.parts import screen_part
    from edge_agent.bench.screen_figures import table

    print(f"edge-agent bench screen: {args.units} units with 0, 1 and 4 pages open, on a "
          f"private PulseAudio server", flush=True)
    result = screen_part(_workbench(config), args.units)
    return dict(result), table(result)


def _latency(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.latency_figures import table
    from edge_agent.bench.parts import latency_part

    print(f"edge-agent bench latency: {args.exchanges} exchanges through the live agent on "
          f"{SOUND_SERVERS[args.sound_server]} (about {args.exchanges * 12} s)...", flush=True)
    result = latency_part(_workbench(config), args.exchanges, args.seed, args.llm, args.caller,
                          busy=args.busy, lines=args.lines, sound_server=args.sound_server)
    return result, table(result)


def _backchannel(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.backchannel import table
    from edge_agent.bench.parts import backchannel_part

    print("edge-agent bench backchannel: the corpus through the voice and the recognizer",
          flush=True)
    result = backchannel_part(_workbench(config), args.corpus, 1)
    return result, table(result)


def _stt(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.parts import stt_part
    from edge_agent.bench.stt import table

    names: list[str] = args.engines
    print(f"edge-agent bench stt: {', '.join(names)} on the clip set"
          f"{' (quick)' if args.quick else ''}", flush=True)
    every = sizes.STT_CLIP_EVERY.quick if args.quick else sizes.STT_CLIP_EVERY.full
    result = stt_part(_workbench(config), names, every)
    return result, table(result)


def _memory(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.memory import MemoryPlan, table
    from edge_agent.bench.parts import memory_part

    print(f"edge-agent bench memory: {args.turns} turns, {args.kills} SIGKILL(s)", flush=True)
    result = memory_part(_workbench(config),
                         MemoryPlan(turns=args.turns, kills=args.kills, seed=args.seed))
    return result, table(result)


def _rooms(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    import dataclasses

    from edge_agent.bench.parts import rooms_part
    from edge_agent.bench.rooms import RoomsPlan, quick_plan, table

    plan = quick_plan(args.seed) if args.quick else RoomsPlan(seed=args.seed)
    plan = dataclasses.replace(
        plan, interruptions=args.interruptions or plan.interruptions,
        replies=args.replies or plan.replies)
    print(f"edge-agent bench rooms: the canceller, {plan.interruptions} interruptions per echo "
          f"gain, {plan.replies} replies, {plan.listening_lines} questions per room (seed "
          f"{plan.seed})", flush=True)
    result = rooms_part(_workbench(config), plan)
    return result, table(result)


def _service(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.parts import service_part
    from edge_agent.bench.service import table

    print(f"edge-agent bench service: the agent on a private PulseAudio server, idle "
          f"{args.idle:.0f} s, then its microphone and speaker pulled and given back", flush=True)
    result = service_part(_workbench(config), args.idle, devices=True)
    return result, table(result)


def _lan(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.app import lan_server
    from edge_agent.bench.lan import run_lan, table
    from edge_agent.errors import ConfigError

    if not config.llm.server:
        raise ConfigError(config.source, "llm.server", "`bench lan` measures the LAN LLM server "
                          "the config names: set [llm] server (e.g. \"http://10.0.0.5:8080/v1\")")
    bench = _workbench(config)
    local = bench.llm()
    if local is None:
        raise ConfigError(config.source, "llm.engine", '`bench lan` compares the server with '
                          'the on-device model: use engine = "llama"')
    print(f"edge-agent bench lan: {config.llm.server} against the on-device model", flush=True)
    result = run_lan(lan_server(config), local, config.llm.server_timeout_ms, args.questions,
                     bench.say)
    return dict(result), table(result)


def _wake(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.app import resolve_model
    from edge_agent.bench.wake import WAKE_MODELS, run_wake, table
    from edge_agent.engines.tts import make_voice_repeatable
    from edge_agent.engines.vad import SileroVad
    from edge_agent.engines.wake_word import MicroWakeWordDetector
    from edge_agent.models.catalog import load_catalog

    make_voice_repeatable()  # the same sayings as the same audio in every run
    size = sizes.WAKE_ROOM_MINUTES
    minutes = args.minutes or (size.quick if args.quick else size.full)
    catalog = load_catalog(config.models_dir, config_source=config.source)
    detectors = {name: MicroWakeWordDetector(catalog.resolve(name, "wake", "bench wake",
                                                             config.source))
                 for name in WAKE_MODELS}
    bench = _workbench(config)
    vad = SileroVad(resolve_model(config, "vad", catalog))
    print(f"edge-agent bench wake: {', '.join(WAKE_MODELS)}; {minutes} min of room speech "
          f"(seed {args.seed})", flush=True)
    result = run_wake(bench.voice(), detectors, vad, (config.stt_engine, bench.recognizer()),
                      quick=args.quick, minutes=minutes, seed=args.seed, say=bench.say)
    return dict(result), table(result)


def _knowledge(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    from edge_agent.bench.knowledge import QUESTIONS, run_knowledge, table
    from edge_agent.engines.tts import make_voice_repeatable

    make_voice_repeatable()  # the same questions as the same audio in every run
    bench = _workbench(config)
    local = bench.llm()
    if local is not None and config.llm.server:
        from edge_agent.app import lan_server
        from edge_agent.clock import MonotonicClock
        from edge_agent.engines.llm.fallback import FallbackLanguageModel

        llm: LanguageModel | None = FallbackLanguageModel(lan_server(config), local,
                                                          MonotonicClock())
        name = f"{config.llm.server} (then {config.llm.model})"
    else:
        llm, name = local, config.llm.model if local is not None else "no model (scripted)"
    questions = args.questions or QUESTIONS
    print(f"edge-agent bench knowledge: {questions}, answered otherwise by {name}", flush=True)
    result = run_knowledge(config, questions, args.voices, bench.voice(), bench.recognizer(),
                           llm, name, bench.say)
    return dict(result), table(result)


def _sync(config: Config, args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    import tempfile

    from edge_agent.bench.sync_scale import (
        SyncPlan,
        record_demo_call,
        recorded_plan,
        run_scale,
        table,
    )

    with tempfile.TemporaryDirectory(prefix="edge-agent-bench-sync-") as work:
        source = args.from_db
        if source is None:
            print("edge-agent bench sync: recording the demo call to replay", flush=True)
            source = Path(work) / "demo.db"
            record_demo_call(config.data_path, source)
        writes = recorded_plan(source)
    plan = SyncPlan(kiosks=args.kiosks, steady_s=args.seconds, outage_s=args.outage,
                    interval_ms=config.sync.interval_ms)
    result = run_scale(plan, writes, "the demo call" if args.from_db is None else
                       str(args.from_db), lambda text: print(text, flush=True))
    return dict(result), table(result)
