"""The queue library's public surface is one import line: every name it lists is there."""

from __future__ import annotations

import re
from pathlib import Path

import herald.queue


def test_every_public_name_is_importable_from_herald_queue() -> None:
    for name in herald.queue.__all__:
        assert getattr(herald.queue, name) is not None, name


def test_docs_queue_md_lists_every_public_name_and_no_other() -> None:
    # Given the table of the public surface in docs/queue.md
    text = (Path(__file__).parents[2] / "docs" / "queue.md").read_text()
    table = text.partition("## The public surface")[2].partition("\n## ")[0]
    # Then it names exactly what herald.queue exports
    rows = [line.split("|")[2] for line in table.splitlines() if line.startswith("| ")]
    documented = {name for row in rows for name in re.findall(r"`(\w+)`", row)}
    assert documented == set(herald.queue.__all__)
