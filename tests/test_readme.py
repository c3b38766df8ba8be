"""The reference's blocks (docs/reference.md) are written from the code
(`edge_agent.cli.reference`): they must be what the code says now. README is a guide of at most
500 lines, and every link between the project's pages leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_agent.cli import reference

REPO = Path(__file__).resolve().parents[1]
README = REPO / "docs" / "reference.md"


def test_the_generated_reference_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert reference.render(text) == text, (
        "docs/reference.md's generated blocks are out of date: run "
        "python -m edge_agent.cli.reference docs/reference.md")


def test_every_section_is_in_the_reference_and_says_something() -> None:
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


PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced = fenced != line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def test_readme_is_a_guide_of_at_most_500_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 500, f"README.md has {lines} lines: move reference or notes to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_between_the_pages_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http://, mailto: — outside the project
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, broken


def test_a_slug_is_githubs() -> None:
    assert _slug(" Set up (Debian / Raspberry Pi OS)") == "set-up-debian--raspberry-pi-os"
    assert _slug("The venue's knowledge, measured") == "the-venues-knowledge-measured"
