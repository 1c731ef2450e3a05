"""``GET /admin``: the operator console's page (no data of its own: it signs in with
ADMIN_TOKEN and reads the ``/admin`` API)."""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(tags=["admin"])
