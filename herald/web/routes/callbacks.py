"""``POST /v1/callbacks/{provider}``: provider delivery receipts
(docs/pipeline.md#callbacks).

Authenticated by each provider's signature, not by API_TOKEN (providers cannot send it).
The work is in ``actors.callbacks``; this module turns its answers into HTTP:

- 202 ``{"receipt_id", "duplicate": false}``: persisted, queued and stamped
- 200 ``{"receipt_id", "duplicate": true}``: the event was stored before
- 401 bad or missing signature, 422 a signed body herald cannot read, 404 an unknown
  provider (the mock too while no channel has it as its provider, or while API_TOKEN is
  set and MOCK_CALLBACK_SECRET is the public default), 413 a body over 64 KiB
  (:data:`SIGNED_BODY_MAX_BYTES`) — none of them stores anything
- 503 the database or the queue is unavailable: the sender retries the same event
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from actors import callbacks
from herald.settings import get_settings
from herald.web.body_limit import read_body_up_to
from herald.web.errors import RETRY_AFTER_S, api_error
from providers.base import CallbackRequest, InvalidCallback, InvalidSignature

router = APIRouter(prefix="/v1", tags=["callbacks"])


async def callback_request(provider: str, request: Request) -> CallbackRequest:
    """The callback as the provider sent it: 404 for an unknown provider, or the mock
    while it is not configured (before the body is read); 413 for a body over
    :data:`SIGNED_BODY_MAX_BYTES`."""
    adapter = callbacks.adapter_module(provider)
    if adapter is None:
        raise api_error(404, "unknown_provider",
                        f"no provider {provider!r} accepts callbacks "
                        f"(known: {', '.join(sorted(callbacks.CALLBACK_ADAPTERS))})")
    if adapter == callbacks.CALLBACK_ADAPTERS["mock"]:
        require_mock_configured()
    return CallbackRequest(url=public_url(request),
                           headers={name.lower(): value for name, value in request.headers.items()},
                           body=await read_body_up_to(request))


def require_mock_configured() -> None:
    """A 404 unless the mock provider is configured (a channel's provider or one of
    ESIM_PROVIDERS) and, with API_TOKEN set, signs with a secret of its own: anyone knows
    its default secret, so its routes exist only then."""
    settings = get_settings()
    if not settings.mock_provider_configured:
        raise api_error(404, "unknown_provider", "the mock provider is not configured "
                        "(no channel or ESIM_PROVIDERS names it)")
    if settings.mock_routes_refused:
        raise api_error(404, "unknown_provider", "the mock provider's routes are off: "
                        "API_TOKEN is set and MOCK_CALLBACK_SECRET is the public default")


def public_url(request: Request) -> str:
    """The URL the provider called: CALLBACK_BASE_URL + path and query when set (behind a
    proxy the URL herald sees is not the one the provider signed), else the request's."""
    base = get_settings().callback_base_url
    if not base:
        return str(request.url)
    query = f"?{request.url.query}" if request.url.query else ""
    return f"{base}{request.url.path}{query}"


@router.post(
    "/callbacks/{provider}", status_code=202,
    summary="A provider's delivery receipt (twilio, taqnyat, onesignal, mock)",
    responses={200: {"description": "The same event was received before"},
               202: {"description": "Persisted and queued for normalization"},
               503: {"description": "Database or queue unavailable: send the event again"}})
def post_callback(provider: str,
                  callback: Annotated[CallbackRequest, Depends(callback_request)],
                  ) -> JSONResponse:
    """Verify the provider's signature, persist the normalized receipt, queue it, stamp it."""
    try:
        event = callbacks.parse_callback(provider, callback)
    except InvalidSignature as error:
        raise api_error(401, "invalid_signature", str(error)) from None
    except InvalidCallback as error:
        raise api_error(422, "invalid_callback", str(error)) from None
    try:
        ingested = callbacks.ingest_callback(provider, event)
    except callbacks.CallbackNotQueued:
        raise api_error(503, "unavailable", "the queue is unavailable; send the event again",
                        headers={"Retry-After": str(RETRY_AFTER_S)}) from None
    body: dict[str, Any] = {"receipt_id": ingested.receipt_id,
                            "duplicate": ingested.duplicate}
    return JSONResponse(body, status_code=200 if ingested.duplicate else 202)
