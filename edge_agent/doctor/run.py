"""`edge-agent doctor`: can this machine run the agent? One line per check, ok / warn / FAIL.

Checks run in groups (config, machine, memory database, audio, models), fastest first so the
operator sees results while the models load, each group in a worker thread with a time limit:
a check that raises is that check's FAIL line with the error text (never a traceback), one that
hangs (a stuck sound server, a stalled disk) a FAIL line when its group's time is up; the other
groups still run. Nothing is created or written: the data dir is not made, the memory database
is read without being migrated (`edge_agent.doctor.database`). Audio and model checks:
`edge_agent.doctor.checks`; the command (output, --json, exit status): `edge_agent.cli.doctor`.
"""


from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import socket
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from edge_agent import __version__
from edge_agent.config import Config
from edge_agent.config.file import SEARCH_PATHS, load_config
from edge_agent.doctor import venue
from edge_agent.doctor.report import (
    FULL_DISK,
    GB,
    LOW_DISK,
    LOW_RAM,
    CheckRecord,
    Context,
    DoctorRecord,
    Emit,
    Group,
    MachineRecord,
    check,
    failure,
    guarded,
)
from edge_agent.engines.cpu_share import usable_cores
from edge_agent.errors import ConfigError
from edge_agent.machine import cpu_model, load_average, memory_bytes
from edge_agent.machine.child_probe import python_child_env, run_child


def run_doctor(config: Config | None, config_path: Path | None, quick: bool,
               show: Emit) -> DoctorRecord:
    """Every check; `show` gets each line as it is found. `config` None: load it here from
    `config_path` (else $EDGE_AGENT_CONFIG or /etc/edge-agent/edge-agent.toml), so that a bad
    config is a FAIL line and the other checks run on the built-in defaults."""
    # Here, not at the top: the audio and model checks load PortAudio and the engines.
    from edge_agent.doctor import checks as doctor_checks
    from edge_agent.doctor.database import database_line

    checks: list[CheckRecord] = []

    def emit(record: CheckRecord) -> None:
        checks.append(record)
        show(record)

    loaded = _config(config, config_path, emit)
    machine: MachineRecord = {
        "hostname": socket.gethostname(), "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()} {platform.machine()}",
        "edge_agent": __version__, "config": loaded.source, "data_dir": str(loaded.data_path)}
    context = Context(loaded, quick, machine)
    groups = (_single("data dir", lambda c: _data_dir_line(c.config), 30),
              Group(lambda _: ("cpu", "ram", "disk"), _machine, 30),
              _single("memory db", lambda c: database_line(c.config.db_path, c.quick), 600),
              _single("echo cancel", lambda c: _echo_cancel_line(c.config), 30),
              _single("llm server", lambda c: venue.llm_server_line(c.config), 60,
                      applies=lambda c: bool(c.config.llm.server)),
              _single("venue store", lambda c: venue.venue_store_line(c.config), 60,
                      applies=lambda c: bool(c.config.sync.url)),
              _single("knowledge", lambda c: venue.knowledge_line(c.config), 120,
                      applies=lambda c: bool(c.config.knowledge.files)),
              Group(doctor_checks.audio_names, doctor_checks.audio, 90),
              Group(doctor_checks.model_names, doctor_checks.models, 900))
    for group in groups:
        _run_group(group, context, emit)
    return {"checks": checks, "ok": all(c["status"] != "FAIL" for c in checks),
            "machine": machine}


def _single(name: str, body: Callable[[Context], CheckRecord], timeout_s: float,
            applies: Callable[[Context], bool] = lambda _: True) -> Group:
    """One check, run when it `applies` to the config."""
    def run(context: Context, emit: Emit) -> None:
        if applies(context):
            guarded(emit, name, lambda: body(context))

    return Group(lambda context: (name,) if applies(context) else (), run, timeout_s)


def _run_group(group: Group, context: Context, emit: Emit) -> None:
    names = list(group.names(context))
    if not names:
        return  # nothing of it applies to this config
    lock = threading.Lock()
    reported: list[str] = []
    open_ = [True]

    def report(record: CheckRecord) -> None:
        with lock:  # a line that comes after the group's time is up is dropped
            if open_[0]:
                reported.append(record["name"])
                emit(record)

    def body() -> None:
        try:
            group.run(context, report)
        except Exception as exc:  # isolation: a bug in one group must not stop the others
            pending = [n for n in names if n not in reported]
            report(failure(pending[0] if pending else names[0], exc))

    worker = threading.Thread(target=body, name=f"doctor {names[0]}", daemon=True)
    worker.start()  # a daemon: one stuck in a native call must not hold the process's exit
    worker.join(group.timeout_s)
    with lock:
        open_[0] = False
        hung = worker.is_alive()
        for name in (n for n in names if n not in reported):
            emit(check(name, "FAIL", f"did not finish within {group.timeout_s:g} s",
                       "something it waits for is stuck (a sound server, a disk): restart it or "
                       "the machine") if hung else
                 check(name, "FAIL", "not checked: an earlier step of this check failed",
                       "fix the failure above, then run the doctor again"))


# -- config and data dir ---------------------------------------------------------------------

def _config(config: Config | None, path: Path | None, emit: Emit) -> Config:
    """The config line; the config the other checks use."""
    if config is None:
        try:
            config = load_config(path)
        except Exception as exc:  # isolation, as for every check
            line = failure("config", exc)
            emit({**line, "fix": line["fix"] + "; the other checks use the built-in defaults"})
            return Config()
    try:
        _check_config(config)
    except Exception as exc:  # a classifier plugin may raise anything
        emit(failure("config", exc))
        return config
    if config.source == Config().source:
        where = " or ".join(str(p) for p in SEARCH_PATHS)
        emit(check("config", "ok", f"built-in defaults (no --config, $EDGE_AGENT_CONFIG unset, "
                   f"no {where})"))
    else:
        emit(check("config", "ok", f"{config.source}: loaded, valid"))
    return config


def _check_config(config: Config) -> None:
    """What the agent checks at start besides the file itself (ConfigError when wrong)."""
    from edge_agent.conversation.backchannel import load_classifier
    from edge_agent.engines.llm.scripted import ScriptedLanguageModel

    config.models_in_use()  # engine = "vosk" without a vosk_model
    load_classifier(config.turns.backchannel_classifier, config.source)
    if config.llm.engine == "scripted":
        if not config.llm.script:
            raise ConfigError(config.source, "llm.script",
                              'must name a replies file when llm.engine = "scripted"')
        ScriptedLanguageModel.from_file(Path(config.llm.script).expanduser())


def _data_dir_line(config: Config) -> CheckRecord:
    """`ensure_data_dir`'s checks (the same function), reported; a missing dir is not created
    (the agent does)."""
    from edge_agent.datadir import check_data_dir

    path = config.data_path
    who = f"this user (uid {os.geteuid()})"
    if path.exists():
        if not path.is_dir():
            return check("data dir", "FAIL", f"{path} is a file, not a directory",
                         "point data_dir at a directory (it is created if missing)")
        try:
            check_data_dir(config)
        except ConfigError as exc:
            detail, _, fix = exc.reason.partition(": ")
            return check("data dir", "FAIL", detail, fix)
        return check("data dir", "ok", f"{path}: exists, writable{_running_note(path)}")
    parent = next(p for p in path.parents if p.exists())
    if not parent.is_dir():
        return check("data dir", "FAIL", f"{path} cannot be created: {parent} is a file",
                     "point data_dir at a directory")
    # Make a directory where the agent would make its own, and remove it: permissions alone
    # do not tell (root may write anywhere, yet not in /proc or on a read-only mount).
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".edge-agent-doctor-", dir=parent))
    except OSError as exc:
        return check("data dir", "FAIL", f"{path} does not exist and cannot be created in "
                     f"{parent} as {who} ({exc.strerror or exc})",
                     f"create it (mkdir -p {path}) as a user who can, owned by this one, or "
                     "point data_dir elsewhere")
    return check("data dir", "ok", f"{path}: not there yet, created on the first run "
                 f"({parent} is writable)")


_ECHO_CANCEL_CHILD = (
    "import importlib.metadata, json\n"
    "from edge_agent.machine.child_probe import forbid_core_files\n"
    "forbid_core_files()\n"
    "from edge_agent.audio.device import MIC_FRAME, MIC_RATE\n"
    "from edge_agent.audio.echo_cancel import WebRtcProcessing\n"
    "frame = bytes(2 * MIC_FRAME)\n"
    "cleaned = WebRtcProcessing(MIC_RATE).process(frame, frame)\n"
    "print(json.dumps({'bytes': len(cleaned), 'frame': len(frame),\n"
    "                  'livekit': importlib.metadata.version('livekit')}), flush=True)\n"
)
"""The canceller built and run over one frame, in a child: livekit's native runtime has aborted
a process at its exit (a Rust panic in a tokio worker, SIGABRT), which must not be the
doctor's own end."""


def _echo_cancel_line(config: Config) -> CheckRecord:
    """The echo canceller `run` will use, built and run over one frame (its library is a
    wheel that a machine may lack), in a child process."""
    if config.audio.echo_cancel == "off":
        return check("echo cancel", "ok", "off: the microphone must never hear the speaker "
                     "(a headset)")
    outcome = run_child([sys.executable, "-c", _ECHO_CANCEL_CHILD], 60.0,
                        env=python_child_env())
    result = next((json.loads(line) for line in outcome.stdout.splitlines()
                   if line.startswith("{")), None)
    if result is None:
        died = (f"died by {outcome.signal}" if outcome.crashed else "ran past 60 s"
                if outcome.returncode is None else f"exited {outcome.returncode}")
        return check("echo cancel", "FAIL", f"WebRTC's canceller could not run once: its check "
                     f"{died}: {outcome.native.strip()[-300:] or 'no message'}",
                     "reinstall livekit (pip install --force-reinstall livekit)")
    if result["bytes"] != result["frame"]:
        return check("echo cancel", "FAIL", f"WebRTC's canceller returned {result['bytes']} "
                     f"bytes for {result['frame']}", "reinstall livekit (pip install "
                     "--force-reinstall livekit)")
    return check("echo cancel", "ok", f"webrtc-aec3 (livekit {result['livekit']}), "
                 f"{config.audio.echo_cancel}")


def _running_note(path: Path) -> str:
    """Says so when a live agent holds the data dir's flock (its audio devices may then be
    busy), found without writing anything."""
    from edge_agent.datadir import LOCK_NAME

    with contextlib.suppress(OSError):
        handle = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
            return f"; an edge-agent is running on it (pid {holder})"
        finally:
            os.close(handle)  # also drops the shared lock taken to test it
    return ""


# -- machine ---------------------------------------------------------------------------------

def _machine(context: Context, emit: Emit) -> None:
    machine = context.machine
    guarded(emit, "cpu", lambda: _cpu(machine, context.config.llm.threads))
    guarded(emit, "ram", lambda: _ram(machine))
    guarded(emit, "disk", lambda: _disk(context.config.data_path, machine))


def _cpu(machine: MachineRecord, llm_threads: int) -> CheckRecord:
    model = cpu_model()
    cores = usable_cores()
    load = load_average()
    machine["cpu_model"], machine["cpu_cores"], machine["load_average"] = model, cores, load
    most = min(llm_threads, cores) if llm_threads else cores
    detail = (f"{model}, {cores} core{'s' if cores != 1 else ''} ({platform.machine()}); "
              f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; the LLM writes on up to "
              f"{most} thread{'s' if most != 1 else ''}, fewer while the voice works or other "
              "programs are busy")
    if load[1] > cores:  # the 5-minute figure: a burst (this doctor loading models) is not it
        return check("cpu", "warn", detail + " (busier than its cores)",
                     "the agent answers slowly while this lasts: find what is busy (top)")
    return check("cpu", "ok", detail)


def _ram(machine: MachineRecord) -> CheckRecord:
    total, available = memory_bytes()
    machine["mem_available_bytes"], machine["mem_total_bytes"] = available, total
    detail = f"{available / GB:.1f} GB available of {total / GB:.1f} GB"
    if available < LOW_RAM:
        return check("ram", "warn", detail + " (under 1 GB)",
                     "the models may not fit: close other programs, or use a smaller llm.model")
    return check("ram", "ok", detail)


def _disk(data_dir: Path, machine: MachineRecord) -> CheckRecord:
    # The dir itself may not exist yet: its disk is that of the nearest existing parent.
    where = next(p for p in (data_dir, *data_dir.parents) if p.exists())
    stats = os.statvfs(where)
    free = stats.f_bavail * stats.f_frsize
    machine["disk_path"], machine["disk_free_bytes"] = str(where), free
    detail = f"{free / GB:.1f} GB free on {where}"
    fix = ("free space on that disk (old session logs: `edge-agent sessions`), or point "
           "data_dir at a bigger one")
    if free < FULL_DISK:
        return check("disk", "FAIL", f"{detail} (under 200 MB: memory writes will fail)", fix)
    if free < LOW_DISK:
        return check("disk", "warn", f"{detail} (under 1 GB)", fix)
    return check("disk", "ok", detail)
