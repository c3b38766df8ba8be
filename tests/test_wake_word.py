"""The wake word models of the pymicro-wakeword wheel, heard in Piper's voice; the words after
the word are what Moonshine hears; every damaged or foreign model file is one clear error."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_agent.audio.pcm import to_pcm
from edge_agent.bench import wake_audio
from edge_agent.bench.wake import frames_heard
from edge_agent.config import Config, SessionConfig
from edge_agent.conversation.wake import after_wake_word
from edge_agent.demo.voices import Voice
from edge_agent.engines.moonshine import MoonshineRecognizer
from edge_agent.engines.tts import PiperSpeech, make_voice_repeatable
from edge_agent.engines.wake_word import MicroWakeWordDetector
from edge_agent.errors import ModelFileError
from edge_agent.events import BargeIn, SessionStarted, UserSpeechStarted
from edge_agent.memory.record import record_events
from tests.cli import edge_agent, write_config

pytestmark = pytest.mark.models

RATE = 16000
FRAME = 512  # the loop's frame (Silero's 32 ms)
WORDS = {"okay-nabu": "Okay Nabu", "hey-jarvis": "Hey Jarvis", "alexa": "Alexa",
         "hey-mycroft": "Hey Mycroft"}


@pytest.fixture(scope="module")
def piper(model_path: Callable[[str], Path]) -> PiperSpeech:
    make_voice_repeatable()
    voice = model_path("joe-medium")
    return PiperSpeech.load(voice, voice.with_name(voice.name + ".json"))


def said(piper: PiperSpeech, text: str, length_scale: float = 1.0) -> np.ndarray:
    """`text` in Piper's voice at 16 kHz, a second of silence either side (`bench wake`'s)."""
    return wake_audio.said(piper, Voice("piper", "piper", length_scale=length_scale),
                           text).samples


@pytest.mark.parametrize("name", WORDS)
def test_each_wake_word_is_heard_once_per_saying_and_not_in_other_speech(
        name: str, piper: PiperSpeech, model_path: Callable[[str], Path]) -> None:
    detector = MicroWakeWordDetector(model_path(name))
    assert detector.phrase == WORDS[name]
    for speed in (0.9, 1.25):
        assert len(frames_heard(detector, said(piper, WORDS[name] + ".", speed))) == 1, speed
    other = said(piper, "Hello there. What time do you open today? Thank you, and goodbye.")
    assert frames_heard(detector, other) == []
    assert frames_heard(detector, np.zeros(4 * RATE)) == []


def test_what_follows_the_wake_word_is_all_the_recognizer_hears(
        piper: PiperSpeech, model_path: Callable[[str], Path]) -> None:
    detector = MicroWakeWordDetector(model_path("okay-nabu"))
    moonshine = MoonshineRecognizer(model_path("moonshine-base-en"))
    for text, after in (("Okay Nabu, what time is it?", "what time is it"), ("Okay Nabu.", "")):
        samples = said(piper, text)
        [at] = frames_heard(detector, samples)
        pcm = to_pcm(samples)
        frames = [pcm[2 * FRAME * i:2 * FRAME * (i + 1)] for i in range(at + 1)]
        moonshine.begin()
        moonshine.feed(after_wake_word(frames, 1000 * FRAME / RATE) + pcm[2 * FRAME * (at + 1):])
        words = moonshine.end().text
        assert words.lower().strip(" ?.") == after, (text, words)


@pytest.fixture
def model_copy(tmp_path: Path, model_path: Callable[[str], Path]) -> Path:
    """The okay-nabu model's .tflite and .json, copied where a test may damage them."""
    tflite = model_path("okay-nabu")
    for source in (tflite, tflite.with_suffix(".json")):
        shutil.copy(source, tmp_path / source.name)
    return tmp_path / tflite.name


def test_a_copy_by_path_works_from_either_file(model_copy: Path) -> None:
    for path in (model_copy, model_copy.with_suffix(".json")):
        assert MicroWakeWordDetector(path).phrase == "Okay Nabu"


@pytest.mark.parametrize(("damage", "message"), [
    (lambda m: m.write_bytes(m.read_bytes()[:30_000]), "TensorFlow Lite could not load it"),
    (lambda m: m.write_bytes(np.random.default_rng(3).bytes(30_000)), "no TFL3 identifier"),
    (lambda m: m.write_bytes(b""), "no TFL3 identifier"),
    (lambda m: m.unlink(), "there is no such file (the .json names it"),
    (lambda m: m.with_suffix(".json").unlink(), "there is no such file (a microWakeWord model"),
    (lambda m: m.with_suffix(".json").write_text("{not json", encoding="utf-8"), "not JSON"),
    (lambda m: m.with_suffix(".json").write_text('{"type": "onnx"}', encoding="utf-8"),
     'no "type": "micro"'),
    (lambda m: m.with_suffix(".json").write_text(json.dumps(
        {"type": "micro", "model": "../x.tflite", "wake_word": "", "micro": {
            "probability_cutoff": 2, "sliding_window_size": 0}}), encoding="utf-8"),
     "missing or wrong: model (a file name beside it), wake_word (text), "
     "micro.probability_cutoff (between 0 and 1), micro.sliding_window_size"),
])
def test_a_damaged_or_foreign_model_is_one_clear_error(
        model_copy: Path, damage: Callable[[Path], object], message: str) -> None:
    damage(model_copy)
    with pytest.raises(ModelFileError) as caught:
        MicroWakeWordDetector(model_copy)
    assert message in str(caught.value)
    assert "point session.wake_word at a microWakeWord model" in str(caught.value) or (
        "cannot read" in str(caught.value))


def test_the_cli_refuses_a_truncated_wake_model_in_one_line(model_copy: Path,
                                                            tmp_path: Path) -> None:
    model_copy.write_bytes(model_copy.read_bytes()[:30_000])
    config = write_config(tmp_path, f'[session]\nstart = "wake"\nidle_end_s = 30\n'
                          f'wake_word = "{model_copy}"\n[llm]\nengine = "scripted"\n'
                          'script = "none"\n')
    result = edge_agent("doctor", "--quick", config=config, timeout=300)
    assert "model wake" in result.stdout and "FAIL" in result.stdout, result.stdout
    assert "TensorFlow Lite could not load it" in result.stdout


def test_the_default_wake_word_is_a_catalog_model() -> None:
    session = SessionConfig(start="wake", idle_end_s=30)
    uses = {use.kind: use for use in Config(session=session).models_in_use()}
    assert uses["wake"].reference == "okay-nabu" and uses["wake"].key == "session.wake_word"


@pytest.mark.realtime
def test_a_call_wakes_the_kiosk_by_its_word_and_nothing_before_it_is_transcribed(
        tmp_path: Path) -> None:
    call = tmp_path / "wake.toml"
    call.write_text('''
[agent]
greeting = "Yes? How can I help?"
replies = ["We open at nine."]
[[caller]]
say = "Good morning, is anybody there? Hello?"
at = 0.5
[[caller]]
say = "Okay Nabu."
at = 5.0
[[caller]]
say = "What time do you open?"
after_agent_done = true
''', encoding="utf-8")
    config = write_config(tmp_path, '[session]\nstart = "wake"\nidle_end_s = 30\n')
    out = tmp_path / "record.json"
    result = edge_agent("demo", "--call", call, "--json", out, config=config, timeout=240)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert [(t["role"], t["text"].lower().strip(" ?.")) for t in record["turns"]] == [
        ("assistant", "yes? how can i help"), ("user", "what time do you open"),
        ("assistant", "we open at nine")]
    events = [entry.event for entry in record_events(record)]
    assert [e.how for e in events if isinstance(e, SessionStarted)] == ["wake"]
    # The first line was said with no session open: not a speech event, not a transcript.
    assert min(e.audio_time for e in events if isinstance(e, UserSpeechStarted)) > 5.0


@pytest.mark.realtime  # it times CPU: alone on its worker
def test_bench_wake_measures_every_model_and_what_waiting_costs(tmp_path: Path) -> None:
    out = tmp_path / "wake.json"
    result = edge_agent("bench", "wake", "--quick", "--minutes", "1", "--json", out,
                        config=write_config(tmp_path), timeout=400)
    assert result.returncode == 0, result.stderr
    figures = json.loads(out.read_text())
    models = {m["model"]: m for m in figures["models"]}
    assert list(models) == list(WORDS)
    assert figures["voices"] == ["piper-joe", "piper-joe-fast", "espeak-us", "espeak-us-fast"]
    assert figures["trials_per_model"] == 4 * 2 * 6
    for name, model in models.items():
        assert model["phrase"] == WORDS[name]
        assert sum(d[1] for d in model["detected"].values()) == 48
        assert len(model["missed"]) == 48 - sum(d[0] for d in model["detected"].values())
        assert 0 < model["cpu_percent"] < 5
        assert model["false_wakes"] == len(model["false_wake_texts"])
    # Piper's voice (the models were trained on Piper's samples) in a quiet room: every time,
    # and the agent listens within a few hundred ms of the word's end.
    nabu = models["okay-nabu"]
    assert nabu["detected"]["quiet"] == [8, 8]
    assert 0 < nabu["latency_ms"]["p50"] < 400 and nabu["latency_ms"]["n"] == 4
    # Waiting on a wake word costs a fraction of transcribing the room.
    assert 0 < figures["waiting_cpu_percent"] < figures["always_on_cpu_percent"]
    assert "waiting for the wake word" in result.stdout and "okay-nabu" in result.stdout


@pytest.mark.realtime
def test_the_wake_word_over_the_agents_voice_through_the_canceller_cuts_in(
        tmp_path: Path) -> None:
    """The real audio path: the agent's voice at echo 1.0 through a furnished room, the echo
    canceller, then the wake word model; only the word can cut in (words alone would need 5 s)."""
    call = tmp_path / "echo.toml"
    call.write_text('''
[agent]
greeting = "Yes?"
replies = [
  """We open at nine every morning and close at six in the evening, except on Sundays and \
public holidays, when the museum opens at eleven and closes at five.""",
  "At eleven.",
]
echo_gain = 1.0
[room]
delay_ms = 40
reverb_ms = 150
[[caller]]
say = "Okay Nabu."
at = 0.5
[[caller]]
say = "When do you open?"
after_agent_done = true
[[caller]]
say = "Okay Nabu, and on Sundays?"
barge_in_after = 3.0
''', encoding="utf-8")
    # Speech over the agent may cut in by its words only after 5 s (the line lasts ~2 s): only
    # the word can cut in while it is said (with just barge_in_min_words = 6, the words still
    # won the race once in CI).
    config = write_config(tmp_path, '[session]\nstart = "wake"\nidle_end_s = 30\n'
                          '[turns]\nbarge_in_min_ms = 5000\n')
    out = tmp_path / "record.json"
    result = edge_agent("demo", "--call", call, "--json", out, config=config, timeout=240)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    events = [entry.event for entry in record_events(record)]
    assert [(e.unit_id, e.by) for e in events if isinstance(e, BargeIn)] == [("u2", "wake")]
    cut = record["units"][1]
    assert cut["interrupted"] and cut["generated"].startswith(cut["heard"]) and cut["heard"]
    users = [t["text"].lower().strip(" ?.") for t in record["turns"] if t["role"] == "user"]
    assert users == ["when do you open", "and on sundays"]
    assert "barge-in by the wake word" in result.stdout


def test_bench_service_asks_after_the_wake_word_when_the_agent_waits_for_one() -> None:
    from edge_agent.bench.service import QUESTION, asked

    question = "what time do you open tomorrow?"
    assert QUESTION.lower() == question and asked(Config()) == QUESTION
    wake = SessionConfig(start="wake", idle_end_s=30)
    assert asked(Config(session=wake)) == f"Okay Nabu, {question}"
    phrase = SessionConfig(start="wake", wake_word="", wake_phrase="hello kiosk")
    assert asked(Config(session=phrase)) == f"hello kiosk, {question}"
