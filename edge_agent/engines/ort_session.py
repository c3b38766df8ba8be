"""One way to open an onnxruntime session for every engine (VAD, recognizer, voice).

- Threads: `intra_op_num_threads` from the config (onnxruntime's default takes every core,
  which the other engines need at the same moment), one inter-op thread.
- No memory arena: with it, the largest activations a call ever needed stay allocated for good
  (a Piper voice kept ~95 MB more after one sentence, measured); without it a call is at most a
  few percent slower.
- A model built in memory (a patched Piper voice, a rewritten Moonshine model) is handed over as
  bytes, and onnxruntime's Python wrapper keeps those bytes for the life of the session, only
  to re-create it when a GPU provider fails (its own source says "this is bad as we're holding
  the memory indefinitely"). On the CPU provider that never happens, so the copy is dropped:
  60-90 MB per model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_session(model: bytes | Path, threads: int) -> Any:
    """An onnxruntime InferenceSession on the CPU for `model` (a file, or serialized ONNX)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Threads that wait for work sleep instead of spinning: they would take the core another
    # engine is working on (a voice on 2 threads beside the language model).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_cpu_mem_arena = False
    options.log_severity_level = 3  # errors only: no warnings on stderr during a call
    source = str(model) if isinstance(model, Path) else model
    session = onnxruntime.InferenceSession(source, sess_options=options,
                                           providers=["CPUExecutionProvider"])
    if getattr(session, "_model_bytes", None) is not None:
        session._model_bytes = None
    return session
