"""``python -m tests.support.queue.run_clock``: a real clock process for tests, on a queue
App built from the environment (REDIS_URL, BROKER, QUEUE_PREFIX...)."""

import tests.support.queue.queues  # noqa: F401  (declares the test schedules)
from herald.queue.schedules import fire_schedules, stop_on_signal
from tests.support.queue_app import install_queue_app

if __name__ == "__main__":
    install_queue_app()
    fire_schedules(stop_on_signal())
