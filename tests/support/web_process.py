"""``herald web`` as a real process of a test's own, on a free port, stopped at the end."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from tests.support.processes import REPO
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

#: ``start(NAME=value, …)``: a started ``herald web``'s port and log file.
StartWeb = Callable[..., tuple[int, Path]]


def healthy(port: int) -> bool:
    """True when ``herald web`` on this machine's ``port`` answers ``/healthz`` with 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return int(answer.status) == 200
    except OSError:
        return False


@contextlib.contextmanager
def web_processes(logs: Path, host: str, settings: Mapping[str, str]) -> Iterator[StartWeb]:
    """Yield ``start(NAME=value, …)``, which runs ``herald web --host host`` on a free port
    with this environment, ``settings`` and the call's own on top (a setting given as ``""``
    is left out altogether), waits until it answers ``/healthz`` and returns its port and
    log (in ``logs``). Every process started is stopped when the block ends."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(**more: str) -> tuple[int, Path]:
        port = find_free_port()
        log = logs / f"web-{port}.log"
        env = {name: value for name, value in {**os.environ, **settings, **more}.items()
               if value != ""}
        with log.open("wb") as output:
            process = subprocess.Popen([sys.executable, "-m", "herald.cli", "web", "--host",
                                        host, "--port", str(port)], cwd=REPO, env=env,
                                       stdout=output, stderr=subprocess.STDOUT)
        processes.append(process)
        wait_for(lambda: healthy(port) or process.poll() is not None, timeout=60,
                 what="herald web")
        assert process.poll() is None, log.read_text()[-2000:]
        return port, log

    try:
        yield start
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
