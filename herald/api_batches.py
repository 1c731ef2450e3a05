"""The ``/v1/batches`` HTTP API (SPEC sections 7 and 10); the work is in ``actors.batches``."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from herald.api_v1 import require_api_token

router = APIRouter(prefix="/v1", tags=["batches"], dependencies=[Depends(require_api_token)])
