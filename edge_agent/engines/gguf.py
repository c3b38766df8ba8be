"""A GGUF file read and checked in Python before llama.cpp sees it.

llama.cpp's own loader is native code: a damaged header or a file cut short by a failed copy is
a crash risk there and, at best, a vague "failed to load model" here. So the header is parsed
here first, bounded by the file's size at every step (a corrupt length can never make this read
past the end or loop for ever), and a model is refused with one clear line when:

- the file is not GGUF at all, is a GGUF version llama.cpp does not read (1, or big-endian), or
  its header is damaged;
- it is truncated: the tensor data the header describes runs past the end of the file
  (sizes from ggml's block table: `TYPE_SIZES`; a tensor of a type newer than that table is
  not measured, never refused for it);
- it needs more memory than the machine (or the service's cgroup) has: the weights (mapped,
  but every page is read on every token), the KV cache for the configured context (f16 keys
  and values per layer) and a margin for llama.cpp's compute buffers.

What the header says also names the model in errors llama.cpp itself raises (its architecture:
an architecture this llama.cpp does not know fails there, and the message says which).
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from edge_agent.errors import ModelFileError
from edge_agent.printable import shown

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
COMPUTE_MARGIN_BYTES = 96 << 20
"""llama.cpp's compute and output buffers beside weights and KV cache: 30-80 MB measured for
SmolLM2-135M and Qwen2.5-1.5B at a 2048-token context, rounded up."""

TYPE_SIZES: dict[int, tuple[int, int]] = {
    # ggml type id: (elements per block, bytes per block), as in ggml's type traits.
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17),
}

# GGUF metadata value types: fixed-size ones by their struct format.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
            12: "d"}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")
_MAX_DIMS = 4


def _label(text: str) -> str:
    """A key or tensor name from the file, as it may appear in a message."""
    return repr(shown(text, 80))


class HeaderError(Exception):
    """The header cannot be read; the text says where and why."""


@dataclass
class GgufHeader:
    version: int
    """GGUF format version (2 or 3)."""
    metadata: dict[str, object] = field(default_factory=dict)
    """Scalar and string values by key; of the arrays only numeric ones of up to 1024 values
    (per-layer hyperparameters), not a tokenizer's."""
    data_offset: int = 0
    """Where tensor data begins."""
    data_end: int = 0
    """Where the last tensor's data ends, as far as the tensor types are known."""
    tensor_count: int = 0
    """How many tensors the header describes."""

    @property
    def architecture(self) -> str:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else "unknown"

    def number(self, key: str) -> int | None:
        """An integer value of the architecture's hyperparameters (`{arch}.key`); the largest
        element when a model gives one per layer."""
        value = self.metadata.get(f"{self.architecture}.{key}")
        if isinstance(value, list):
            value = max((v for v in value if isinstance(v, int)), default=None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Reader:
    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.at, self.size = data, 0, len(data)

    def take(self, fmt: str, what: str) -> tuple[object, ...]:
        width = struct.calcsize("<" + fmt)
        if self.at + width > self.size:
            raise HeaderError(f"the header ends early (reading {what} at byte {self.at})")
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += width
        return values

    def count(self, what: str, least_bytes_each: int) -> int:
        (number,) = self.take("Q", what)
        assert isinstance(number, int)
        if number * least_bytes_each > self.size - self.at:
            raise HeaderError(f"{what} is {number}, more than the file could hold (byte "
                              f"{self.at - 8}): the header is damaged or cut short")
        return number

    def string(self, what: str) -> bytes:
        length = self.count(f"the length of {what}", 1)
        text = bytes(self.data[self.at:self.at + length])
        self.at += length
        return text

    def skip_strings(self, number: int, key: str) -> None:
        """Step over `number` strings (a tokenizer's vocabulary: 50-260 thousand of them)."""
        unpack, data, at, size = _LENGTH.unpack_from, self.data, self.at, self.size
        for _ in range(number):
            if at + 8 > size:
                raise HeaderError(f"the header ends early (in {_label(key)} at byte {at})")
            at += 8 + unpack(data, at)[0]
        if at > size:
            raise HeaderError(f"the header ends early (in {_label(key)})")
        self.at = at

    def value(self, kind: int, key: str) -> object:
        if kind in _SCALARS:
            return self.take(_SCALARS[kind], f"the value of {_label(key)}")[0]
        if kind == _STRING:
            return self.string(f"the value of {_label(key)}").decode("utf-8", "replace")
        if kind == _ARRAY:
            (element,) = self.take("I", f"the element type of {_label(key)}")
            assert isinstance(element, int)
            if element in _SCALARS:
                width = struct.calcsize("<" + _SCALARS[element])
                number = self.count(f"the length of {_label(key)}", width)
                if number <= 1024 and element != 7:
                    values = struct.unpack_from(f"<{number}{_SCALARS[element]}", self.data, self.at)
                    self.at += number * width
                    return list(values)
                self.at += number * width  # a tokenizer's scores or types: not needed here
                return None
            if element == _STRING:
                self.skip_strings(self.count(f"the length of {_label(key)}", 8), key)
                return None
            raise HeaderError(f"{_label(key)} is an array of unknown type {element} (byte {self.at})")
        raise HeaderError(f"{_label(key)} has unknown value type {kind} (byte {self.at}): the header "
                          "is damaged")


def read_header(path: Path) -> GgufHeader:
    """The header of the GGUF file at `path`; HeaderError when it is not one or is damaged,
    OSError when it cannot be read."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size < 24:
            raise HeaderError(f"it is {size} bytes long, too short for a GGUF header")
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _parse(_Reader(data), size)


def _parse(reader: _Reader, size: int) -> GgufHeader:
    magic = bytes(reader.data[:4])
    if magic != MAGIC:
        raise HeaderError(f"it does not start with GGUF's signature (starts with {magic!r})")
    reader.at = 4
    (version,) = reader.take("I", "the version")
    assert isinstance(version, int)
    if version not in (2, 3):
        swapped = struct.unpack(">I", struct.pack("<I", version))[0]
        raise HeaderError("it is a big-endian GGUF file; llama.cpp here reads little-endian ones"
                          if swapped in (2, 3) else f"it is GGUF version {version}; llama.cpp "
                          "reads versions 2 and 3")
    tensors = reader.count("the tensor count", 24)
    entries = reader.count("the metadata count", 12)
    header = GgufHeader(version=version, tensor_count=tensors)
    for _ in range(entries):
        key = reader.string("a metadata key").decode("utf-8", "replace")
        (kind,) = reader.take("I", f"the type of {_label(key)}")
        assert isinstance(kind, int)
        value = reader.value(kind, key)
        if value is not None:
            header.metadata[key] = value
    infos: list[tuple[int, int, int]] = []  # (offset, elements, type)
    for index in range(tensors):
        name = reader.string(f"the name of tensor {index}").decode("utf-8", "replace")
        (dims,) = reader.take("I", f"the dimensions of {_label(name)}")
        assert isinstance(dims, int)
        if dims > _MAX_DIMS:
            raise HeaderError(f"tensor {_label(name)} has {dims} dimensions (at most {_MAX_DIMS}): "
                              "the header is damaged")
        shape = reader.take(f"{dims}Q", f"the shape of {_label(name)}")
        kind, offset = reader.take("IQ", f"the type of {_label(name)}")
        elements = 1
        for extent in shape:
            assert isinstance(extent, int)
            elements *= extent
        assert isinstance(kind, int) and isinstance(offset, int)
        infos.append((offset, elements, kind))
    alignment = header.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise HeaderError(f"general.alignment is {alignment!r}, not a power of two")
    header.data_offset = -(-reader.at // alignment) * alignment
    header.data_end = header.data_offset
    for offset, elements, kind in infos:
        if kind in TYPE_SIZES:
            per_block, block_bytes = TYPE_SIZES[kind]
            end = header.data_offset + offset + -(-elements // per_block) * block_bytes
        else:
            end = header.data_offset + offset
        header.data_end = max(header.data_end, end)
    return header


def memory_needed(header: GgufHeader, file_size: int, context_tokens: int) -> tuple[int, int]:
    """(weights, KV cache) bytes llama.cpp needs for this model at `context_tokens`."""
    weights = max(0, file_size - header.data_offset)
    layers = header.number("block_count") or 0
    width = header.number("embedding_length") or 0
    heads = header.number("attention.head_count") or 0
    kv_heads = header.number("attention.head_count_kv") or heads
    key_width = header.number("attention.key_length") or (width // heads if heads else 0)
    value_width = header.number("attention.value_length") or key_width
    kv_cache = layers * context_tokens * kv_heads * (key_width + value_width) * 2  # f16
    return weights, kv_cache


def available_memory(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")
                     ) -> int | None:
    """Bytes this process can still have: MemAvailable, or less when its cgroup (a systemd
    unit's MemoryMax=) allows less. None where neither can be read."""
    limits: list[int] = []
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        relative = (proc / "self" / "cgroup").read_text().strip().splitlines()[-1].split("::", 1)[1]
        group = cgroups / relative.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit != "max":
            # The working set, as the kernel reclaims before it refuses: less the file cache
            # it can drop (the models' own pages read while loading count in memory.current).
            used = int((group / "memory.current").read_text()) - _stat(group, "inactive_file")
            limits.append(max(0, int(limit) - used))
    except (OSError, ValueError, IndexError):
        pass
    return min(limits) if limits else None


def _stat(group: Path, key: str) -> int:
    for line in (group / "memory.stat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def check_model_file(path: Path, context_tokens: int, available: int | None = None) -> GgufHeader:
    """The header of a GGUF model that llama.cpp can be given; ModelFileError (exit 3) with one
    line saying what is wrong otherwise. `available`: bytes of memory (default: measured)."""
    try:
        size = path.stat().st_size
        header = read_header(path)
    except HeaderError as exc:
        raise ModelFileError(path, f"not a usable GGUF model: {exc}",
                             "Fix: download it again, or point llm.model at a good .gguf file"
                             ) from None
    except (OSError, ValueError) as exc:  # ValueError: mmap of an empty or special file
        raise ModelFileError(path, f"cannot read it ({exc})") from None
    if header.data_end > size:
        raise ModelFileError(
            path, f"it is truncated: {size:,} bytes, but its {header.tensor_count} tensors need "
            f"{header.data_end:,} (an interrupted download or copy?)",
            "Fix: download it again, or point llm.model at a good .gguf file")
    weights, kv_cache = memory_needed(header, size, context_tokens)
    needed = weights + kv_cache + COMPUTE_MARGIN_BYTES
    room = available_memory() if available is None else available
    if room is not None and needed > room:
        raise ModelFileError(
            path, f"it needs about {needed / 2**30:.1f} GB of memory ({weights / 2**30:.2f} GB of "
            f"weights, {kv_cache / 2**30:.2f} GB of KV cache for {context_tokens} tokens of "
            f"context) and {room / 2**30:.1f} GB is available",
            "Fix: choose a smaller model (llm.model), lower llm.context_tokens, or free memory "
            "(a service's limit: MemoryMax= in its unit)")
    return header
