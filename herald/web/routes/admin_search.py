"""``GET /admin/search``: a job by id in any queue, a domain row by id or address, each
linked to its jobs and its timeline; behind ADMIN_TOKEN."""

from __future__ import annotations

from herald.web.auth import admin_router

router = admin_router(tags=["admin"])
