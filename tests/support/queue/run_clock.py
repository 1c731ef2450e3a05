"""``python -m tests.support.queue.run_clock``: a real clock process for tests, on a queue
App built from the environment (REDIS_URL, BROKER, QUEUE_PREFIX...) that reads the test
queues' registry (their schedules) beside herald's."""

from herald.queue import fire_schedules, stop_on_signal
from tests.support.queue.queues import registry
from tests.support.queue_app import install_queue_app

if __name__ == "__main__":
    install_queue_app(registry)
    fire_schedules(stop_on_signal())
