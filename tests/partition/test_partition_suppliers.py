"""A worker host cut off in the middle of an SFTP upload leaves one file per dispatch on
the supplier's server (docs/failure-modes.md#partition).

Four Sysco orders wait for dispatch (Sysco's group runs one upload at a time). The first
worker host starts the first upload; the SFTP server holds its write, and the host's
link (to Redis, PostgreSQL and the SFTP server alike) goes down. The server then lets the
write land, but its answer never reaches the host: the upload gives up after the SFTP
operation timeout (SFTP_OPERATION_TIMEOUT_S, short here as the job lock is), leaving
``name.part``. Once the run's lock ran out, the second host
restarts it under a fresh interchange number and uploads the rest. Then the link comes
back: the cut-off host's run ends ``stale``, and it renamed nothing. A stale-dispatch
sweep and every dispatch's job added again change nothing either: one complete file per
dispatch, each dispatch ``submitted`` once.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from actors.purchasing import sweep_stale_dispatches
from herald.demo.sftp_server import SftpTestServer
from herald.queue import JobState
from models.base import utcnow
from tests.partition.timings import SFTP_OPERATION_TIMEOUT
from tests.purchasing.conftest import Placed, make_item, make_supplier, place_order
from tests.support.netns import Network
from tests.support.purchasing.dispatching import (
    dispatch_row,
    ended,
    enqueue_dispatch,
    files_under,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

ORDERS = 4
RUN_IGNORED = "run ignored: job no longer holds this token"
WORKER = ("worker", "--import", "tests.partition.short_locks", "supplier-dispatch")
#: The workers' environment: their SFTP operations give up as fast as their lock runs out.
WORKER_ENV = {"SFTP_OPERATION_TIMEOUT_S": str(SFTP_OPERATION_TIMEOUT.total_seconds())}


def _complete_files(sftp: SftpTestServer) -> list[str]:
    """The files a supplier would read (an upload cut short leaves ``name.part``)."""
    return [name for name in files_under(sftp.root) if not name.endswith(".part")]


@pytest.mark.timeout(180)
def test_a_host_cut_off_mid_upload_leaves_one_file_per_dispatch(
        purchasing: str, sftp: SftpTestServer, network: Network) -> None:
    started = time.monotonic()
    cut_off, other = network.hosts
    host, port = network.reach((sftp.host, sftp.port))
    sysco = make_supplier("sysco", sftp=sftp, host=host, port=port)
    flour = make_item("Flour", mappings=[(sysco, "SY-FLOUR", True)])
    orders: list[Placed] = [place_order([(flour, n)], order_number=f"PO-{n}")
                            for n in range(1, ORDERS + 1)]
    cut_off.spawn_herald(*WORKER, label="worker", env=WORKER_ENV)
    wait_for(lambda: cut_off.log_lines("worker", "worker started"), timeout=60, every=0.2,
             what="the first host's worker to start")

    # Given the first host's upload in flight, its write held by the server
    sftp.pause_writes()
    jobs = [enqueue_dispatch(placed, sysco).job_id for placed in orders]
    wait_for(lambda: sftp.writes_waiting == 1, timeout=60, every=0.05,
             what="the first upload to be in flight")
    # When the host's link goes down, and the server then takes the write in
    cut_off.cut()
    cut_at = time.monotonic()
    sftp.resume_writes()
    other.spawn_herald(*WORKER, label="worker", env=WORKER_ENV)
    # the other host restarts the run once its lock ran out, and uploads every order
    wait_for(lambda: all(dispatch_row(placed.dispatch_by_supplier[sysco]).status
                         == "submitted" for placed in orders),
             timeout=120, every=0.5, what="every dispatch to be submitted")
    cut_for = time.monotonic() - cut_at
    cut_off.restore()
    assert cut_for > SFTP_OPERATION_TIMEOUT.total_seconds()

    # Then the cut-off host's run ends, refused by its run token
    wait_for(lambda: cut_off.log_lines("worker", RUN_IGNORED) >= 1, timeout=60, every=0.5,
             what="the cut-off host's late job end to be refused")
    assert all(ended(job_id).state == JobState.COMPLETED for job_id in jobs)
    # and a stale-dispatch sweep, and each job added again, send nothing more
    # (an hour ahead: every dispatch is old enough for it to look at)
    assert sweep_stale_dispatches(now=utcnow() + timedelta(hours=1)).added == 0
    again = [enqueue_dispatch(placed, sysco).job_id for placed in orders]
    assert all(ended(job_id).return_value["reason"] == "already_submitted" for job_id in again)

    # one complete file per dispatch, named by its reference, each sent on its one
    # successful attempt; the cut-off upload left at most its .part
    references = sorted(f"outbound/{dispatch_row(placed.dispatch_by_supplier[sysco]).reference}"
                        for placed in orders)
    assert _complete_files(sftp) == references
    assert len(files_under(sftp.root)) - len(references) <= 1
    print(f"partition suppliers test: {time.monotonic() - started:.0f} s, cut for "
          f"{cut_for:.1f} s, files {files_under(sftp.root)}")
