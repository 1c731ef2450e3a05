"""A worker imports the lanes of the queues it serves, and no other.

Every restart of a worker (a deploy, an autoscaled process, a crashed one brought back)
waits for its imports; a worker of the email queue that loads the SFTP client, the
supplier lanes or the eSIM store pays for code it never runs, in start time and memory
(docs/queue.md#the-queue-table). These tests start a real ``herald worker``, stop it
once it has logged ``worker started``, and read every module it had imported by its exit
(``sys.modules``, written at exit: a superset of what its start imported), and how many
times the garbage collector had run by the moment it was started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import NamedTuple

import pytest

from actors.queues import EVERY_WORKER_MODULES, QUEUE_MODULES, herald_queues, registry
from herald.commands.shared import load_actor_modules
from tests.support.processes import REPO
from tests.support.waiting import wait_for

#: Seconds a worker may take to start (imports included) on a loaded test machine.
START_S = 60
#: What a worker of ``notification-email`` never needs: other lanes and their tables, the
#: SDKs of transports it does not use (SFTP, S3, Twilio, the PDF renderer's pipe), and
#: RabbitMQ's client on a Redis broker.
NOT_FOR_EMAIL = ("asyncssh", "boto3", "twilio", "pika", "actors.supplier_dispatch",
                 "actors.sysco_inbound", "actors.purchasing", "actors.backorder_reroute",
                 "actors.store", "actors.store_recovery", "actors.payments",
                 "actors.activation", "actors.catalog", "models.activations", "models.catalog",
                 "models.payments", "models.purchasing", "models.store", "providers.sftp",
                 "providers.pdf", "providers.esim", "herald.demo", "herald.web")
#: ``herald.cli`` run as ``python -m`` runs it, writing at exit to the file named by the
#: first argument ``sys.modules`` and the collector's runs per generation as they were
#: when the worker logged that it had started.
_WORKER_WRITING_MODULES = (
    "import atexit, gc, json, logging, pathlib, runpy, sys\n"
    "out, seen = pathlib.Path(sys.argv.pop(1)), {}\n"
    "def started(record):\n"
    "    if 'worker started' in record.getMessage():\n"
    "        seen.setdefault('collections', [g['collections'] for g in gc.get_stats()])\n"
    "    return True\n"
    "logging.getLogger('herald.queue.worker').addFilter(started)\n"
    "atexit.register(lambda: out.write_text(\n"
    "    json.dumps({'modules': sorted(sys.modules), **seen})))\n"
    "runpy.run_module('herald.cli', run_name='__main__', alter_sys=True)\n")


class WorkerStart(NamedTuple):
    """What a worker's start did: every module imported by its exit, and how many times
    the collector had run by its ``worker started`` (youngest generation first)."""

    modules: set[str]
    collections: list[int]


def start_worker(queues: list[str], env: dict[str, str], workdir: Path) -> WorkerStart:
    """Start ``herald worker QUEUES…``, stop it (SIGTERM; it must exit 0) once it has
    logged ``worker started``; what its start did."""
    log, written = workdir / "worker.log", workdir / "start.json"
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", _WORKER_WRITING_MODULES,
                                    str(written), "worker", *queues], cwd=REPO, env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: "worker started" in log.read_text() or process.poll() is not None,
                 timeout=START_S, what="the worker's start")
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=START_S)
    assert code == 0, log.read_text()[-3000:]
    start = json.loads(written.read_text())
    return WorkerStart(set(start["modules"]), start["collections"])


def imports_of_worker(queues: list[str], env: dict[str, str], workdir: Path) -> set[str]:
    """The modules a ``herald worker QUEUES…`` had imported by its exit, once it had
    logged ``worker started`` and was stopped (SIGTERM; it must exit 0)."""
    return start_worker(queues, env, workdir).modules


@pytest.fixture
def worker_env(migrated_database: str, redis_url: str) -> dict[str, str]:
    """A worker's environment: the test PostgreSQL and Redis, a key prefix of its own,
    any free health port; email through the mock, SMS through Twilio (credentials that
    are never used: no SMS is sent)."""
    return {**os.environ, "DATABASE_URL": migrated_database, "REDIS_URL": redis_url,
            "BROKER": "redis", "QUEUE_PREFIX": f"imports{uuid.uuid4().hex[:10]}",
            "WORKER_PORT": "0", "LOG_LEVEL": "INFO", "EMAIL_PROVIDER": "mock",
            "SMS_PROVIDER": "twilio", "TWILIO_ACCOUNT_SID": "AC" + "0" * 32,
            "TWILIO_AUTH_TOKEN": "unused", "TWILIO_FROM_NUMBER": "+15550100000",
            "PYTHONPATH": str(REPO)}


def test_an_email_worker_loads_its_lane_and_no_other(worker_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    # Given SMS configured through Twilio, sent by other processes, and Redis the broker
    # When a worker of the email queue has started
    start = start_worker(["notification-email"], worker_env, tmp_path)

    # Then it loaded the email lane, its tables, the relay its outcomes hand webhook
    # messages to, and the capsules it runs in
    assert {"actors.notifications", "models.notifications", "models.webhooks",
            *EVERY_WORKER_MODULES} <= start.modules
    # and no other lane or its tables, nor the SDK of a transport or provider it does
    # not use
    assert sorted(start.modules & set(NOT_FOR_EMAIL)) == []
    # and its start never walked every object it had built: the collector ran no full
    # collection while the imports built them, nor one at the end (herald/process.py)
    assert start.collections[2] == 0, start.collections


def test_an_sms_worker_builds_its_configured_provider(worker_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    # Given the same settings, when a worker of the SMS queue has started
    imported = imports_of_worker(["notification-sms"], worker_env, tmp_path)

    # Then it built the Twilio provider at its start (a setting that cannot work fails
    # there), and still loaded no supplier or store lane
    assert {"providers.twilio", "twilio", "actors.sms_fallback"} <= imported
    assert sorted(imported & set(NOT_FOR_EMAIL) - {"twilio"}) == []


def test_every_actor_of_herald_is_listed_under_its_queue() -> None:
    # Given every module of actors imported (as `herald worker` with no queue does)
    load_actor_modules()

    # Then each queue of the table says which modules declare its actors
    assert sorted(spec.name for spec in herald_queues()) == sorted(QUEUE_MODULES)
    # and each actor's module is among them: a worker of that queue imports it
    unlisted = {name: (actor.queue, actor.fn.__module__)
                for name, actor in registry.actors().items()
                if actor.fn.__module__.startswith("actors.")
                and actor.fn.__module__ not in QUEUE_MODULES.get(actor.queue, ())}
    assert unlisted == {}
