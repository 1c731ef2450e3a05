"""``POST /v1/callbacks/{provider}``: provider delivery receipts (SPEC sections 7 and 10).

Authenticated by each provider's signature, not by API_TOKEN (providers cannot send it).
The work is in ``actors.callbacks``.
"""

from __future__ import annotations

from fastapi import APIRouter

router = APIRouter(prefix="/v1", tags=["callbacks"])
