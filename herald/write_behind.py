"""Write-behind: writes nobody waits for, done in a thread of their own, many at once.

A caller adds items and goes on; one thread per process hands them to the write
function, all the items added while the previous write ran in one call (up to
``max_batch``). For writes whose loss a caller can afford because something else repairs
it (the handoff stamp, which the handoff sweep writes again: docs/pipeline.md#handoff),
this takes a round trip off the caller's path and turns many small writes into one.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("herald.write_behind")


class WriteBehind(Generic[T]):
    """Runs ``write`` over the items :meth:`add` was given, in order, in a thread of its
    own (started on first use, and again in a forked child, which never writes what its
    parent added). After the first item of a batch it waits up to ``linger_s`` for more,
    unless ``max_batch`` are there or :meth:`flush` is waiting.

    A write that raises is logged (by its exception's type and the item count) and its
    items are dropped; the items added later are still written. At interpreter exit the
    items not written yet are, for up to ``exit_timeout_s``.
    """

    def __init__(self, write: Callable[[list[T]], None], *, name: str, max_batch: int,
                 linger_s: float = 0.0, exit_timeout_s: float = 5.0) -> None:
        self._write = write
        self._name = name
        self._max_batch = max_batch
        self._linger_s = linger_s
        self._exit_timeout_s = exit_timeout_s
        self._fresh()
        # a forked child must not inherit a lock held by a thread it does not have
        os.register_at_fork(after_in_child=functools.partial(
            _call, weakref.WeakMethod(self._fresh)))
        atexit.register(_call, weakref.WeakMethod(self._flush_at_exit))

    def _fresh(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._pending: list[T] = []
        self._added = self._done = 0
        self._flushing = 0  # callers waiting in flush(): no lingering for them
        self._thread: threading.Thread | None = None

    def add(self, items: Iterable[T]) -> None:
        """Queue ``items`` for writing; returns at once."""
        with self._changed:
            before = len(self._pending)
            self._pending.extend(items)
            self._added += len(self._pending) - before
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name,
                                                daemon=True)
                self._thread.start()
            # the writer waits for a first item, then for a full batch: wake it for those
            # only, not for every item in between
            if before == 0 or len(self._pending) >= self._max_batch:
                self._changed.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every item added before this call is written (or dropped by a write
        that failed); False when ``timeout_s`` ran out first."""
        with self._changed:
            target = self._added
            self._flushing += 1
            self._changed.notify_all()
            try:
                return self._changed.wait_for(lambda: self._done >= target, timeout_s)
            finally:
                self._flushing -= 1

    def _flush_at_exit(self) -> None:
        if not self.flush(self._exit_timeout_s):
            log.warning("%s: items not written at exit", self._name)

    def _serve(self) -> None:
        changed = self._changed
        while True:
            with changed:
                changed.wait_for(lambda: self._pending)
                # linger for more: one write for what arrives meanwhile
                changed.wait_for(lambda: len(self._pending) >= self._max_batch
                                 or self._flushing > 0, self._linger_s)
                batch = self._pending[:self._max_batch]
                del self._pending[:self._max_batch]
            try:
                self._write(batch)
            except Exception as error:  # the caller's repair covers them (module doc)
                log.warning("%s: write of %d failed: %s", self._name, len(batch),
                            type(error).__name__)
            with changed:
                self._done += len(batch)
                changed.notify_all()


def _call(method: weakref.WeakMethod[Callable[[], None]]) -> None:
    """Call a method held weakly (its object may be gone)."""
    bound = method()
    if bound is not None:
        bound()
