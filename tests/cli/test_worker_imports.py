"""A worker imports the lanes of the queues it serves, and no other.

Every restart of a worker (a deploy, an autoscaled process, a crashed one brought back)
waits for its imports; a worker of the email queue that loads the SFTP client, the
supplier lanes or the eSIM store pays for code it never runs, in start time and memory
(docs/queue.md#the-queue-table). These tests start a real ``herald worker``, stop it
once it has logged ``worker started``, and read every module it had imported by its exit
(``sys.modules``, written at exit: a superset of what its start imported).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from actors.queues import EVERY_WORKER_MODULES, QUEUE_MODULES, herald_queues, registry
from herald.commands.shared import load_actor_modules
from tests.support.processes import REPO
from tests.support.waiting import wait_for

#: Seconds a worker may take to start (imports included) on a loaded test machine.
START_S = 60
#: What a worker of ``notification-email`` never needs: other lanes, and the SDKs of
#: transports it does not use (SFTP, S3, Twilio, the PDF renderer's pipe).
NOT_FOR_EMAIL = ("asyncssh", "boto3", "twilio", "actors.supplier_dispatch",
                 "actors.sysco_inbound", "actors.purchasing", "actors.backorder_reroute",
                 "actors.store", "actors.store_recovery", "actors.payments",
                 "actors.activation", "actors.catalog", "providers.sftp", "providers.pdf",
                 "providers.esim", "herald.demo", "herald.web")
#: ``herald.cli`` run as ``python -m`` runs it, writing ``sys.modules`` at exit to the
#: file named by the first argument.
_WORKER_WRITING_MODULES = (
    "import atexit, pathlib, runpy, sys\n"
    "out = pathlib.Path(sys.argv.pop(1))\n"
    "atexit.register(lambda: out.write_text('\\n'.join(sorted(sys.modules))))\n"
    "runpy.run_module('herald.cli', run_name='__main__', alter_sys=True)\n")


def imports_of_worker(queues: list[str], env: dict[str, str], workdir: Path) -> set[str]:
    """The modules a ``herald worker QUEUES…`` had imported by its exit, once it had
    logged ``worker started`` and was stopped (SIGTERM; it must exit 0)."""
    log, modules = workdir / "worker.log", workdir / "modules.txt"
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-c", _WORKER_WRITING_MODULES,
                                    str(modules), "worker", *queues], cwd=REPO, env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: "worker started" in log.read_text() or process.poll() is not None,
                 timeout=START_S, what="the worker's start")
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=START_S)
    assert code == 0, log.read_text()[-3000:]
    return set(modules.read_text().split())


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
    # Given SMS configured through Twilio, sent by other processes
    # When a worker of the email queue has started
    imported = imports_of_worker(["notification-email"], worker_env, tmp_path)

    # Then it loaded the email lane, the relay its outcomes hand webhook messages to, and
    # the capsules it runs in
    assert {"actors.notifications", *EVERY_WORKER_MODULES} <= imported
    # and no other lane, nor the SDK of a transport or provider it does not use
    assert sorted(imported & set(NOT_FOR_EMAIL)) == []


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
