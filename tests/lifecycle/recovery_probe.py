"""A store recovery step of the tests' own, for ``--import tests.lifecycle.recovery_probe``:
herald's store recovery group with a startup step that enqueues a probe job onto
``store-fulfillment``, as the real scan's enqueue does. Only worker subprocesses import
it: in a test process it would add its group to every plan."""

from __future__ import annotations

import dataclasses

from actors.lifecycle import STORE_RECOVERY_GROUP
from herald.queue import enqueue
from herald.queue.worker import declare_groups
from tests.lifecycle.probes import RECOVERY_PROBE_JOB, Probe, lc_probe_store


def enqueue_recovery_probe() -> None:
    """Enqueue one probe job onto store-fulfillment now; raises when that fails."""
    enqueue(lc_probe_store, Probe(key=RECOVERY_PROBE_JOB), job_id=RECOVERY_PROBE_JOB)


declare_groups(dataclasses.replace(STORE_RECOVERY_GROUP, name="store recovery (probe)",
                                   startup=enqueue_recovery_probe))
