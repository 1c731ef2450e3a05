"""The locks: what CI tests is what ``make demo`` and a Heroku build install.

``constraints.txt`` pins every package of the runtime, the dev extras and the S3 extra,
each with its hashes (``make test`` and so CI install it); ``requirements.txt`` pins the
runtime alone with the same versions and hashes (``make demo``, and Heroku's buildpack,
whose ``bin/post_compile`` then installs herald itself). ``make lock`` writes both.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: Runtime dependencies with no ceiling, on purpose: certifi's versions are dates, and a
#: new one only brings new root certificates.
NO_CEILING = {"certifi"}


class Pin(NamedTuple):
    """One locked package: its version and the hashes of its files."""

    version: str
    hashes: frozenset[str]


def read_lock(name: str) -> dict[str, Pin]:
    """The pins of a lock file written by ``make lock`` (``name==version`` followed by its
    ``--hash`` options, continued over lines)."""
    text = (REPO / name).read_text().replace("\\\n", " ")
    pins: dict[str, Pin] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})*)", line)
        assert match, f"{name}: not a pinned, hashed requirement: {line[:80]}"
        package, version, hashes = match.groups()
        pins[canonicalize_name(package)] = Pin(version, frozenset(hashes.split()))
    return pins


def runtime_requirements() -> list[Requirement]:
    """herald's runtime dependencies as pyproject.toml declares them."""
    return [Requirement(spec) for spec in PYPROJECT["project"]["dependencies"]]


def every_requirement() -> list[Requirement]:
    """The runtime dependencies and every extra's."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    return runtime_requirements() + [Requirement(spec) for specs in extras.values()
                                     for spec in specs]


def test_every_runtime_dependency_has_a_floor_and_a_ceiling() -> None:
    # Given pyproject.toml's runtime dependencies (and the S3 extra a deploy may add)
    extras = PYPROJECT["project"]["optional-dependencies"]["s3"]
    for requirement in runtime_requirements() + [Requirement(spec) for spec in extras]:
        operators = {spec.operator for spec in requirement.specifier}
        # Then each has a lower bound, and an upper one unless it is named above
        assert ">=" in operators, f"{requirement} has no floor"
        if requirement.name not in NO_CEILING:
            assert "<" in operators, f"{requirement} has no ceiling (the next major)"


def test_every_pin_has_hashes_and_satisfies_pyproject() -> None:
    constraints = read_lock("constraints.txt")
    for requirement in every_requirement():
        # Every dependency named in pyproject.toml is pinned, inside its range...
        pin = constraints.get(canonicalize_name(requirement.name))
        assert pin, f"{requirement.name} is not in constraints.txt: run make lock"
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"constraints.txt pins {requirement.name}=={pin.version}, outside {requirement}: "
            "run make lock")
    # ...and every pin carries the hashes pip checks its files against
    assert all(pin.hashes for pin in constraints.values())


def test_the_runtime_lock_is_the_tested_lock_restricted_to_the_runtime() -> None:
    constraints, runtime = read_lock("constraints.txt"), read_lock("requirements.txt")
    # Every runtime pin is the pin CI tested, with the same files allowed
    differing = {name: (pin.version, constraints.get(name)) for name, pin in runtime.items()
                 if constraints.get(name) != pin}
    assert not differing, differing
    # and the runtime lock holds every runtime dependency plus herald's build backend
    names = {canonicalize_name(r.name) for r in runtime_requirements() if r.marker is None
             or r.marker.evaluate()} | {"setuptools", "wheel"}
    assert names <= set(runtime), sorted(names - set(runtime))
    # but none of the test tools
    assert not {"pytest", "mypy", "ruff", "schemathesis"} & set(runtime)


def test_these_tests_run_on_the_locked_versions() -> None:
    # What CI tests is exactly what the lock says (make test installs constraints.txt);
    # a package installed at another version means this environment was built otherwise
    pins = read_lock("constraints.txt")
    installed = {canonicalize_name(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()}
    for requirement in every_requirement():
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        if name not in installed:
            pytest.fail(f"{name} is locked but not installed: run make test")
        assert installed[name] == pins[name].version, (
            f"{name} {installed[name]} is installed, constraints.txt pins {pins[name].version}")


def test_heroku_builds_from_the_runtime_lock_then_installs_herald_alone() -> None:
    # Heroku's Python buildpack installs requirements.txt, then runs bin/post_compile
    hook = REPO / "bin" / "post_compile"
    assert hook.stat().st_mode & 0o111, "bin/post_compile must be executable"
    script = hook.read_text()
    assert "pip install --no-deps --no-build-isolation" in script
    assert (REPO / ".python-version").read_text().strip() == "3.11"
