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
from pathlib import Path

import pytest

from actors.render import EVENT_TYPES, SUPPORTED_LOCALES
from tests.unit.test_render import MINIMAL_DATA

REPO = Path(__file__).resolve().parents[1]
#: What a build never needs from the checkout (and what would make the copy slow).
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build",
                                     "dist", ".herald", "herald.db*", ".pytest_cache",
                                     ".ruff_cache", "tests", "bench")
#: Seconds a wheel build, install or installed command may take.
STEP_S = 300

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


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory the wheel built from this checkout was installed into."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES)
    wheels = root / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(wheels), str(source)],
                   check=True, capture_output=True, text=True, timeout=STEP_S)
    (wheel,) = wheels.glob("herald-*.whl")
    target = root / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=STEP_S)
    shutil.rmtree(source)  # nothing may be read from the build's source tree either
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
