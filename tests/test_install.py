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
    for extra in ("models", "dev"):
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
