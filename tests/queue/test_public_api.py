"""The queue library's public surface is one import line, and the old import paths still
give the same objects (existing code keeps working)."""

from __future__ import annotations

import importlib

import pytest

import herald.queue

#: Old module → names it exported that now live in herald.queue.
OLD_PATHS = {
    "herald.jobs": ["enqueue", "enqueue_many", "enqueue_groups", "queue", "Queue",
                    "EnqueueResult", "JobActor"],
    "herald.registry": ["QueueSpec", "Registry", "Keep", "Retention", "Backoff",
                        "NORMAL_PRIORITY", "URGENT_PRIORITY"],
    "herald.errors": ["Permanent", "Defer", "InvalidPayload", "InvalidMessage", "UnknownQueue"],
}


def test_every_public_name_is_importable_from_herald_queue() -> None:
    for name in herald.queue.__all__:
        assert getattr(herald.queue, name) is not None, name


@pytest.mark.parametrize("module", sorted(OLD_PATHS))
def test_an_old_import_path_gives_the_same_objects(module: str) -> None:
    old = importlib.import_module(module)
    for name in OLD_PATHS[module]:
        assert getattr(old, name) is getattr(herald.queue, name), f"{module}.{name}"


def test_the_old_worker_path_runs_the_same_worker() -> None:
    from herald.queue import worker
    from herald.worker import QueueWorker, run_worker_process

    assert (QueueWorker, run_worker_process) == (worker.QueueWorker, worker.run_worker_process)
