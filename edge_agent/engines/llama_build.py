"""Which llama.cpp this is: the instructions it was compiled for, against what the CPU offers.

llama-cpp-python has no binary wheels: pip compiles llama.cpp on the machine that installs it,
and by default for that machine's CPU (`-march=native`). Two things go wrong with that:

- a VM's CPU can advertise instructions it does not execute: on an Intel Xeon VM whose
  /proc/cpuinfo lists `avx512*`, `amx_tile`, `amx_int8`, a native build died on the first
  decode (0.3.36: SIGSEGV, 0.3.30: SIGILL, a general protection fault in libggml-cpu.so);
- an image built on one machine and copied to kiosks with another CPU dies the same way.

So edge-agent is installed with the *portable* build, `CMAKE_ARGS="-DGGML_NATIVE=OFF ..."`: on
x86-64 that compiles for SSE4.2 + AVX + AVX2 + FMA + F16C + BMI2 (every x86-64 CPU since 2013:
Intel Haswell, AMD Zen and later) with no AVX-512 or AMX, and on arm64 for plain ARMv8-A
(every Raspberry Pi from the 3 on). Measured on 2 cores, SmolLM2-135M Q4_1: as fast as the
native build where the native build runs (docs/measurements.md, "Install anywhere").

`compiled_features` reads what the loaded build was compiled for (llama.cpp's own system info,
no guessing from how it was installed); `unsupported_features` names those the running CPU does
not list, which the doctor reports before anything runs.
"""

from __future__ import annotations

import importlib.metadata
import platform
import re
import sys
from pathlib import Path

PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
"""The llama.cpp build options edge-agent is installed with (README, .ci/run). LLAVA_BUILD=OFF
leaves out the multimodal library (mtmd), which edge-agent never loads: a shorter build."""

PORTABLE_FEATURES = frozenset({"SSE3", "SSSE3", "SSE42", "AVX", "AVX2", "F16C", "FMA", "BMI2",
                               "NEON", "ARM_FMA", "LLAMAFILE", "OPENMP", "REPACK", "ACCELERATE"})
"""What the portable build may be compiled with; anything beyond means a build for one CPU."""

CPU_FLAGS = {
    # llama.cpp's feature name: the /proc/cpuinfo flag that says the CPU has it.
    "SSE3": "pni", "SSSE3": "ssse3", "SSE42": "sse4_2", "AVX": "avx", "AVX2": "avx2",
    "F16C": "f16c", "FMA": "fma", "BMI2": "bmi2", "AVX_VNNI": "avx_vnni",
    "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8",
    "NEON": "asimd", "DOTPROD": "asimddp", "FP16_VA": "asimdhp", "MATMUL_INT8": "i8mm",
    "SVE": "sve", "SME": "sme",
}
"""Features whose flag is missing from /proc/cpuinfo mean the build will fault on this CPU."""

_FEATURE = re.compile(r"(\w+) = 1\b")


def installed_version(package: str = "llama-cpp-python") -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


BASELINE_OFF = {"avx2": "AVX2", "fma": "FMA", "f16c": "F16C", "bmi2": "BMI2", "avx": "AVX"}
"""x86 flags the portable build assumes, and its option that turns each off: an x86-64 CPU
without them (an Atom or Celeron kiosk board) needs a build without them."""


def cmake_args_for(flags: frozenset[str] | None) -> str:
    """The portable options, less what this x86 CPU lacks (its flags; None: unknown)."""
    if flags is None or "sse4_2" not in flags:  # not x86, or flags unread: the plain portable
        return PORTABLE_CMAKE_ARGS
    lacking = [option for flag, option in BASELINE_OFF.items() if flag not in flags]
    return " ".join([PORTABLE_CMAKE_ARGS, *(f"-DGGML_{option}=OFF" for option in lacking)])


def reinstall_command() -> str:
    """The command that replaces the installed llama-cpp-python by a portable build this CPU
    can run."""
    pinned = installed_version()
    wanted = f"llama-cpp-python=={pinned}" if pinned != "not installed" else "llama-cpp-python"
    return (f'CMAKE_ARGS="{cmake_args_for(cpu_flags())}" pip install --force-reinstall '
            f"--no-cache-dir --no-deps '{wanted}'")


def parse_features(system_info: str) -> frozenset[str]:
    """`CPU : SSE3 = 1 | AVX = 1 | AVX512 = 0 | ...` -> {"SSE3", "AVX"}."""
    return frozenset(_FEATURE.findall(system_info))


def compiled_features() -> frozenset[str]:
    """What the installed llama.cpp's CPU backend was compiled for (loads the library, runs
    nothing)."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info()
    return parse_features(info.decode("utf-8", "replace") if isinstance(info, bytes) else info)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The first CPU's flags (x86 "flags", arm64 "Features"); None when they cannot be read."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def unsupported_features(features: frozenset[str], flags: frozenset[str] | None) -> list[str]:
    """The compiled features this CPU does not list (none when its flags are unknown)."""
    if flags is None:
        return []
    return sorted(f for f in features if f in CPU_FLAGS and CPU_FLAGS[f] not in flags)


def describe(features: frozenset[str]) -> str:
    """`portable build (AVX2 FMA F16C)` or `built for one CPU (AVX512 AMX_INT8 ...)`."""
    shown = " ".join(f for f in CPU_FLAGS if f in features) or platform.machine()
    if features <= PORTABLE_FEATURES:
        return f"portable build ({shown})"
    return f"built for one CPU ({shown})"


def main(argv: list[str]) -> int:
    """`python -m edge_agent.engines.llama_build --cmake-args`: print PORTABLE_CMAKE_ARGS
    (needs nothing installed); `--portable`: exit 1, saying why, unless the installed
    llama-cpp-python is the portable build and this CPU lists every feature it uses."""
    if argv == ["--cmake-args"]:
        print(PORTABLE_CMAKE_ARGS)
        return 0
    if argv != ["--portable"]:
        print("usage: python -m edge_agent.engines.llama_build --cmake-args | --portable",
              file=sys.stderr)
        return 2
    features = compiled_features()
    missing = unsupported_features(features, cpu_flags())
    print(f"llama-cpp-python {installed_version()}: {describe(features)}"
          + (f"; this CPU lacks {' '.join(missing)}" if missing else ""))
    return 0 if features <= PORTABLE_FEATURES and not missing else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
