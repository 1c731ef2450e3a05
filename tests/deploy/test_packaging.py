"""The wheel: what ``pip install herald`` gets must run without the checkout.

Slow (it builds a wheel): the checkout is copied, built into a wheel
offline (``--no-build-isolation``: the dev extras carry setuptools and wheel), installed
into a directory of its own, and run from outside the repository with only that
directory and this environment's dependencies importable.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

import pytest

from actors.event_catalogue import EVENT_TYPES
from actors.locales import SUPPORTED_LOCALES
from tests.pipeline.test_render import MINIMAL_DATA

REPO = Path(__file__).resolve().parents[2]
#: What a build never needs from the checkout (and what would make the copy slow).
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                     "dist", ".herald", "herald.db*", ".pytest_cache",
                                     ".ruff_cache", ".mypy_cache", "tests", "bench")
#: Seconds a wheel build, install or installed command may take.
STEP_S = 300
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]

#: Run inside the installed copy: render every type's channels in every locale, and read
#: every Lua script the ledger loads; prints where each module came from and what it saw.
RENDER_AND_LOAD = """
import json, sys
import actors.render, herald.queue.ledger
from actors.render import render
cases = json.loads(sys.argv[1])
rendered = {}
for name, channel, locale, data in cases:
    message = render(name, channel, locale, data)
    rendered[f"{name}/{channel}/{locale}"] = message.text
scripts = {path.name: len(path.read_text()) for path in herald.queue.ledger.LUA_DIR.glob("*.lua")}
print(json.dumps({"render": actors.render.__file__, "ledger": herald.queue.ledger.__file__,
                  "rendered": rendered, "scripts": scripts}))
"""


class Built(NamedTuple):
    """The wheel built from this checkout, and what the build printed."""

    wheel: Path
    log: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel built from a copy of this checkout (verbose: the backend's warnings are
    in the log, as a user's ``pip install .`` prints them)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES)
    wheels = root / "wheels"
    build = subprocess.run([*PIP, "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "--no-index", "-w", str(wheels), str(source)],
                           check=True, capture_output=True, text=True, timeout=STEP_S)
    shutil.rmtree(source)  # nothing may be read from the build's source tree either
    (wheel,) = wheels.glob("herald-*.whl")
    return Built(wheel=wheel, log=build.stdout + build.stderr)


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the wheel built from this checkout was installed into."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([*PIP, "install", "--no-deps", "--no-index", "--target", str(target),
                    str(built.wheel)], check=True, capture_output=True, text=True,
                   timeout=STEP_S)
    return target


def run_installed(installed: Path, cwd: Path, *args: str,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python args…`` from ``cwd`` (outside the checkout) seeing the installed copy first."""
    cwd.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=STEP_S, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(installed),
                               "PYTHONIOENCODING": "utf-8", **(env or {})})


@pytest.mark.slow
def test_the_installed_wheel_renders_every_message_and_loads_every_script(
        installed: Path, tmp_path: Path) -> None:
    # Given the wheel installed, and every type's channels in every locale
    cases = [(name, channel, locale, MINIMAL_DATA[name])
             for name, spec in EVENT_TYPES.items()
             for channel in spec.channels for locale in SUPPORTED_LOCALES]

    # When they are rendered, and the ledger's scripts read, from outside the checkout
    result = run_installed(installed, tmp_path / "elsewhere", "-c", RENDER_AND_LOAD,
                           json.dumps(cases))

    # Then every message rendered from the installed copy, and every script is there
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert Path(seen["render"]).is_relative_to(installed), seen["render"]
    assert Path(seen["ledger"]).is_relative_to(installed), seen["ledger"]
    assert sorted(seen["rendered"]) == sorted(f"{n}/{c}/{loc}" for n, c, loc, _ in cases)
    assert all(text.strip() for text in seen["rendered"].values()), seen["rendered"]
    shipped = sorted(path.name for path in (REPO / "herald" / "queue" / "lua").glob("*.lua"))
    assert sorted(seen["scripts"]) == shipped
    assert all(seen["scripts"].values()), seen["scripts"]


@pytest.mark.slow
def test_the_installed_wheel_migrates_a_database(installed: Path, tmp_path: Path) -> None:
    # Given the wheel installed and no database yet
    database = tmp_path / "fresh.db"

    # When `herald migrate` runs from outside the checkout
    result = run_installed(installed, tmp_path / "elsewhere", "-m", "herald.cli", "migrate",
                           env={"DATABASE_URL": f"sqlite:///{database}"})

    # Then the schema is at the newest revision the checkout ships
    assert result.returncode == 0, result.stderr
    newest = max(path.stem.split("_")[0]
                 for path in (REPO / "migrations" / "versions").glob("[0-9]*.py"))
    with sqlite3.connect(database) as connection:
        (revision,) = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {row[0] for row in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert revision == newest
    assert {"accounts", "deliveries"} <= tables, tables


@pytest.mark.slow
def test_the_build_warns_of_nothing_and_ships_every_template(built: Built) -> None:
    # Given the wheel built from the checkout, as `pip install .` builds it
    # Then setuptools warned of no deprecated setting and of no folder left out
    warnings = [line.strip() for line in built.log.splitlines()
                if "deprecated" in line.lower() or "absent from the" in line]
    assert warnings == [], "\n".join(warnings)
    # And every template of the checkout is in the wheel, where actors/render.py reads it
    shipped = {name for name in zipfile.ZipFile(built.wheel).namelist()
               if name.startswith("templates/")}
    expected = {path.relative_to(REPO).as_posix()
                for path in (REPO / "templates").rglob("*") if path.is_file()
                and "__pycache__" not in path.parts}
    assert expected and expected <= shipped, sorted(expected - shipped)


#: Builds the editable wheel of the current directory into ``sys.argv[1]`` through
#: setuptools' PEP 660 hook, as ``pip install -e .`` (``make demo``) does.
BUILD_EDITABLE = """
import sys
from setuptools import build_meta
print(build_meta.build_editable(sys.argv[1]))
"""


def test_an_editable_install_prints_no_warning_box(tmp_path: Path) -> None:
    # Given a copy of the checkout
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES)
    # When its editable wheel is built, as make demo's `pip install -e .` builds it
    build = subprocess.run([sys.executable, "-c", BUILD_EDITABLE, str(tmp_path / "wheel")],
                           cwd=source, capture_output=True, text=True, timeout=STEP_S,
                           check=False)
    # Then it builds, and setuptools printed none of its boxed warnings ("!!" … "!!")
    assert build.returncode == 0, build.stderr
    output = build.stdout + build.stderr
    assert "!!" not in output and "*" * 40 not in output, output
    # And the install is the project directory on sys.path: the code a user edits runs
    (wheel,) = (tmp_path / "wheel").glob("herald-*.whl")
    pth = [name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".pth")]
    assert [zipfile.ZipFile(wheel).read(name).decode().strip() for name in pth] == [
        str(source.resolve())]


@pytest.mark.slow
def test_the_wheel_ships_the_type_marker_of_every_package(built: Built) -> None:
    # Given the wheel built from the checkout
    names = set(zipfile.ZipFile(built.wheel).namelist())
    # Then each package says its type hints are to be read (PEP 561): a user's mypy checks
    # calls into herald.queue against them instead of taking them as Any
    missing = {f"{package}/py.typed" for package in ("herald", "actors", "providers", "models")}
    assert not missing - names, sorted(missing - names)


# -- the Makefile's installs ----------------------------------------------------------------
#: A stand-in for the virtualenv's python and herald: it writes down how it was called.
RECORDER = """#!/bin/sh
echo "$(basename "$0") $*" >> "$(dirname "$0")/../calls"
"""


def make(checkout: Path, target: str) -> list[str]:
    """Run ``make target`` in ``checkout`` (whose .venv records its calls); the pip
    installs it ran."""
    calls = checkout / ".venv" / "calls"
    calls.write_text("")
    subprocess.run(["make", "--no-print-directory", target], cwd=checkout, check=True,
                   capture_output=True, text=True, timeout=60)
    return [line for line in calls.read_text().splitlines()
            if "pip install" in line and "--upgrade pip" not in line]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile, pyproject.toml and the locks with a .venv whose python and herald only
    record their calls: what each target installs is seen without installing anything."""
    for name in ("Makefile", "pyproject.toml", "requirements.txt", "constraints.txt"):
        shutil.copy(REPO / name, tmp_path / name)
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for name in ("python", "herald", "ruff", "lint-imports", "mypy"):
        (bin_ / name).write_text(RECORDER)
        (bin_ / name).chmod(0o755)
    return tmp_path


def test_make_demo_installs_the_runtime_only_and_make_test_adds_the_dev_extras(
        checkout: Path) -> None:
    # When a fresh clone runs make demo, then make test, then both again
    demo, test = make(checkout, "demo"), make(checkout, "test")
    again = make(checkout, "demo") + make(checkout, "test")

    # Then the demo installed the runtime's lock, the tests the whole lock (dev extras
    # too), each checked against its hashes, herald itself on top with nothing resolved;
    # and nothing was installed twice
    assert demo == ["python -m pip install --require-hashes -r requirements.txt",
                    "python -m pip install --no-deps --no-build-isolation -e ."]
    assert test == ["python -m pip install --require-hashes -r constraints.txt",
                    "python -m pip install --no-deps --no-build-isolation -e ."]
    assert again == []


def test_make_test_then_make_demo_installs_once(checkout: Path) -> None:
    # When a fresh clone runs make test, then make demo
    test, demo = make(checkout, "test"), make(checkout, "demo")

    # Then the dev install serves the demo too
    assert test == ["python -m pip install --require-hashes -r constraints.txt",
                    "python -m pip install --no-deps --no-build-isolation -e ."]
    assert demo == []
