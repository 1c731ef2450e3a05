"""The queue library's public surface is one import line: every name it lists is there."""

from __future__ import annotations

import herald.queue


def test_every_public_name_is_importable_from_herald_queue() -> None:
    for name in herald.queue.__all__:
        assert getattr(herald.queue, name) is not None, name
