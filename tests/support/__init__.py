"""Helpers for herald's test suite (kept out of ``conftest.py`` so it stays small)."""
