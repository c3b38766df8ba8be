"""A GGUF model is read and checked in Python before llama.cpp is given it: a file that is not
GGUF, a damaged header, a truncated copy and a model too big for the memory there is are each
one ModelFileError (exit 3) naming the problem, and never reach llama.cpp's native loader; a
model of an architecture llama.cpp does not know is one too, from llama.cpp's own refusal."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from edge_agent.engines import gguf
from edge_agent.errors import ModelFileError
from tests.cli import edge_agent, write_config
from tests.gguf_files import gguf_bytes, tiny_model, write_gguf

GB = 1 << 30


def _refused(path: Path, available: int | None = 64 * GB, context: int = 2048) -> str:
    with pytest.raises(ModelFileError) as caught:
        gguf.check_model_file(path, context, available=available)
    assert caught.value.exit_code == 3
    return str(caught.value)


def test_a_well_formed_file_is_read(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    header = gguf.check_model_file(write_gguf(tmp_path / "m.gguf", metadata, tensors), 256,
                                   available=GB)
    assert header.architecture == "llama" and header.tensor_count == 2
    assert header.number("block_count") == 2 and header.number("attention.head_count_kv") == 2
    assert header.data_end == (tmp_path / "m.gguf").stat().st_size


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(200))  # a zip, say
    assert "does not start with GGUF's signature (starts with b'PK\\x03\\x04')" in _refused(path)
    path.write_bytes(b"GGUF")
    assert "too short for a GGUF header" in _refused(path)


@pytest.mark.parametrize("version, says", [
    (1, "GGUF version 1; llama.cpp reads versions 2 and 3"),
    (0x03000000, "big-endian GGUF file"),
])
def test_versions_llama_cpp_does_not_read_are_refused(tmp_path: Path, version: int,
                                                       says: str) -> None:
    metadata, tensors = tiny_model()
    assert says in _refused(write_gguf(tmp_path / "m.gguf", metadata, tensors, version=version))


def test_a_truncated_copy_is_refused_with_both_sizes(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    path = write_gguf(tmp_path / "m.gguf", metadata, tensors, cut=100)
    size = path.stat().st_size
    message = _refused(path)
    assert f"it is truncated: {size:,} bytes, but its 2 tensors need {size + 100:,}" in message
    assert "download it again" in message


def test_a_file_cut_inside_its_header_is_refused(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    header, _ = gguf_bytes(metadata, tensors)
    path = tmp_path / "m.gguf"
    path.write_bytes(header[:90])
    assert "the header is damaged or cut short" in _refused(path)
    path.write_bytes(header.rstrip(b"\0")[:-6])  # inside the last tensor's description
    assert "the header ends early (reading the type of 'output_norm.weight'" in _refused(path)


def test_a_damaged_length_never_reads_past_the_end(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    header, size = gguf_bytes(metadata, tensors)
    damaged = bytearray(header)
    key = header.index(b"general.architecture")
    struct.pack_into("<Q", damaged, key - 8, 1 << 60)  # the key's length, now absurd
    path = tmp_path / "m.gguf"
    path.write_bytes(bytes(damaged) + bytes(size - len(header)))
    assert "more than the file could hold" in _refused(path)
    struct.pack_into("<Q", damaged, 16, 1 << 62)  # the metadata count
    path.write_bytes(bytes(damaged) + bytes(size - len(header)))
    assert "the metadata count is 4611686018427387904, more than the file could hold" in (
        _refused(path))


def test_a_key_from_the_file_is_shown_escaped_and_short(tmp_path: Path) -> None:
    _, tensors = tiny_model()
    header, size = gguf_bytes({"\x1b[2J" + "k" * 500: "v"}, tensors)
    damaged = bytearray(header)
    kind = header.index(b"k" * 500) + 500
    struct.pack_into("<I", damaged, kind, 77)  # an unknown value type
    path = tmp_path / "m.gguf"
    path.write_bytes(bytes(damaged) + bytes(size - len(header)))
    message = _refused(path)
    assert "unknown value type 77" in message and "\x1b" not in message
    assert "\\x1b[2J" in message and len(message) < 600


def test_a_model_bigger_than_the_memory_there_is_is_refused(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    tensors["blk.0.ffn_up.weight"] = (1 << 16, 1 << 16)  # 16 GiB of F32, a hole on disk
    path = write_gguf(tmp_path / "big.gguf", metadata, tensors)
    message = _refused(path, available=2 * GB)
    assert "it needs about 16.1 GB of memory (16.00 GB of weights" in message
    assert "and 2.0 GB is available" in message and "lower llm.context_tokens" in message
    gguf.check_model_file(path, 2048, available=32 * GB)  # fits there


def test_the_kv_cache_counts_for_the_configured_context(tmp_path: Path) -> None:
    metadata, tensors = tiny_model()
    header = gguf.read_header(write_gguf(tmp_path / "m.gguf", metadata, tensors))
    weights, kv_cache = gguf.memory_needed(header, 10_000, context_tokens=4096)
    # 2 layers x 4096 tokens x 2 KV heads x (16 + 16) wide (64 / 4 heads) x 2 bytes (f16)
    assert kv_cache == 2 * 4096 * 2 * 32 * 2
    assert weights == 10_000 - header.data_offset


def test_available_memory_is_measured_here() -> None:
    available = gguf.available_memory()
    assert available is not None and 0 < available < 1 << 50


@pytest.mark.models
def test_smollm2_passes_the_check(smollm2_path: Path) -> None:
    path = smollm2_path
    header = gguf.check_model_file(path, 2048)
    assert header.architecture == "llama" and header.data_end == path.stat().st_size


# -- through llama.cpp and the command line ---------------------------------------------------

NO_REPLIES_CALL = '[[caller]]\nsay = "Hello there."\nat = 0.5\n'


def _demo_with_llm(tmp_path: Path, model: Path) -> subprocess.CompletedProcess[str]:
    config = write_config(tmp_path, f"[llm]\nmodel = {json.dumps(str(model))}\n")
    call = tmp_path / "call.toml"
    call.write_text(NO_REPLIES_CALL, encoding="utf-8")
    return edge_agent("demo", "--call", call, config=config, timeout=300)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 3, (result.returncode, result.stderr[-3000:])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("edge-agent: error: "), result.stderr
    return lines[0]


@pytest.mark.models
def test_an_architecture_llama_cpp_does_not_know_is_one_line_exit_3(tmp_path: Path) -> None:
    metadata, tensors = tiny_model("mamba9000")
    line = _one_line(_demo_with_llm(tmp_path, write_gguf(tmp_path / "m.gguf", metadata, tensors)))
    assert "cannot load this GGUF model of architecture 'mamba9000'" in line
    assert "an architecture this llama.cpp does not know" in line


@pytest.mark.models
def test_a_truncated_smollm2_is_one_line_exit_3(tmp_path: Path, smollm2_path: Path) -> None:
    whole = smollm2_path
    cut = tmp_path / "smollm2.gguf"
    with open(whole, "rb") as source, open(cut, "wb") as out:
        shutil.copyfileobj(source, out)
        out.truncate(whole.stat().st_size // 2)
    line = _one_line(_demo_with_llm(tmp_path, cut))
    assert "it is truncated" in line and "an interrupted download or copy?" in line


def test_a_services_memory_limit_counts_without_the_cache_it_can_drop(tmp_path: Path) -> None:
    proc, cgroups = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text("MemTotal:  4000000 kB\nMemAvailable:  3000000 kB\n")
    (proc / "self" / "cgroup").write_text("0::/system.slice/edge-agent.service\n")
    assert gguf.available_memory(proc, cgroups) == 3000000 * 1024  # no cgroup files: RAM only
    group = cgroups / "system.slice" / "edge-agent.service"
    group.mkdir(parents=True)
    (group / "memory.max").write_text(f"{1500 << 20}\n")  # MemoryMax=1500M
    (group / "memory.current").write_text(f"{900 << 20}\n")
    (group / "memory.stat").write_text(f"anon {600 << 20}\ninactive_file {200 << 20}\n")
    assert gguf.available_memory(proc, cgroups) == (1500 - 900 + 200) << 20
    (group / "memory.max").write_text("max\n")
    assert gguf.available_memory(proc, cgroups) == 3000000 * 1024
