"""`edge-agent inspect` pages in a real headless browser (Debian's chromium driven by
Playwright): they load with no script error and no request, show every unit's words in order,
and mark heard and never-heard words. A real demo call (models) and a synthetic 300-turn
session (no models)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edge_agent.inspect.page import render_page, write_page
from edge_agent.inspect.timeline import build_timeline
from edge_agent.memory.record import SessionRecord
from tests.cli import edge_agent, write_config
from tests.inspect_sessions import SessionBuilder, long_session

pytestmark = pytest.mark.browser

SCREENSHOT_LIMIT = 300_000
HOSTILE = '</script><script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


@dataclass
class Loaded:
    page: Any
    seconds: float
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


def _open(browser: Any, path: Path) -> Loaded:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    loaded = Loaded(page, 0.0)
    page.on("console", lambda m: loaded.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: loaded.errors.append(str(error)))
    page.on("request", lambda request: loaded.requests.append(request.url))
    started = time.perf_counter()
    page.goto(path.resolve().as_uri(), wait_until="load")
    loaded.seconds = time.perf_counter() - started
    assert loaded.errors == []
    assert loaded.requests == [path.resolve().as_uri()]  # nothing else: the kiosk is offline
    return loaded


def _words(page: Any, unit_id: str, state: str = "") -> list[tuple[int, str]]:
    """(data-index, text) of a unit's words on the axis, in document order."""
    found: list[tuple[int, str]] = page.eval_on_selector_all(
        f'.strips .word{"." + state if state else ""}[data-unit="{unit_id}"]',
        "els => els.map(e => [Number(e.dataset.index), e.textContent])")
    return [(index, text) for index, text in found]


def _check_units(page: Any, record: SessionRecord) -> None:
    for unit in record["units"]:
        words = [w["text"] for w in unit["words"]]
        shown = _words(page, unit["unit_id"])
        assert shown == list(enumerate(words)), unit["unit_id"]  # every word, in order
        heard = [text for _, text in _words(page, unit["unit_id"], "heard")]
        unheard = [text for _, text in _words(page, unit["unit_id"], "unheard")]
        assert heard == unit["heard"].split()
        assert unheard == words[len(heard):]


def test_a_barge_in_page_marks_heard_and_never_heard_words(browser: Any, tmp_path: Path) -> None:
    built = SessionBuilder()
    built.agent("hello how can I help", 0.2)
    answer = built.caller(HOSTILE, 2.0, 1.0)
    built.agent("we have a table at seven and one at eight", answer, cut_at=answer + 1.0)
    answer = built.caller("seven please", answer + 0.85, 0.9)
    built.agent(f"done you said {HOSTILE}", answer)
    record = built.record()
    path = tmp_path / "page.html"
    write_page(render_page(build_timeline(record)), path)
    loaded = _open(browser, path)
    page = loaded.page
    _check_units(page, record)
    assert _words(page, "u2", "heard") == [(0, "we"), (1, "have"), (2, "a")]
    assert _words(page, "u1", "unheard") == [] and _words(page, "u3", "unheard") == []
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.text_content('tr[data-key="r1-c1"] .said-caller') == HOSTILE
    # The script explains what is clicked: a never-heard word, then a table row.
    page.click('.strips .word.unheard[data-unit="u2"][data-index="3"]')
    detail = page.text_content("#detail")
    assert "table" in detail and "never heard" in detail and "would have played" in detail
    page.click('tr[data-decision="barge-in"]')
    assert "BargeIn" in page.text_content("#detail")
    assert page.eval_on_selector_all(".strips .focus", "els => els.length") > 0
    assert loaded.errors == []


def test_a_300_turn_session_opens_without_freezing(browser: Any, tmp_path: Path) -> None:
    record = long_session(300)
    started = time.perf_counter()
    path = tmp_path / "long.html"
    write_page(render_page(build_timeline(record)), path)
    rendered = time.perf_counter() - started
    loaded = _open(browser, path)
    page = loaded.page
    turns = page.eval_on_selector_all(
        "tr.turn-row td.n", "els => els.map(e => e.textContent).filter(t => t)")
    assert turns == [str(n) for n in range(1, 301)]
    words = sum(len(u["words"]) for u in record["units"])
    assert page.eval_on_selector_all(".strips .word", "els => els.length") == words
    page.click("tr.turn-row >> nth=-1")  # the last turn, far down: the axis scrolls to it
    assert "question number 300" in page.text_content("#detail")
    print(f"\n300 turns: page {path.stat().st_size / 1e6:.2f} MB, rendered in {rendered:.2f} s, "
          f"loaded in {loaded.seconds:.2f} s")
    assert loaded.seconds < 30  # only a frozen page fails this
    assert loaded.errors == []


@pytest.mark.models
@pytest.mark.realtime
def test_a_real_demo_call_drawn_with_its_kept_audio(browser: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path, "\n[memory]\nkeep_audio = true\n")
    db, record_file = tmp_path / "data" / "edge-agent.db", tmp_path / "session.json"
    demo = edge_agent("demo", "--db", db, "--json", record_file, config=config, timeout=300)
    assert demo.returncode == 0, demo.stderr
    record = json.loads(record_file.read_text(encoding="utf-8"))
    page_file = tmp_path / "page.html"
    inspect = edge_agent("inspect", record["session_id"], "-o", page_file, config=config)
    assert inspect.returncode == 0, inspect.stderr
    assert inspect.stdout.strip() == str(page_file)

    loaded = _open(browser, page_file)
    page = loaded.page
    _check_units(page, record)
    cut = [u for u in record["units"] if u["interrupted"]]
    assert len(cut) == 1 and _words(page, cut[0]["unit_id"], "unheard")  # the barge-in
    for unit in record["units"]:
        if not unit["interrupted"]:
            assert _words(page, unit["unit_id"], "unheard") == []
    assert page.eval_on_selector_all("path.wave.caller", "els => els.length") >= 3
    assert page.eval_on_selector_all("path.wave.agent", "els => els.length") >= 4
    decisions = page.eval_on_selector_all("tr.turn-row", "els => els.map(e => e.dataset.decision)")
    assert decisions == ["greeting", "answered", "answered", "barge-in"]

    shot = Path(os.environ.get("EDGE_AGENT_SCREENSHOT") or tmp_path / "inspect-page.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert 0 < shot.stat().st_size < SCREENSHOT_LIMIT
    assert loaded.errors == []
