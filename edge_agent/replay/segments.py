"""The caller's speech of a recording, as segments to say again (`placement.CallerSegment`).

Three sources, the best one the recording has:

- **kept clips** (`[memory] keep_audio`): what the microphone heard of each speech segment,
  from its pre-roll; said again sample for sample, starting in the frame it started in (its
  onset event says which). Exact: the replay hears what the agent heard.
- **call lines** (a demo: `CallerSpoke` events): each line's text spoken again by the voice,
  from the frame the line's audio began in. A demo seeds the voice (`make_voice_repeatable`)
  and says its lines first, as a replay does: with the same voice and edge-agent, the lines
  come out as the same audio, and the replay is exact too.
- **transcripts** (a live session without kept audio): what the recognizer heard of each
  segment, spoken by the voice so that its speech begins where the recorded onset was.

Otherwise a line spoken again is not the recorded sound: Piper's voice draws noise on every
synthesis, and the recognizer may hear other words in it ("Four people" / "For people"). A live
session is only replayed exactly from kept clips.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from edge_agent.audio.pcm import first_loud_sample, resample
from edge_agent.events import (
    Backchannel,
    CallerSpoke,
    EchoIgnored,
    TurnDropped,
    UserSpeechStarted,
    UserTurn,
)
from edge_agent.memory.kept_audio import AudioClip
from edge_agent.replay.placement import CallerSegment
from edge_agent.replay.timeline import FRAME_SECONDS, TimedEvent, Timeline, frame_floor

Speak = Callable[[str], bytes]
"""Text -> int16 audio at the microphone's rate."""
OUTCOMES = (UserTurn, Backchannel, EchoIgnored, TurnDropped)
"""The events that close a speech segment, one each."""


def caller_source(timeline: Timeline, clips: Sequence[AudioClip]) -> str:
    """Which source `caller_segments` will use: "kept clips", "call lines" or "transcripts"."""
    if clips:
        return "kept clips"
    return "call lines" if timeline.of_type(CallerSpoke) else "transcripts"


def caller_segments(timeline: Timeline, clips: Sequence[AudioClip], speak: Speak,
                    mic_rate: int) -> list[CallerSegment]:
    """The recording's caller speech, in time order, from the best source it has."""
    source = caller_source(timeline, clips)
    if source == "kept clips":
        return _from_clips(timeline, clips, mic_rate)
    if source == "call lines":
        return _from_lines(timeline, speak, mic_rate)
    return _from_transcripts(timeline, speak, mic_rate)


def _from_clips(timeline: Timeline, clips: Sequence[AudioClip], mic_rate: int) -> list[CallerSegment]:
    segments: list[CallerSegment] = []
    for run in timeline.runs:
        onsets = [e for e in timeline.of_type(UserSpeechStarted) if e.run_id == run.run_id]
        run_clips = [c for c in clips if c.run_id == run.run_id or len(timeline.runs) == 1]
        for index, clip in enumerate(run_clips):
            pcm = resample(clip.pcm, clip.sample_rate, mic_rate)
            at = run.to_replay(clip.at)
            start, onset = frame_floor(at + FRAME_SECONDS / 2), at
            event = onsets[index] if index < len(onsets) else None
            if event is not None:
                # The clip begins `preroll` frames before the frame its onset was declared in.
                onset = run.audio_to_replay(event.event.audio_time)
                declared = onset + timeline.onset_frames * FRAME_SECONDS
                preroll = round((event.at - clip.at) / FRAME_SECONDS)
                start = declared - preroll * FRAME_SECONDS
            segments.append(CallerSegment(_outcome_text(timeline, event), pcm, mic_rate,
                                          start, onset, f"kept clip {clip.ref}"))
    return _without_overlap(segments)


def _from_lines(timeline: Timeline, speak: Speak, mic_rate: int) -> list[CallerSegment]:
    segments = []
    for spoke in timeline.of_type(CallerSpoke):
        text = spoke.event.text
        segments.append(CallerSegment(text, speak(text), mic_rate, frame_floor(spoke.t),
                                      spoke.t + spoke.event.speech_offset, "call line"))
    return segments


def _from_transcripts(timeline: Timeline, speak: Speak, mic_rate: int) -> list[CallerSegment]:
    segments: list[CallerSegment] = []
    for run in timeline.runs:
        for event in timeline.of_type(UserSpeechStarted):
            if event.run_id != run.run_id:
                continue
            onset = run.audio_to_replay(event.event.audio_time)
            text = _outcome_text(timeline, event)
            if not text.strip():
                continue  # the agent's own echo, or nothing recognized: no caller words
            pcm = speak(text)
            lead = (first_loud_sample(pcm) or 0) / mic_rate
            start = frame_floor(onset - lead + FRAME_SECONDS / 2)
            if segments and start < segments[-1].end:
                start = segments[-1].end  # said after the previous one, never over it
            segments.append(CallerSegment(text, pcm, mic_rate, start, start + lead,
                                          "transcript"))
    return segments


def _outcome_text(timeline: Timeline, onset: TimedEvent[UserSpeechStarted] | None) -> str:
    """What the recognizer made of the segment that `onset` (its `UserSpeechStarted`) began:
    the text of the first outcome after it ("" for the agent's echo, nothing recognized, or
    no onset to go by)."""
    events = timeline.events
    begun = next((i for i, event in enumerate(events) if event is onset), len(events))
    for later in events[begun + 1:]:
        if isinstance(later.event, OUTCOMES):
            return later.event.text if isinstance(later.event, UserTurn | Backchannel) else ""
    return ""


def _without_overlap(segments: list[CallerSegment]) -> list[CallerSegment]:
    """Clips in order, a clip's head that the previous clip already holds cut off (the
    pre-roll of a segment can reach back into the end of the one before)."""
    kept: list[CallerSegment] = []
    for segment in sorted(segments, key=lambda s: s.start):
        if kept and segment.start < kept[-1].end:
            cut = round((kept[-1].end - segment.start) * segment.rate)
            segment = CallerSegment(segment.text, segment.pcm[2 * cut:], segment.rate,
                                    kept[-1].end, segment.onset, segment.source)
        kept.append(segment)
    return kept
