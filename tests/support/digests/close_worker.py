"""``herald worker --import tests.support.digests.close_worker notification-orchestration
notification-email``: the digests' closes with a 1 s lock (a run whose worker is killed is
taken up again a second later) and email without its rate limit.

With ``DIGEST_STALL_MARKER`` set to a path that does not exist yet, the first close that
gets a bucket stalls inside its transaction — after the conditional UPDATE, before the
commit — once it has created that file: the test kills the process there.
"""

import dataclasses
import os
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Connection

import models.digests
from actors.queues import registry

registry.declare(dataclasses.replace(registry.spec("notification-orchestration"),
                                     lock_duration=timedelta(seconds=1)))
registry.declare(dataclasses.replace(registry.spec("notification-email"), rate_limit=None))

_marker = os.environ.get("DIGEST_STALL_MARKER")
_close = models.digests.close_bucket


def _stalling_close(connection: Connection, bucket_id: str,
                    now: datetime) -> models.digests.Closed | None:
    closed = _close(connection, bucket_id, now)
    if closed is not None and _marker and not Path(_marker).exists():
        Path(_marker).touch()
        time.sleep(120)  # the test kills the process meanwhile
    return closed


models.digests.close_bucket = _stalling_close
