"""Migration scripts, applied in ``down_revision`` order (ids are zero-padded counters)."""
