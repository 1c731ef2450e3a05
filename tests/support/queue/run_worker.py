"""``python -m tests.support.queue.run_worker QUEUE...``: a real worker process for tests,
on a queue App built from the environment (REDIS_URL, BROKER, QUEUE_PREFIX...)."""

import sys

from herald.queue.worker import run_worker_process
from tests.support.queue_app import install_queue_app

if __name__ == "__main__":
    install_queue_app()
    sys.exit(run_worker_process(sys.argv[1:], imports=["tests.support.queue.queues"]))
