"""The agent run as systemd runs it, under a test-owned notify socket (`bench service` does the
running): READY once it can take a call, watchdog pings from its loop, STATUS as it goes; then
its microphone is pulled out and given back, and a question asked after that is answered; the
same for its speaker, where the next answer must be heard. Its
stderr is connected as journald's stream is: every line has a priority, every line of the
session names it, and no words said are in it (`[log] transcripts` is off by default)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from edge_agent.bench.pulse_rig import PulseUnavailable
from edge_agent.bench.service import WATCHDOG_USEC, run_service
from edge_agent.config import Config

pytestmark = [pytest.mark.audio, pytest.mark.models, pytest.mark.realtime]


def test_the_service_is_ready_pings_says_its_state_and_recovers_its_microphone(
        tmp_path: Path) -> None:
    script = tmp_path / "replies.toml"
    script.write_text('replies = ["We open at nine.", "At nine, as I said."]\n',
                      encoding="utf-8")
    base = Config()
    config = dataclasses.replace(
        base, llm=dataclasses.replace(base.llm, engine="scripted", script=str(script)),
        memory=dataclasses.replace(base.memory, summarizer="extractive"))
    idle_s = 3 * WATCHDOG_USEC / 1e6 / 2  # three ping periods
    lines: list[str] = []
    try:
        figures = run_service(config, idle_s, lines.append)
    except PulseUnavailable as exc:
        pytest.skip(f"no PulseAudio: {exc}")
    assert figures["ready_s"] > 0
    assert figures["watchdog_pings"] >= 2, figures  # one per period; the edges may miss one
    statuses = figures["statuses"]
    assert statuses[0] == "loading models and opening audio devices"
    greeting = statuses.index("speaking")  # the greeting, then the agent listens
    assert "listening" in statuses[greeting:]
    lost = statuses.index("waiting for the microphone")
    back = statuses.index("listening", lost)
    answering = statuses.index("answering", back)
    assert "speaking" in statuses[answering:]
    assert figures["answered_after_return_s"] > 0
    # The speaker, pulled and given back: the next answer is heard there.
    gone = statuses.index("waiting for the speaker", answering)
    again = statuses.index("answering", statuses.index("listening", gone))
    assert "speaking" in statuses[again:]
    assert figures["answer_heard_s"] >= 0.8, figures  # "At nine, as I said." is ~1.2 s
    journal = figures["journal"]
    assert journal and all(re.match(r"<[3-7]>", line) for line in journal), journal
    opened = next(i for i, line in enumerate(journal) if "[session " in line)
    session = re.search(r"\[session ([^\]]+)\]", journal[opened]).group(1)  # type: ignore[union-attr]
    assert all(f"[session {session}]" in line for line in journal[opened:]), journal
    for device in ("microphone", "speaker"):  # notes about devices are warnings
        assert any(line.startswith("<4>") and f"{device} lost" in line for line in journal)
    assert any(line.startswith("<6>") and "agent said" in line for line in journal), journal
    text = "\n".join(journal).lower()
    assert "what time do you open" not in text and "we open at nine" not in text, journal
