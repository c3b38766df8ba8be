"""The install a user runs is the one CI runs: README's command builds llama.cpp with the
portable options the code names, through the constraints file, and that file pins every
dependency pyproject.toml declares, within its ranges."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from edge_agent.engines import llama_build

REPO = Path(__file__).resolve().parent.parent


def _setup_command() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Set up", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO / "config" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not pinned with ==: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_readme_installs_the_portable_build_through_the_constraints() -> None:
    command = _setup_command()
    assert f'CMAKE_ARGS="{llama_build.PORTABLE_CMAKE_ARGS}"' in command
    assert 'PIP_CONSTRAINT="$PWD/config/constraints.txt"' in command
    assert "--no-cache-dir" in command  # a wheel built earlier for this CPU is not reused


def test_ci_installs_the_same_way() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert 'PIP_CONSTRAINT="$PWD/config/constraints.txt"' in ci
    assert "python3 -m edge_agent.engines.llama_build --cmake-args" in ci
    assert "python3 -m edge_agent.engines.llama_build --portable" in ci


def test_every_dependency_is_pinned_within_its_range() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("models", "sync", "dev"):
        declared += project["optional-dependencies"][extra]
    pins = _pins()
    for text in declared:
        requirement = Requirement(re.sub(r"\s+#.*", "", text))
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is not in config/constraints.txt"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{requirement.name}=={pins[name]} is outside pyproject's {requirement.specifier}")
    for tool in ("scikit-build-core", "setuptools", "wheel"):  # builds from source, pinned too
        assert tool in pins


def test_a_build_is_described_by_what_it_was_compiled_for() -> None:
    native = llama_build.parse_features(
        "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | AVX_VNNI = 0 | "
        "OPENMP = 1 |")
    assert native == {"SSE3", "AVX", "AVX2", "AVX512", "AMX_INT8", "OPENMP"}
    assert llama_build.describe(native) == "built for one CPU (SSE3 AVX AVX2 AVX512 AMX_INT8)"
    portable = llama_build.parse_features("CPU : AVX2 = 1 | FMA = 1 | REPACK = 1 |")
    assert llama_build.describe(portable) == "portable build (AVX2 FMA)"
    zen2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2", "pni"})
    assert llama_build.unsupported_features(native, zen2) == ["AMX_INT8", "AVX512"]
    assert llama_build.unsupported_features(native, None) == []  # flags unknown: no verdict


def test_a_cpu_without_avx2_gets_a_build_without_it() -> None:
    atom = frozenset({"sse4_2", "ssse3", "pni"})  # Gemini Lake: no AVX at all
    assert llama_build.cmake_args_for(atom) == (
        f"{llama_build.PORTABLE_CMAKE_ARGS} -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF "
        "-DGGML_BMI2=OFF -DGGML_AVX=OFF")
    haswell = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})
    assert llama_build.cmake_args_for(haswell) == llama_build.PORTABLE_CMAKE_ARGS
    assert llama_build.cmake_args_for(frozenset({"asimd", "fp"})) == (  # a Pi: ARMv8-A baseline
        llama_build.PORTABLE_CMAKE_ARGS)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm crc32\n\nprocessor\t: 1\n")
    assert llama_build.cpu_flags(cpuinfo) == {"fp", "asimd", "evtstrm", "crc32"}
    assert llama_build.cpu_flags(tmp_path / "missing") is None
