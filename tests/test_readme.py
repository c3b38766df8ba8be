"""README's reference blocks are written from the code (`edge_agent.cli.reference`): they must
be what the code says now."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_agent.cli import reference

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_generated_reference_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert reference.render(text) == text, (
        "README.md's generated blocks are out of date: run "
        "python -m edge_agent.cli.reference README.md")


def test_every_section_is_in_the_readme_and_says_something() -> None:
    text = README.read_text(encoding="utf-8")
    for name, write in reference.SECTIONS.items():
        assert f"<!-- BEGIN GENERATED: {name} -->" in text
        assert write().strip()


def test_the_reference_follows_the_code() -> None:
    """Each block names what the code has: a command's options, a config key and its
    default, every exit status, every field of the benchmark document."""
    commands = reference.commands()
    assert "#### `edge-agent bench latency`" in commands and "`--exchanges EXCHANGES`" in commands
    assert "(default 9)" in commands or "default 9" in commands  # %(default)s filled in
    keys = reference.config_keys()
    assert "| `vad.speculate_after_ms` | `32` |" in keys and "| `tts.threads` | `2` |" in keys
    codes = reference.exit_codes()
    assert all(f"| {code} |" in codes for code in range(0, 12))
    assert "**`parts`** array of `part`" in reference.bench_document()


def test_a_stale_block_is_rewritten_and_an_unknown_one_refused() -> None:
    stale = ("before\n<!-- BEGIN GENERATED: exit-codes -->\nold text\n"
             "<!-- END GENERATED: exit-codes -->\nafter\n")
    written = reference.render(stale)
    assert "old text" not in written and "| 8 |" in written
    assert written.startswith("before\n") and written.endswith("after\n")
    with pytest.raises(KeyError, match="no generated section 'nothing'"):
        reference.render("<!-- BEGIN GENERATED: nothing -->\n<!-- END GENERATED: nothing -->")
