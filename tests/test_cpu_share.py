"""The LLM runs on the cores nobody else needs: other programs' load, the agent's own engines."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench.cotenant import busy_processes
from edge_agent.engines.cpu_share import SAMPLE_EVERY_S, CpuShare, ProcLoadMeter, usable_cores
from tests.fakes import ScriptedMeter


@pytest.mark.parametrize(("cores", "others", "expected"), [
    (2, 0.0, 2), (2, 0.3, 2), (2, 0.5, 1), (2, 1.0, 1), (2, 2.0, 1),
    (4, 0.0, 4), (4, 1.0, 3), (4, 1.6, 2), (8, 2.9, 5),
])
def test_the_llm_leaves_every_core_another_program_uses_half_of(
        cores: int, others: float, expected: int) -> None:
    assert CpuShare(cores, ScriptedMeter(others)).llm_threads(0) == expected


def test_the_configured_threads_are_a_ceiling() -> None:
    share = CpuShare(8, ScriptedMeter(0.0))
    assert share.llm_threads(3) == 3
    assert share.llm_threads(0) == 8


def test_an_engine_at_work_keeps_its_threads_and_gives_them_back_even_when_it_fails() -> None:
    share = CpuShare(4, ScriptedMeter(0.0))
    with share.working(1):
        assert share.llm_threads(0) == 3
        with share.working(2):
            assert share.llm_threads(0) == 1
    assert share.llm_threads(0) == 4
    with pytest.raises(RuntimeError), share.working(3):
        raise RuntimeError("the voice failed")
    assert share.llm_threads(0) == 4


def test_the_llm_keeps_one_thread_however_busy_the_machine_is() -> None:
    share = CpuShare(2, ScriptedMeter(2.0))
    with share.working(1):
        assert share.llm_threads(0) == 1


def test_the_llm_holds_while_a_listener_waits_and_goes_on_as_soon_as_nobody_does() -> None:
    share = CpuShare(2, ScriptedMeter(0.0))
    assert share.hold_while_listener_waits() is False  # nobody waits: no hold at all
    held: list[tuple[bool, bool]] = []
    released = threading.Event()

    def next_token() -> None:
        waited = share.hold_while_listener_waits(at_most_s=60.0)
        held.append((waited, released.is_set()))

    with share.listener_waiting(), share.listener_waiting():  # two waits: both must end
        llm = threading.Thread(target=next_token)
        llm.start()
        llm.join(0.2)
        assert llm.is_alive()
        with share.listener_waiting():
            pass
        llm.join(0.2)
        assert llm.is_alive()  # one of the two still waits
        released.set()
    llm.join(10.0)
    assert held == [(True, True)]


def test_a_listener_waiting_forever_holds_the_llm_only_so_long() -> None:
    share = CpuShare(2, ScriptedMeter(0.0))
    with share.listener_waiting():
        started = time.monotonic()
        assert share.hold_while_listener_waits(at_most_s=0.05) is True
        assert time.monotonic() - started >= 0.05
    with pytest.raises(RuntimeError), share.listener_waiting():
        raise RuntimeError("the voice failed")
    assert share.hold_while_listener_waits(at_most_s=0.0) is False  # a failure ends the wait


def _stat(path: Path, busy_ticks: int, idle_ticks: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {busy_ticks} 0 0 {idle_ticks} 0 0 0 0 {busy_ticks} 0\ncpu0 1 2 3 4\n")


def test_the_meter_counts_the_machine_s_busy_time_less_its_own(tmp_path: Path) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    now = [100.0]
    _stat(stat, busy_ticks=1000, idle_ticks=5000)
    meter = ProcLoadMeter(now=lambda: now[0], stat_path=str(stat))
    # One second later the machine was busy 1.5 s (guest time counted once, in user).
    now[0] += 1.0
    _stat(stat, busy_ticks=1000 + int(1.5 * hz), idle_ticks=5000 + int(0.5 * hz))
    others = meter.others_cores()
    # This process's own CPU time over that "second" (a few ms of the test) is subtracted.
    assert 1.4 <= others <= 1.5
    # Asked again sooner than SAMPLE_EVERY_S: the same figure, the file is not read again.
    stat.write_text("")
    now[0] += SAMPLE_EVERY_S / 2
    assert meter.others_cores() == others


def test_the_meter_without_a_proc_stat_counts_nobody_else(tmp_path: Path) -> None:
    now = [0.0]
    meter = ProcLoadMeter(now=lambda: now[0], stat_path=str(tmp_path / "missing"))
    now[0] += 1.0
    assert meter.others_cores() == 0.0


def test_the_meter_sees_the_bench_s_busy_processes_beside_it_and_they_are_gone_after() -> None:
    meter = ProcLoadMeter()
    with busy_processes(1) as pids:
        started = time.monotonic()
        meter.others_cores()  # the reading to measure from, with the busy process running
        while time.monotonic() - started < 1.0:
            time.sleep(0.1)
        assert meter.others_cores() >= 0.5
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped, not a zombie left behind


@pytest.mark.models
def test_the_llm_changes_its_threads_between_tokens_as_the_machine_gets_busy(smollm2: Any
                                                                            ) -> None:
    from edge_agent.engines.llm import native

    meter = ScriptedMeter(0.0)
    share = CpuShare(2, meter)
    llm = smollm2(context_tokens=1024, threads=0, max_tokens=24, share=share)
    seen: list[int] = []
    pieces = llm.stream([{"role": "user", "content": "Count from one to twenty."}])
    for index, _ in enumerate(pieces):
        seen.append(native.threads_in_use(llm.llama))
        if index == 2:
            meter.others = 1.0  # another program takes a core
    assert seen[0] == 2
    assert seen[-1] == 1
    assert len(seen) > 4


@pytest.mark.models
def test_the_llm_writes_no_token_while_a_listener_waits(smollm2: Any) -> None:
    share = CpuShare(2, ScriptedMeter(0.0))
    llm = smollm2(context_tokens=1024, threads=0, max_tokens=24, share=share)
    pieces = iter(llm.stream([{"role": "user", "content": "Count from one to twenty."}]))
    next(pieces)
    released = threading.Event()
    came: list[tuple[bool, bool]] = []  # (a piece came, the wait had ended when it did)
    llm_thread = threading.Thread(target=lambda: came.append(
        (next(pieces, None) is not None, released.is_set())))
    with share.listener_waiting():
        llm_thread.start()
        llm_thread.join(0.3)  # time for a dozen tokens
        released.set()
    llm_thread.join(30.0)
    assert came == [(True, True)]  # the next token came only after the wait ended
    assert len([piece for piece in pieces if piece]) > 4  # and the rest flows again


@pytest.mark.models
def test_the_voice_marks_itself_at_work_while_it_synthesizes(model_path: Any) -> None:
    from edge_agent.engines.tts import PiperSpeech

    share = CpuShare(2, ScriptedMeter(0.0))
    real = PiperSpeech.load(model_path("joe-medium"))
    seen: list[int] = []

    class WatchedVoice:
        """The real voice, noting the LLM's share at each chunk it synthesizes."""

        config = real._voice.config

        def phonemize(self, text: str) -> Any:
            return real._voice.phonemize(text)

        def synthesize(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
            for chunk in real._voice.synthesize(*args, **kwargs):
                seen.append(share.llm_threads(0))
                yield chunk

    speech = PiperSpeech(WatchedVoice(), threads=1, share=share)
    audio = speech.synthesize("The kitchen closes at ten. Brunch is served on Sundays.")
    assert audio.pcm
    assert seen and set(seen) == {1}
    assert share.llm_threads(0) == 2


def _cgroup(root: Path, group: str, limits: dict[str, str]) -> Path:
    """A cgroup v2 tree under `root`: `limits` maps a group path to its cpu.max; the process's
    /proc/self/cgroup names `group`."""
    for path, limit in limits.items():
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "cpu.max").write_text(f"{limit}\n")
    own = root / "own-cgroup"
    own.write_text(f"0::/{group}\n")
    return own


def test_a_cpu_quota_anywhere_above_the_process_caps_its_cores(tmp_path: Path) -> None:
    own = _cgroup(tmp_path, "kiosk.slice/agent.service",
                  {"kiosk.slice": "50000 100000", "kiosk.slice/agent.service": "max 100000"})
    assert usable_cores(tmp_path, own) == 1  # half a core is one thread's worth


def test_without_a_quota_the_affinity_mask_counts(tmp_path: Path) -> None:
    own = _cgroup(tmp_path, "agent.service", {"agent.service": "max 100000"})
    assert usable_cores(tmp_path, own) == len(os.sched_getaffinity(0))
    cgroup_v1 = tmp_path / "v1"
    cgroup_v1.write_text("4:memory:/agent\n1:cpu:/\n")
    assert usable_cores(tmp_path, cgroup_v1) == len(os.sched_getaffinity(0))
    assert usable_cores(tmp_path, tmp_path / "missing") == len(os.sched_getaffinity(0))
