"""``herald worker --import tests.support.digests.close_worker notification-orchestration
notification-email``: the digests' closes with a 1 s lock (a run whose worker is killed is
taken up again a second later) and email without its rate limit.

With ``DIGEST_STALL_MARKER`` set to a path that does not exist yet, the first close that
gets a bucket stalls once it has created that file — inside its transaction, after the
conditional UPDATE (``DIGEST_STALL_AT=close``, the default), or after the commit, before
its deliveries are handed to their queues (``DIGEST_STALL_AT=handoff``): the test kills
the process there.
"""

import dataclasses
import os
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

import actors.digests
import models.digests
from actors.queues import registry

registry.declare(dataclasses.replace(registry.spec("notification-orchestration"),
                                     lock_duration=timedelta(seconds=1)))
registry.declare(dataclasses.replace(registry.spec("notification-email"), rate_limit=None))

_marker = os.environ.get("DIGEST_STALL_MARKER")
_close = models.digests.close_bucket
_hand_off = actors.digests.hand_off


def _stall() -> None:
    if _marker and not Path(_marker).exists():
        Path(_marker).touch()
        time.sleep(120)  # the test kills the process meanwhile


def _stalling_close(connection: Connection, bucket_id: str,
                    now: datetime) -> models.digests.Closed | None:
    closed = _close(connection, bucket_id, now)
    if closed is not None:
        _stall()
    return closed


def _stalling_hand_off(*args: Any, **kwargs: Any) -> int:
    _stall()
    return _hand_off(*args, **kwargs)


if os.environ.get("DIGEST_STALL_AT", "close") == "close":
    models.digests.close_bucket = _stalling_close
else:
    actors.digests.hand_off = _stalling_hand_off  # type: ignore[assignment]  # same call
