"""A store recovery step of the tests' own, for ``--import tests.lifecycle.recovery_probe``:
herald's store recovery group with a startup step that enqueues a probe job onto
``store-fulfillment``, as the real scan's enqueue does."""

from __future__ import annotations

import dataclasses

from actors.lifecycle import STORE_RECOVERY_GROUP
from herald.queue import enqueue
from herald.queue.worker import declare_groups
from tests.lifecycle.probes import Probe, lc_probe_store

#: The id of the job the probe step enqueues.
RECOVERY_PROBE_JOB = "recovery-probe"


def enqueue_recovery_probe() -> None:
    """Enqueue one probe job onto store-fulfillment now; raises when that fails."""
    enqueue(lc_probe_store, Probe(key=RECOVERY_PROBE_JOB), job_id=RECOVERY_PROBE_JOB)


declare_groups(dataclasses.replace(STORE_RECOVERY_GROUP, name="store recovery (probe)",
                                   startup=enqueue_recovery_probe))
