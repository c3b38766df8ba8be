"""`edge-agent sessions replay ID`: a recorded session played again through the current code
on the virtual clock, and the turn-taking decisions and heard texts compared.

The pieces, each its own module:

- `timeline`: the record's events on one timeline whose microphone frames fall where the
  replay's do (the recording's frame grid is read back from its events).
- `segments`: the caller's speech the recording holds (kept clips, call lines, transcripts).
- `placement`: the caller's speech as timed lines with call-file semantics (at, after the
  agent finished, cutting in a time after a reply started).
- `agent_script`: what the agent said and did, replayed: the model's words per request, the
  greeting, the recorded tool results.
- `voice`: the agent's units spoken with their recorded word timings (Piper's output varies
  from one synthesis to the next: a re-synthesized unit would move the words under a cut).
- `devices`: the caller who says those lines at their cues, and a speaker that starts each
  unit as long after the caller's line as the recorded one did (the replay's engines take no
  time), at the phase within a microphone frame it had.
- `decisions`: the turn-taking outcomes of an event list, and their alignment.
- `run`: all of it on a virtual clock, engines called inline; `report`: text and JSON.
"""

from __future__ import annotations

EXIT_DIFFERS = 11
"""`sessions replay` exit code when some decision differs from the recording."""
