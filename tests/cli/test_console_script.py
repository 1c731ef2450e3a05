"""The installed ``herald`` console script, as a new user first runs it: its version, an
application's modules found in the current directory, no warnings of herald's
dependencies, a queue table that fits the terminal, and a taken port named.

Each test runs the script installed next to this interpreter (not ``python -m
herald.cli``, whose path already starts at the current directory).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.cli.test_cli import QUICK_S, herald_env, table_rows
from tests.support.waiting import wait_for

#: The console script ``pip install`` put beside this interpreter.
HERALD = Path(sys.executable).parent / "herald"
#: The live-count columns of ``herald queues``: always shown, whatever the width.
COUNTS = ["waiting", "active", "delayed", "failed"]

#: An application of the user's own, in the directory ``herald`` runs in: one queue on
#: herald.queue, its App configured by REDIS_URL and a key prefix of the test's.
SHOP = textwrap.dedent('''\
    import os

    from pydantic import BaseModel

    from herald.queue import App, QueueConfig, QueueSpec, Registry

    registry = Registry()
    registry.declare(QueueSpec(name="shop-orders", concurrency=1, attempts=1))


    class Order(BaseModel):
        order_id: int


    @registry.actor(queue="shop-orders", payload=Order)
    def place(job: Order) -> None:
        """Nothing to do: the test only starts the worker."""


    app = App(QueueConfig(redis_url=os.environ["REDIS_URL"], prefix=os.environ["SHOP_PREFIX"]),
              registry)
    ''')


def herald(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the installed ``herald args…`` to completion; output captured as text."""
    assert HERALD.exists(), f"no console script at {HERALD}: is herald installed?"
    return subprocess.run([str(HERALD), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=QUICK_S, check=False)


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    # When a user asks the installed command its version
    result = herald("--version", cwd=tmp_path, env=herald_env())

    # Then it prints the version pip installed, on stdout, and nothing else
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"herald {version('herald')}\n"
    assert result.stderr == ""


def test_import_finds_a_module_in_the_current_directory(tmp_path: Path) -> None:
    # Given an application's module in the directory the user is in
    (tmp_path / "shop.py").write_text(SHOP)

    # When the queue table is asked to import it by name
    result = herald("queues", "--import", "shop", cwd=tmp_path,
                    env=herald_env(REDIS_URL="redis://127.0.0.1:1/0", SHOP_PREFIX="unused"))

    # Then it was found there, and its queue is listed beside herald's
    assert result.returncode == 0, result.stderr
    assert "shop-orders" in table_rows(result.stdout), result.stdout


def test_a_worker_of_an_app_in_the_current_directory_starts(tmp_path: Path,
                                                            redis_url: str) -> None:
    # Given an application's module in the directory the user is in
    (tmp_path / "shop.py").write_text(SHOP)
    log = tmp_path / "worker.log"
    env = herald_env(REDIS_URL=redis_url, SHOP_PREFIX=f"shop{uuid.uuid4().hex[:10]}",
                     LOG_LEVEL="INFO", WORKER_PORT="0")

    # When its worker is started as docs/queue.md says: herald worker --app shop:app
    with log.open("w") as stderr:
        process = subprocess.Popen([str(HERALD), "worker", "--app", "shop:app"], cwd=tmp_path,
                                   env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: "worker started" in log.read_text() or process.poll() is not None,
                 timeout=QUICK_S, what="the worker's start")
        # Then it found the module and runs the application's queue
        assert process.poll() is None, log.read_text()[-3000:]
        assert "queues=shop-orders" in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=QUICK_S)
    # and stops cleanly
    assert code == 0, log.read_text()[-3000:]


@pytest.mark.parametrize("args", [["worker", "--app", "shop:app"],
                                  ["queues", "--import", "shop"]])
def test_a_module_that_is_nowhere_is_named_in_one_line(tmp_path: Path, args: list[str]) -> None:
    # When a command is told to import a module the current directory does not hold
    result = herald(*args, cwd=tmp_path,
                    env=herald_env(REDIS_URL="redis://127.0.0.1:1/0", SHOP_PREFIX="unused"))

    # Then it stops with one line naming the module and where it looked
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"herald: no module named 'shop' in the current directory "
                             f"({tmp_path}) or on the Python path\n")


def test_a_command_prints_no_warning_of_its_dependencies(tmp_path: Path) -> None:
    # Given the libraries herald imports, of which asyncssh warns (through cryptography)
    # that DSA is deprecated as it is imported
    imported = subprocess.run([sys.executable, "-W", "default", "-c", "import asyncssh"],
                              capture_output=True, text=True, timeout=QUICK_S, check=False)
    assert imported.returncode == 0, imported.stderr

    # When a command that imports every actor module (asyncssh among them) runs
    result = herald("queues", cwd=tmp_path, env=herald_env())

    # Then it says nothing of it: its stderr holds no warning at all
    assert result.returncode == 0, result.stderr
    assert "DeprecationWarning" not in result.stderr, result.stderr[:3000]
    assert "DSA" not in result.stderr, result.stderr[:3000]

    # But whoever asks for warnings (-W, PYTHONWARNINGS) still sees them
    asked = herald("queues", cwd=tmp_path, env=herald_env(PYTHONWARNINGS="default"))
    if "DSA is deprecated" in imported.stderr:
        assert "DSA is deprecated" in asked.stderr, asked.stderr[:3000]


@pytest.mark.parametrize("columns", [100, 80])
def test_the_queue_table_fits_columns_and_its_counts_stay(tmp_path: Path, redis_url: str,
                                                          columns: int) -> None:
    # Given live counts (a Redis that answers)
    env = herald_env(REDIS_URL=redis_url, BROKER="redis",
                     QUEUE_PREFIX=f"narrow{uuid.uuid4().hex[:10]}", COLUMNS=str(columns))

    # When the queue table is printed for a terminal of `columns` columns
    result = herald("queues", cwd=tmp_path, env=env)

    # Then no line is wider than that
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= columns, result.stdout
    # and every queue's live counts are there, whole, under their headers
    header = next(line for line in lines if line.startswith("┃"))
    names = [cell.strip() for cell in header.strip("┃").split("┃")]
    assert names[0] == "queue" and names[-4:] == COUNTS, header
    rows = table_rows(result.stdout)
    assert rows["notification-email"][-4:] == ["0", "0", "0", "0"], result.stdout
    # and the table says which columns it left out, and how to see them
    assert "left out to fit" in " ".join(result.stdout.split()), result.stdout


def test_a_taken_web_port_is_named_in_one_line(tmp_path: Path) -> None:
    # Given a port some other process is listening on
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # When herald web is started on it, by --port and by PORT
        by_option = herald("web", "--host", "127.0.0.1", "--port", str(port), cwd=tmp_path,
                           env=herald_env())
        by_setting = herald("web", "--host", "127.0.0.1", cwd=tmp_path,
                            env=herald_env(PORT=str(port)))

    # Then it stops at once with one line naming the port and how to choose another
    for result in (by_option, by_setting):
        assert result.returncode == 1, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert f"port {port} is already in use" in lines[0]
        assert "PORT" in lines[0] and "--port" in lines[0]
