"""``herald demo``: real work through the real workers, with progress and a summary.

Its ``demo`` queue (:mod:`herald.demo.jobs`) is declared only when the demo runs: nothing
else imports it, so a production worker never consumes it and ``herald queues`` does not
list it.
"""

from herald.demo.command import DEFAULT_JOBS, run

__all__ = ["DEFAULT_JOBS", "run"]
