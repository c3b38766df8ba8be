"""`edge-agent bench knowledge` on a few questions through the real voice, recognizer and model
(figures are the benchmark's; this checks what it measures and how it judges)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from edge_agent.bench.knowledge import (
    QUESTIONS,
    RETRIEVAL_PASSAGES,
    load_questions,
    run_knowledge,
    table,
)
from edge_agent.config import Config
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.errors import ConfigError

pytestmark = pytest.mark.models


def test_the_built_in_question_set_is_what_the_issue_asks_for() -> None:
    asked = load_questions(QUESTIONS)
    kinds = [q.kind for q in asked.questions]
    assert len([k for k in kinds if k != "chat"]) >= 80
    assert kinds.count("out_of_scope") >= 20
    assert kinds.count("time") >= 10 and kinds.count("misheard") >= 10
    assert all(f.is_file() for f in asked.files)


def test_a_few_questions_through_the_voice_the_recognizer_and_the_model(
        tmp_path: Path, piper: Any, model_path: Callable[[str], Path],
        smollm2: Callable[..., Any]) -> None:
    venue = QUESTIONS.parent
    questions = tmp_path / "questions.toml"
    questions.write_text(f"""files = [{", ".join(f'"{venue / n}"' for n in
                                               ("museum.toml", "museum.md", "faq.csv"))}]
timezone = "Europe/Amsterdam"
now = "2026-12-03T15:00"
[[question]]
say = "How much is an adult ticket?"
expect = ["14 euros"]
[[question]]
say = "Are you open on Monday?"
expect = ["closed"]
kind = "time"
[[question]]
say = "What is the wifi password?"
kind = "out_of_scope"
[[question]]
say = "Hello, how are you?"
kind = "chat"
""", encoding="utf-8")
    stt = MoonshineRecognizer(model_path("moonshine-base-en"))
    lines: list[str] = []
    result = run_knowledge(Config(), questions, ["piper-joe"], piper, stt, smollm2(),
                           "smollm2", lines.append)
    assert set(result["ways"]) == {"written", "piper-joe"}
    for way in result["ways"].values():
        assert (way["in_scope"], way["correct"], way["out_of_scope"], way["invented"]) == (
            2, 2, 1, 0)
        assert way["direct"] == way["direct_right"] == 2
        hows = [a["how"] for a in way["asked"]]
        assert hows == ["direct", "hours", "fallback", "chat"]
        assert way["asked"][3]["answer"]  # the model said something to the small talk
    assert result["curve"][0]["direct_above"] == 0.3 and len(result["curve"]) == 14
    assert result["retrieval_passages"] == RETRIEVAL_PASSAGES
    assert result["lookup_ms"]["n"] == 12  # 4 questions, 3 times
    assert "lookup with 10000 passages" in table(result)


def test_a_question_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "q.toml"
    bad.write_text('files = []\nnow = "2026-12-03T15:00"\n[[question]]\nsay = "x"\n'
                   'kind = "riddle"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"question\[0\]\.kind"):
        load_questions(bad)
