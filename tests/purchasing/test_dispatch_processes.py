"""The dispatch queue in real ``herald worker supplier-dispatch`` processes: a SIGTERM lets
an in-flight upload finish, Sysco's group limit holds across two processes while Costco's
emails go past its held uploads, and ``/readyz`` checks the PDF renderer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from herald.demo.sftp_server import SftpTestServer
from herald.queue import JobState, queue
from providers.x12 import parse_envelope
from tests.purchasing.conftest import Mailbox, make_item, make_supplier, place_order
from tests.queue.lifecycle.conftest import WorkerRun
from tests.support.purchasing.dispatching import (
    dispatch_row,
    ended,
    enqueue_dispatch,
    files_under,
)
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
QUEUE = "supplier-dispatch"
#: Seconds a worker process gets to start or to exit.
PROCESS_S = 60.0


def spawn_worker(**env: str) -> WorkerRun:
    """``herald worker supplier-dispatch`` with this test's environment (its database,
    Redis, queue prefix, SMTP relay) plus ``env``, logging JSON to a pipe we read."""
    variables = {**os.environ, "LOG_FORMAT": "json", "LOG_LEVEL": "INFO", "WORKER_PORT": "0",
                 "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), **env}
    process = subprocess.Popen([sys.executable, "-m", "herald.cli", "worker", QUEUE],
                               cwd=REPO, env=variables, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    run = WorkerRun(process)
    run._reader = threading.Thread(target=run.read_stderr, daemon=True)
    run._reader.start()
    return run


def stop_all(runs: list[WorkerRun]) -> None:
    """SIGTERM each worker still running and wait for it (kill past the bound)."""
    for run in runs:
        if run.process.poll() is None:
            run.process.terminate()
    for run in runs:
        try:
            run.wait(PROCESS_S)
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.wait()


def readyz(run: WorkerRun) -> tuple[int, dict[str, Any]]:
    """GET the worker's own /readyz (its port from its log)."""
    port = run.record("worker health server listening")["port"]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_sigterm_lets_an_in_flight_upload_finish(purchasing: str, sftp: SftpTestServer) -> None:
    # Given a worker process and a Sysco upload held mid-write by the server
    sysco = make_supplier("sysco", sftp=sftp)
    item = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    placed = place_order([(item, 4)])
    worker = spawn_worker()
    try:
        worker.record("worker started", timeout=PROCESS_S)
        sftp.pause_writes()
        job_id = enqueue_dispatch(placed, sysco).job_id
        wait_for(lambda: sftp.writes_waiting == 1, timeout=PROCESS_S,
                 what="the upload to be in flight")

        # When the worker is told to stop, and only then the server lets the write through
        worker.process.terminate()
        worker.record("signal SIGTERM: draining", timeout=PROCESS_S)
        assert worker.process.poll() is None
        sftp.resume_writes()

        # Then the worker finished the upload and exited cleanly
        assert worker.wait(PROCESS_S) == 0
    finally:
        sftp.resume_writes()
        stop_all([worker])

    # and the complete file is on the server (no .part left), the dispatch submitted
    job = queue(QUEUE).get(job_id)
    assert job is not None and job.state == JobState.COMPLETED
    dispatch = dispatch_row(placed.dispatch_by_supplier[sysco])
    assert (dispatch.status, dispatch.attempt) == ("submitted", 1)
    assert files_under(sftp.root) == [f"outbound/{dispatch.reference}"]
    assert parse_envelope((sftp.root / "outbound" / str(dispatch.reference)).read_text())


def test_costco_emails_go_past_held_sysco_uploads_one_of_which_runs_at_a_time(
        purchasing: str, sftp: SftpTestServer, mailbox: Mailbox) -> None:
    # Given two worker processes on the queue, and three orders each for Sysco and Costco
    sysco = make_supplier("sysco", sftp=sftp)
    costco = make_supplier("costco")
    flour = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    towels = make_item("Paper towels", mappings=[(costco, "CO-PT", True)])
    orders = [place_order([(flour, n), (towels, n)], order_number=f"PO-{n}")
              for n in (1, 2, 3)]
    workers = [spawn_worker(), spawn_worker()]
    in_flight: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            in_flight.append(max(sftp.sessions_open, sftp.writes_waiting))
            watching.wait(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        for worker in workers:
            worker.record("worker started", timeout=PROCESS_S)
        watcher.start()
        # When Sysco's uploads are held by its server
        sftp.pause_writes()
        sysco_jobs = [enqueue_dispatch(placed, sysco).job_id for placed in orders]
        wait_for(lambda: sftp.writes_waiting >= 1, timeout=PROCESS_S,
                 what="a Sysco upload to be held")
        # and the Costco dispatches are enqueued behind them
        costco_jobs = [enqueue_dispatch(placed, costco).job_id for placed in orders]

        # Then every Costco email goes out while a Sysco upload is still held
        assert all(ended(job_id).state == JobState.COMPLETED for job_id in costco_jobs)
        assert len(mailbox.messages) == 3
        assert sftp.writes_waiting == 1
        assert [dispatch_row(p.dispatch_by_supplier[sysco]).status for p in orders] == [
            "pending"] * 3

        # and once the server lets writes through, every Sysco order goes too
        sftp.resume_writes()
        assert all(ended(job_id).state == JobState.COMPLETED for job_id in sysco_jobs)
    finally:
        watching.set()
        sftp.resume_writes()
        stop_all(workers)
    watcher.join()

    # and at no time did more than one Sysco session exist (SYSCO_WORKER_CONCURRENCY)
    assert max(in_flight) == 1
    assert sftp.sessions_opened == 3
    assert len(files_under(sftp.root)) == 3
    assert [run.wait(0) for run in workers] == [0, 0]


def test_readyz_of_a_dispatch_worker_checks_the_pdf_renderer(purchasing: str) -> None:
    # Given a dispatch worker with the renderer and one whose CHROMIUM_PATH names nothing
    ready = spawn_worker()
    missing = spawn_worker(CHROMIUM_PATH="/nonexistent/chromium")
    try:
        for run in (ready, missing):
            run.record("worker started", timeout=PROCESS_S)

        # Then the first is ready, and the second says its renderer is missing
        assert readyz(ready) == (200, {"database": "ok", "redis": "ok", "broker": "ok",
                                       "queues": "ok"})
        status, checks = readyz(missing)
        assert status == 503
        assert checks["queues"] == "down"
        assert checks["errors"]["queues"].startswith("supplier queues not ready")
        assert "/nonexistent/chromium" in checks["errors"]["queues"]
        assert {key: checks[key] for key in ("database", "redis", "broker")} == {
            "database": "ok", "redis": "ok", "broker": "ok"}
    finally:
        stop_all([ready, missing])
    assert [ready.wait(0), missing.wait(0)] == [0, 0]
