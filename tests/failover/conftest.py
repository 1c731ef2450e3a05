"""Fixtures of the failover tests: the notification pipeline's (reused from its package,
not copied), over servers of each test's own that the test restarts or kills."""

from __future__ import annotations

from tests.pipeline.conftest import pipeline  # noqa: F401  (the notification pipeline)
