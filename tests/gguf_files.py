"""Small GGUF files written by the tests: a header with the metadata and tensors asked for, the
tensor data zero-filled (or left as a hole, for files far bigger than the disk could hold)."""

from __future__ import annotations

import struct
from pathlib import Path

F32 = 0
_STRING, _UINT32, _ARRAY = 8, 4, 9


def _string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def _value(value: object) -> bytes:
    if isinstance(value, str):
        return struct.pack("<I", _STRING) + _string(value)
    if isinstance(value, int):
        return struct.pack("<II", _UINT32, value)
    if isinstance(value, list):  # a list of strings, like a tokenizer's vocabulary
        return struct.pack("<IIQ", _ARRAY, _STRING, len(value)) + b"".join(map(_string, value))
    raise TypeError(value)


def gguf_bytes(metadata: dict[str, object], tensors: dict[str, tuple[int, ...]],
               version: int = 3, alignment: int = 32) -> tuple[bytes, int]:
    """(header, the size the whole file must have) for F32 `tensors` of the given shapes."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(metadata))
    for key, value in metadata.items():
        head += _string(key) + _value(value)
    offset = 0
    for name, shape in tensors.items():
        head += _string(name) + struct.pack(f"<I{len(shape)}Q", len(shape), *shape)
        head += struct.pack("<IQ", F32, offset)
        elements = 1
        for extent in shape:
            elements *= extent
        offset += -(-elements * 4 // alignment) * alignment
    start = -(-len(head) // alignment) * alignment
    return head + bytes(start - len(head)), start + offset


def write_gguf(path: Path, metadata: dict[str, object], tensors: dict[str, tuple[int, ...]],
               cut: int = 0, **options: int) -> Path:
    """A GGUF file at `path`, `cut` bytes short of its full size (a truncated copy)."""
    header, size = gguf_bytes(metadata, tensors, **options)
    with open(path, "wb") as out:
        out.write(header)
        out.truncate(size - cut)  # zeros, as a hole: a 100 GB file costs no disk
    return path


def tiny_model(arch: str = "llama") -> tuple[dict[str, object], dict[str, tuple[int, ...]]]:
    """Metadata and tensors shaped like a (useless) transformer of `arch`."""
    metadata: dict[str, object] = {
        "general.architecture": arch, f"{arch}.block_count": 2,
        f"{arch}.embedding_length": 64, f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2, f"{arch}.context_length": 256,
        "tokenizer.ggml.tokens": ["<s>", "</s>", "a", "b"],
    }
    tensors = {"token_embd.weight": (64, 4), "output_norm.weight": (64,)}
    return metadata, tensors
