"""Give the C heap's free memory back to the system after the models are loaded.

Loading rewrites and serializes models in memory (a Moonshine model is read from its ORT file,
rewritten and handed to onnxruntime as bytes; a Piper voice is patched the same way), and those
temporary copies, once freed, stay in glibc's heap: ~140 MB of a kiosk's resident memory that
nothing uses (measured with the default models). `malloc_trim` returns it. Elsewhere than glibc
(musl, macOS) there is no such call and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_heap() -> bool:
    """Return free heap memory to the system; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
