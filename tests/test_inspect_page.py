"""`edge-agent inspect` without a browser: the page is self-contained and escapes what callers
and models said; the command reads the memory database or a record file, and says clearly
what is wrong with a bad one."""

from __future__ import annotations

import json
import stat
from html.parser import HTMLParser
from pathlib import Path

import pytest

from edge_agent.cli import main
from edge_agent.inspect.page import render_page
from edge_agent.inspect.timeline import build_timeline
from edge_agent.memory.record import SessionRecord
from tests.cli import write_config
from tests.inspect_sessions import SessionBuilder, store_record

HOSTILE = '</script><script>window.pwned = 1</script><!-- <img src=x onerror="alert(1)"> & "'


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data


def _barge_in_record() -> SessionRecord:
    built = SessionBuilder()
    built.agent("hello how can I help", 0.2)
    answer = built.caller("book a table", 2.0, 1.0)
    built.agent("we have a table at seven and one at eight", answer, cut_at=answer + 1.0)
    answer = built.caller("seven please", answer + 0.85, 0.9)
    built.agent("done see you at seven", answer)
    return built.record()


def test_page_is_self_contained_and_embeds_the_session() -> None:
    page = render_page(build_timeline(_barge_in_record()))
    parsed = _Tags()
    parsed.feed(page)
    names = [tag for tag, _ in parsed.tags]
    assert names.count("script") == 2 and "link" not in names and "img" not in names
    for _, attrs in parsed.tags:
        assert not {"src", "href"} & set(attrs), attrs
    for fetched in ("http:", "https:", "url(", "@import", "@font-face"):
        assert fetched not in page
    data = json.loads(parsed.scripts[0])
    unit = data["runs"][0]["units"][1]
    assert unit["unit_id"] == "u2" and unit["heard"] == "we have a"
    assert [w["heard"] for w in unit["words"]][:4] == [True, True, True, False]
    assert names.count("svg") == 1  # 0-10 s: one strip of the axis


def test_what_callers_and_models_said_cannot_become_markup() -> None:
    built = SessionBuilder()
    answer = built.caller(HOSTILE, 1.0, 1.0)
    built.agent(f"you said {HOSTILE}", answer)
    record = built.record()
    record["engines"] = {"llm": HOSTILE}
    page = render_page(build_timeline(record))
    parsed = _Tags()
    parsed.feed(page)
    names = [tag for tag, _ in parsed.tags]
    assert names.count("script") == 2 and "img" not in names
    assert "window.pwned" not in parsed.scripts[1]
    data = json.loads(parsed.scripts[0])  # the whole JSON block, intact
    assert data["runs"][0]["caller"][0]["text"] == HOSTILE
    assert data["engines"]["llm"] == HOSTILE
    assert "</" not in parsed.scripts[0]


def _stored(tmp_path: Path, record: SessionRecord, audio: bool) -> None:
    store_record(tmp_path / "data" / "edge-agent.db", record, audio)


@pytest.mark.parametrize("audio", [False, True])
def test_inspect_reads_the_memory_database(tmp_path: Path, audio: bool,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    record = _barge_in_record()
    _stored(tmp_path, record, audio)
    monkeypatch.chdir(tmp_path)
    assert main(["-c", str(write_config(tmp_path)), "inspect", record["session_id"][:6]]) == 0
    written = Path(capsys.readouterr().out.strip())
    assert written == Path(f"session-{record['session_id']}.html")
    assert stat.S_IMODE((tmp_path / written).stat().st_mode) == 0o600  # it holds transcripts
    page = (tmp_path / written).read_text(encoding="utf-8")
    assert 'class="word unheard"' in page and 'data-unit="u2"' in page
    assert ('class="wave agent"' in page and 'class="wave caller"' in page) == audio
    assert ("waveforms of the kept audio" in page) == audio


def test_inspect_draws_a_record_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "session.json"
    record.write_text(json.dumps(_barge_in_record()), encoding="utf-8")
    out = tmp_path / "pages" / "call.html"
    assert main(["-c", str(write_config(tmp_path)), "inspect", "--json", str(record),
                 "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert "<title>edge-agent session 5e55101d0000</title>" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1"),
    ("[]", ": must be an object, got list []"),
    ('{"units": [], "events": [{"type": "PlaybackStarted", "at": 1}]}',
     "events[0].unit_id: must be text, got nothing"),
    ('{"units": [{"unit_id": "u1", "generated": "", "heard": "", "played_ms": 5, '
     '"words": [{"text": "a", "start_ms": "soon", "end_ms": 2}]}], "events": []}',
     'units[0].words[0].start_ms: must be a number, got str "soon"'),
    ('{"units": [], "events": [{"type": "UserSpeechEnded", "at": 1, "audio_time": NaN, '
     '"silence_ms": 3}]}', "events[0].audio_time: must be a number, got float NaN"),
])
def test_a_bad_record_file_is_one_clear_line(tmp_path: Path, content: str, message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    record = tmp_path / "bad.json"
    record.write_text(content, encoding="utf-8")
    assert main(["-c", str(write_config(tmp_path)), "inspect", "--json", str(record)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"edge-agent: error: {record}: ") and message in error
    assert error.count("\n") == 1 and "Traceback" not in error


def test_unknown_sessions_and_missing_inputs_are_errors(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(write_config(tmp_path))
    assert main(["-c", config, "inspect", "abc"]) == 2
    assert "no memory database here yet" in capsys.readouterr().err
    assert not (tmp_path / "data" / "edge-agent.db").exists()  # looking creates nothing
    _stored(tmp_path, _barge_in_record(), audio=False)
    assert main(["-c", config, "inspect", "ffff"]) == 2
    assert "ffff: no such session" in capsys.readouterr().err
    assert main(["-c", config, "inspect"]) == 2
    assert "give a session id" in capsys.readouterr().err
    assert main(["-c", config, "inspect", "--json", str(tmp_path / "none.json")]) == 2
    assert "none.json: the session record not found" in capsys.readouterr().err
    record = tmp_path / "session.json"
    record.write_text(json.dumps(_barge_in_record()), encoding="utf-8")
    assert main(["-c", config, "inspect", "--json", str(record), "0000"]) == 2
    assert "the file records session '5e55101d0000', not '0000'" in capsys.readouterr().err
    assert main(["-c", config, "inspect", "--json", str(record), "-o", str(tmp_path)]) == 7
    assert f"cannot write {tmp_path}" in capsys.readouterr().err
