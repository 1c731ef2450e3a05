"""``python -m tests.support.queue.run_clock``: a real clock process for tests."""

import tests.support.queue.queues  # noqa: F401  (declares the test schedules)
from herald.queue.schedules import fire_schedules, stop_on_signal

if __name__ == "__main__":
    fire_schedules(stop_on_signal())
