"""``python -m tests.integration.run_clock``: a real clock process for tests."""

import tests.integration.queues  # noqa: F401  (declares the test schedules)
from herald.queue.schedules import run_clock, stop_on_signal

if __name__ == "__main__":
    run_clock(stop_on_signal())
