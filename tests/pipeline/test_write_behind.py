"""``WriteBehind``: items added from any thread are written in order, many per write, by a
thread of its own; ``flush`` waits for them; a failed write loses only its own items; a
forked child never writes its parent's items; at exit what is left is written."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from herald.write_behind import WriteBehind


class Recorder:
    """A write function that keeps each batch it was given (and can be held or fail)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail_next = False

    def __call__(self, batch: list[int]) -> None:
        self.gate.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("database away")
        self.batches.append(batch)


def test_items_are_written_in_order_many_per_write() -> None:
    recorder = Recorder()
    writer = WriteBehind(recorder, name="test-writer", max_batch=1000, linger_s=2.0)

    # items added while the writer lingers after the first go into the same write
    for start in range(0, 30, 10):
        writer.add(range(start, start + 10))
        time.sleep(0.02)
    deadline = time.monotonic() + 10
    while not recorder.batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert recorder.batches == [list(range(30))]

    # a flush cuts the lingering short
    writer.add(range(30, 40))
    assert writer.flush(timeout_s=1.0)
    assert recorder.batches == [list(range(30)), list(range(30, 40))]


def test_a_full_batch_is_written_without_lingering() -> None:
    recorder = Recorder()
    writer = WriteBehind(recorder, name="test-writer", max_batch=5, linger_s=60.0)

    writer.add(range(5))
    deadline = time.monotonic() + 5
    while not recorder.batches and time.monotonic() < deadline:
        time.sleep(0.01)

    assert recorder.batches == [[0, 1, 2, 3, 4]]


def test_a_failed_write_loses_only_its_own_items(caplog) -> None:  # type: ignore[no-untyped-def]
    recorder = Recorder()
    writer = WriteBehind(recorder, name="test-writer", max_batch=1000)
    recorder.fail_next = True

    writer.add([1, 2])
    assert writer.flush(timeout_s=5.0)  # the failed write counts as done
    writer.add([3])
    assert writer.flush(timeout_s=5.0)

    assert recorder.batches == [[3]]
    assert "test-writer: write of 2 failed: ConnectionError" in caplog.text


def test_flush_times_out_while_a_write_hangs() -> None:
    recorder = Recorder()
    recorder.gate.clear()
    writer = WriteBehind(recorder, name="test-writer", max_batch=1000)

    writer.add([1])
    assert not writer.flush(timeout_s=0.2)
    recorder.gate.set()
    assert writer.flush(timeout_s=5.0)
    assert recorder.batches == [[1]]


def test_a_forked_child_writes_its_own_items_only() -> None:
    # Given a writer whose thread is held mid-write with more items waiting
    recorder = Recorder()
    recorder.gate.clear()
    writer = WriteBehind(recorder, name="test-writer", max_batch=1000)
    writer.add([1])
    deadline = time.monotonic() + 5
    while writer._pending and time.monotonic() < deadline:  # the thread took [1]
        time.sleep(0.01)
    writer.add([2])
    reading, writing = os.pipe()

    # When the process forks and the child adds and flushes items of its own
    child = os.fork()
    if child == 0:
        recorder.gate.set()
        writer.add([3])
        flushed = writer.flush(timeout_s=5.0)
        os.write(writing, repr((flushed, recorder.batches)).encode())
        os._exit(0)
    os.close(writing)
    os.waitpid(child, 0)
    theirs = os.read(reading, 1000).decode()

    # Then the child wrote only its own item; the parent still writes its two
    assert theirs == "(True, [[3]])"
    recorder.gate.set()
    assert writer.flush(timeout_s=5.0)
    assert recorder.batches == [[1], [2]]


def test_items_left_at_exit_are_written() -> None:
    script = (
        "from herald.write_behind import WriteBehind\n"
        "writer = WriteBehind(lambda batch: print('wrote', batch, flush=True),"
        " name='exit-writer', max_batch=1000, linger_s=60.0)\n"
        "writer.add([7, 8])\n")
    finished = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=60, check=True)
    assert finished.stdout == "wrote [7, 8]\n"
