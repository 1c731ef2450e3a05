"""Benchmarks: scripts anyone can run; every run's results are appended to results.md."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).parent / "results.md"


def publish(lines: list[str]) -> None:
    """Print a run's results and append them to ``bench/results.md``: every run stays,
    since the machine's speed moves a lot between runs."""
    text = "\n".join(lines) + "\n"
    print(text)
    with RESULTS.open("a") as out:
        out.write(text)
