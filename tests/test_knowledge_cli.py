"""`edge-agent knowledge check` and `knowledge ask`, as a user runs them (child processes)."""

from __future__ import annotations

from pathlib import Path

from tests.cli import edge_agent, write_config
from tests.test_knowledge_lookup import _venue

BENCH_VENUE = Path(__file__).resolve().parents[1] / "edge_agent" / "bench" / "venue"


def test_check_lists_what_the_files_hold_and_what_would_confuse(tmp_path: Path) -> None:
    files = _venue(tmp_path)
    with files[2].open("a", encoding="utf-8") as csv:
        csv.write('Do you take cash?,"Cash is fine."\n')
    done = edge_agent("knowledge", "check", *files)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"{files[0]}: 1 FAQ entry, 4 facts" in lines
    assert f"{files[1]}: 3 sections" in lines
    assert "  opening hours of the venue (harbour museum, the museum)" in lines
    assert any(line.startswith("  venue.md:3") and line.endswith("Parking") for line in lines)
    assert any(line.startswith("warning: same question: 'do you take cash'") for line in lines)
    assert lines[-1].startswith("11 entries; ") and lines[-1].endswith(" warning(s)")


def test_the_built_in_venue_checks_clean() -> None:
    files = [BENCH_VENUE / name for name in ("museum.toml", "museum.md", "faq.csv")]
    done = edge_agent("knowledge", "check", *files)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].endswith("; 0 warning(s)")


def test_check_names_the_file_and_line_it_cannot_read(tmp_path: Path) -> None:
    broken = tmp_path / "faq.csv"
    broken.write_text("question,answer\nWhere?,Here.\nWhy?,Because,extra\n", encoding="utf-8")
    done = edge_agent("knowledge", "check", broken)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"edge-agent: error: {broken}: line 3: 3 cells where the "
                                   "header has 2; a cell holding a comma is quoted: \"a, b\"")


def test_ask_says_what_would_be_answered_with_the_scores(tmp_path: Path) -> None:
    files = _venue(tmp_path)
    config = write_config(tmp_path, '[knowledge]\nfiles = ["venue.toml", "venue.md", '
                                    '"faq.csv"]\ntimezone = "UTC"\n')
    done = edge_agent("knowledge", "ask", "Where can I park?", config=config)
    assert done.returncode == 0, done.stderr
    assert "decision: direct (an entry's answer, said as written, no model)" in done.stdout
    assert "says: There is no car park at the museum." in done.stdout
    assert "venue.md:3" in done.stdout
    hours = edge_agent("knowledge", "ask", "Are you open now?", "--at", "2026-12-07T12:00",
                       config=config)
    assert "says: No, we're closed right now. We open again tomorrow at 10 AM." in hours.stdout
    assert hours.stdout.startswith("asked at 2026-12-07T12:00+00:00")
    other = edge_agent("knowledge", "ask", "Is there wifi?", "--file", files[1], config=config)
    assert "decision: fallback" in other.stdout


def test_ask_without_knowledge_files_says_how_to_name_them(tmp_path: Path) -> None:
    done = edge_agent("knowledge", "ask", "Where can I park?",
                      config=write_config(tmp_path))
    assert done.returncode == 2
    assert "knowledge.files: names no knowledge file: set [knowledge] files, or pass --file" \
        in done.stderr
