"""Fixtures of the preference tests: the notification pipeline's (PostgreSQL + Redis, the
mock providers, empty tables), shared with tests/pipeline."""

from __future__ import annotations

from tests.pipeline.conftest import pipeline

__all__ = ["pipeline"]
