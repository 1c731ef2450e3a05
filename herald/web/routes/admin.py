"""The operator console's API: queue health (snapshot, live stream, throughput history),
jobs by state with drill-down, bulk actions and the audit log; all behind ADMIN_TOKEN."""

from __future__ import annotations

from herald.web.auth import admin_router

router = admin_router(tags=["admin"])
