"""``python -m tests.support.queue.run_worker QUEUE...``: a real worker process for tests."""

import sys

from herald.queue.worker import run_worker_process

if __name__ == "__main__":
    sys.exit(run_worker_process(sys.argv[1:], imports=["tests.support.queue.queues"]))
