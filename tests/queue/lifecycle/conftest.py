"""Fixtures of the worker lifecycle tests: ``herald worker`` subprocesses on a real Redis,
under a fresh key prefix, running the probe actors of :mod:`tests.support.queue.probes`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from herald import settings
from tests.support.queue_app import install_queue_app
from tests.support.waiting import wait_for

#: The checkout: worker subprocesses import the probe modules from it.
REPO = Path(__file__).resolve().parents[3]
#: Seconds a worker process gets to start, stop or exit in these tests.
PROCESS_S = 60.0
#: The variables of the environment that would point a worker elsewhere.
CONNECTION_VARIABLES = ("REDIS_URL", "REDIS_SENTINELS", "RABBITMQ_URL", "DATABASE_URL",
                        "BROKER", "QUEUE_PREFIX")


@dataclass
class WorkerRun:
    """A ``herald worker`` subprocess and the log records it wrote to stderr so far."""

    process: subprocess.Popen[str]
    records: list[dict[str, Any]] = field(default_factory=list)
    _reader: threading.Thread | None = None

    def read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            try:
                record = json.loads(line)
            except ValueError:
                record = {"level": "RAW", "msg": line.rstrip("\n")}
            self.records.append(record)

    def record(self, msg: str, timeout: float = PROCESS_S) -> dict[str, Any]:
        """Wait for the first record whose message starts with ``msg`` and return it."""
        found = wait_for(lambda: next((r for r in list(self.records)
                                       if str(r.get("msg", "")).startswith(msg)), None),
                         timeout=timeout, what=f"the worker to log {msg!r}")
        assert isinstance(found, dict)
        return found

    def index(self, msg: str, **fields: str) -> int:
        """Position of the first record starting with ``msg`` whose fields match."""
        for position, record in enumerate(self.records):
            if str(record.get("msg", "")).startswith(msg) and all(
                    record.get(key) == value for key, value in fields.items()):
                return position
        raise AssertionError(f"no record {msg!r} {fields} in {self.records}")

    def errors(self) -> list[str]:
        """The messages of every record at ERROR or above (and of any raw line)."""
        return [str(r["msg"]) for r in self.records
                if r.get("level") in ("ERROR", "CRITICAL", "RAW")]

    def wait(self, timeout: float = PROCESS_S) -> int:
        """Wait for the process to exit (and its stderr to be read); its exit code."""
        code = self.process.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout)
        return code

    def stop(self) -> int:
        """SIGTERM, then wait for the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait()


@dataclass
class Lifecycle:
    """herald pointed at a real Redis under a fresh prefix, for this test and its workers."""

    env: dict[str, str]
    cwd: Path
    runs: list[WorkerRun] = field(default_factory=list)

    def spawn(self, *queues: str, imports: tuple[str, ...] = ("tests.support.queue.probes",),
              **env: str) -> WorkerRun:
        """Start ``herald worker --import … QUEUES`` with this environment plus ``env``."""
        command = [str(Path(sys.executable).parent / "herald"), "worker"]
        for module in imports:
            command += ["--import", module]
        process = subprocess.Popen([*command, *queues], cwd=self.cwd,
                                   env={**self.env, **env}, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        run = WorkerRun(process)
        run._reader = threading.Thread(target=run.read_stderr, daemon=True)
        run._reader.start()
        self.runs.append(run)
        return run


def reset_herald() -> None:
    """Forget every cached setting, client and broker of this test process."""
    settings.reset_settings()
    install_queue_app()


@pytest.fixture
def lifecycle(monkeypatch: pytest.MonkeyPatch, redis_url: str,
              tmp_path: Path) -> Iterator[Lifecycle]:
    """This process and its ``herald worker`` subprocesses on the session's Redis 7,
    under a fresh ``QUEUE_PREFIX``; every worker still running at the end is killed."""
    env = {k: v for k, v in os.environ.items() if k not in CONNECTION_VARIABLES}
    ours = {"REDIS_URL": redis_url, "BROKER": "redis",
            "QUEUE_PREFIX": f"lc{uuid.uuid4().hex[:10]}",
            "DATABASE_URL": f"sqlite:///{tmp_path}/herald.db"}
    env.update(ours, LOG_FORMAT="json", LOG_LEVEL="INFO", WORKER_PORT="0",
               PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8", PYTHONPATH=str(REPO))
    for name, value in ours.items():
        monkeypatch.setenv(name, value)
    reset_herald()
    import tests.support.queue.probes  # noqa: F401  (the probe actors, for enqueueing)

    state = Lifecycle(env=env, cwd=tmp_path)
    yield state
    for run in state.runs:
        if run.process.poll() is None:
            run.process.kill()
        run.wait()
    reset_herald()
