"""``python -m examples.standalone.clock``: fire the application's schedules until
SIGTERM/SIGINT (as many clocks as you like: each tick fires once), logging each tick it
fires (``schedule fired schedule=every-second-report job_id=repeat:…``) on stderr."""

from __future__ import annotations

import logging

from examples.standalone.app import app, require_redis
from herald.queue import fire_schedules, stop_on_signal


class WithFields(logging.Formatter):
    """``time level logger: message key=value…``: herald.queue logs what a line is about
    (which schedule fired, as which job) in fields beside its message."""

    FIELDS = ("schedules", "schedule", "job_id")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = [f"{name}={getattr(record, name)}" for name in self.FIELDS
                  if hasattr(record, name)]
        return " ".join([line, *fields])


if __name__ == "__main__":
    handler = logging.StreamHandler()
    handler.setFormatter(WithFields("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    require_redis()
    try:
        fire_schedules(stop_on_signal())
    finally:
        app.close()
