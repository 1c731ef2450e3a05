"""Group commit for a route's blocking work: the requests in flight share one batch.

A single ``POST /v1/events`` costs three round trips (the insert, the enqueue, the
handoff stamp) whether it carries one event or a thousand. :class:`Coalescer` runs a
batch function in one thread of the process's own; each request hands its item over and
awaits its own result, and the items that arrive while a batch runs go together into the
next one. Alone, a request is a batch of one and waits for nothing; under load the
batches grow by themselves, as far as the database and Redis are slow (docs/deployment.md,
"The processes"). The event loop never blocks on the database, so ``/healthz`` answers
while a batch waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("herald.web")

#: What a submitted item waits in: the item, its future and the loop that awaits it.
_Entry = tuple[Any, asyncio.Future[Any], asyncio.AbstractEventLoop]


class Coalescer(Generic[T, R]):
    """Runs ``run_batch`` over the items submitted while the previous batch ran.

    ``run_batch`` gets up to ``max_batch`` items in submission order and returns one
    result per item, in the same order, which the item's :meth:`submit` returns (as it is,
    an exception instance included). An exception raised by ``run_batch`` itself is
    raised by the :meth:`submit` of every item of the batch. One thread per process runs
    the batches, one at a time (started on first use, and again in a forked child).
    """

    def __init__(self, run_batch: Callable[[list[T]], Sequence[R]], *,
                 max_batch: int, name: str) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._name = name
        self._pending: queue.SimpleQueue[_Entry] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pid: int | None = None

    async def submit(self, item: T) -> R:
        """The outcome of ``item`` once the batch that carries it has run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._ensure_thread()
        self._pending.put((item, future, loop))
        return await future

    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                # a forked child inherits the queue object but not the thread
                self._pending = queue.SimpleQueue()
                threading.Thread(target=self._serve, name=self._name, daemon=True).start()
                self._pid = os.getpid()

    def _serve(self) -> None:
        pending = self._pending
        while True:
            batch = [pending.get()]
            while len(batch) < self._max_batch:
                try:
                    batch.append(pending.get_nowait())
                except queue.Empty:
                    break
            self._run(batch)

    def _run(self, batch: list[_Entry]) -> None:
        failure: BaseException | None = None
        try:
            results: Sequence[object] = self._run_batch([item for item, _, _ in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{self._name}: {len(results)} results for "
                                   f"{len(batch)} items")
        except BaseException as error:  # every item of the batch fails with it
            failure, results = error, [None] * len(batch)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object]]] = {}
        for (_, future, loop), result in zip(batch, results, strict=True):
            by_loop.setdefault(loop, []).append((future, result))
        # one wake-up of each loop per batch, not one per item
        for loop, settled in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, settled, failure)
            except RuntimeError:  # that loop has closed: nobody awaits its items
                log.warning("%s: results for a closed event loop dropped", self._name)


def _settle(settled: list[tuple[asyncio.Future[Any], object]],
            failure: BaseException | None) -> None:
    for future, result in settled:
        if future.done():  # the request was cancelled (its client went away)
            continue
        if failure is not None:
            future.set_exception(failure)
        else:
            future.set_result(result)
