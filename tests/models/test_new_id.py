"""Primary keys: ``new_id`` hands out version-7 UUIDs (creation time first), never the
same one twice, also across a fork (worker processes fork from one parent)."""

from __future__ import annotations

import os
import time
import uuid

from models.base import new_id


def test_ids_are_distinct_version_7_uuids_in_creation_order() -> None:
    before_ms = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(20_000)]
    after_ms = time.time_ns() // 1_000_000

    assert len(set(ids)) == len(ids)
    for value in ids[:1_000]:
        parsed = uuid.UUID(value)
        assert (str(parsed), parsed.version, parsed.variant) == (value, 7, uuid.RFC_4122)
        assert before_ms <= parsed.int >> 80 <= after_ms  # the first 48 bits: the time
    # made later, sorted later (ids of one millisecond may come in any order)
    assert [value[:13] for value in ids] == sorted(value[:13] for value in ids)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    # Given a process that has drawn ids (its reserve of randomness started)
    new_id()
    reading, writing = os.pipe()

    # When it forks, and parent and child each draw more
    child = os.fork()
    if child == 0:
        os.write(writing, "".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(writing)
    _, status = os.waitpid(child, 0)
    theirs = os.read(reading, 10 * 36).decode()
    mine = "".join(new_id() for _ in range(10))

    # Then no id is the same, nor its random part (after the time and the version digit)
    assert status == 0
    assert {theirs[i + 15:i + 36] for i in range(0, 360, 36)}.isdisjoint(
        {mine[i + 15:i + 36] for i in range(0, 360, 36)})
