"""``herald web``'s processes: ``WEB_CONCURRENCY`` of them serve one port, a dead one is
replaced, and SIGTERM ends them all with exit code 0."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.services import find_free_port
from tests.support.waiting import wait_for


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _servers(parent: psutil.Process) -> list[psutil.Process]:
    """The live processes serving requests: the children that run uvicorn's server."""
    servers = []
    for child in parent.children():
        try:
            if "multiprocessing.resource_tracker" not in " ".join(child.cmdline()):
                servers.append(child)
        except psutil.Error:  # gone, or a zombie its parent has not reaped yet
            continue
    return servers


@pytest.fixture
def web(database_url: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen,
                                                                             str, Path]]:
    """``herald web`` with WEB_CONCURRENCY=2 on a free port: the process, its base URL and
    its log."""
    port = find_free_port()
    log = tmp_path / "web.log"
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
           "WEB_CONCURRENCY": "2", "PORT": str(port)}
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, "-m", "herald.cli", "web", "--host",
                                    "127.0.0.1"], env=env, stdout=output,
                                   stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    parent = psutil.Process(process.pid)
    try:
        wait_for(lambda: (len(_servers(parent)) == 2 and _answers(f"{base}/healthz"))
                 or process.poll() is not None, timeout=60, what="herald web's 2 processes")
        assert process.poll() is None, log.read_text()[-2000:]
        yield process, base, log
    finally:
        left = parent.children(recursive=True) if process.poll() is None else []
        for child in [parent, *left]:
            with contextlib.suppress(psutil.Error):
                child.kill()
        process.wait(timeout=30)


def test_web_concurrency_processes_serve_and_a_dead_one_is_replaced(
        web: tuple[subprocess.Popen, str, Path]) -> None:
    process, base, log = web
    parent = psutil.Process(process.pid)
    # Given herald web with WEB_CONCURRENCY=2: two processes serve its port
    first = _servers(parent)
    assert len(first) == 2

    # When one of them dies
    first[0].kill()

    # Then another takes its place, and the port answers throughout
    wait_for(lambda: len(_servers(parent)) == 2
             and first[0].pid not in [p.pid for p in _servers(parent)],
             timeout=60, what="a replacement process")
    assert all(_answers(f"{base}/healthz") for _ in range(20))
    assert process.poll() is None, log.read_text()[-2000:]


def test_sigterm_stops_every_process_with_exit_code_0(
        web: tuple[subprocess.Popen, str, Path]) -> None:
    process, base, log = web
    servers = _servers(psutil.Process(process.pid))
    assert _answers(f"{base}/readyz")

    # When herald web gets SIGTERM (as a platform stops it)
    process.send_signal(signal.SIGTERM)

    # Then it exits 0 once each of its processes has finished, and none is left behind
    assert process.wait(timeout=60) == 0, log.read_text()[-2000:]
    # and none of its processes (each imports asyncssh) wrote its dependencies' warnings
    assert "DeprecationWarning" not in log.read_text(), log.read_text()[-3000:]
    wait_for(lambda: not any(server.is_running() and server.status() != psutil.STATUS_ZOMBIE
                             for server in servers), timeout=10, what="the processes' exit")


def test_processes_end_when_their_supervisor_is_killed(
        web: tuple[subprocess.Popen, str, Path]) -> None:
    process, base, _log = web
    servers = _servers(psutil.Process(process.pid))
    assert len(servers) == 2

    # When herald web's supervisor is killed outright (SIGKILL, the OOM killer)
    process.kill()
    process.wait(timeout=30)

    # Then its processes stop too, rather than serve on with nobody to replace them
    wait_for(lambda: not any(server.is_running() and server.status() != psutil.STATUS_ZOMBIE
                             for server in servers), timeout=30, what="the processes' exit")
    assert not _answers(f"{base}/healthz")
