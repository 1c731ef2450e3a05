"""``/v1/accounts/{id}/preferences``: read, replace or merge-patch the channels,
categories and types an account gets notifications on (docs/api.md#preferences). The
document's rules are :mod:`actors.preferences`."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body
from fastapi.exceptions import RequestValidationError

from actors.preferences import (
    InvalidPreferences,
    PreferenceDocument,
    read_preferences,
    write_preferences,
)
from herald.web.auth import protected_router
from herald.web.errors import not_found

router = protected_router(["accounts"])

#: What a merge patch may hold: any part of the document, ``null`` removing a setting.
_MERGE_PATCH = Body(
    media_type="application/merge-patch+json",
    description="A JSON merge patch (RFC 7396) of the document: objects merge key by key, "
                "null removes a setting. `application/json` is taken too.",
    openapi_examples={"SMS off, promotions by email on": {"value": {
        "channels": {"sms": False}, "types": {"promo.offer": {"email": True}}}}})


def _stored(account_id: str, document: dict[str, Any] | None) -> dict[str, Any]:
    if document is None:
        raise not_found("account", account_id)
    return document


def _write(account_id: str, raw: Any, *, merge: bool) -> dict[str, Any]:
    try:
        return _stored(account_id, write_preferences(account_id, raw, merge=merge))
    except InvalidPreferences as error:
        # the API's one 422 shape, each problem located in the body
        raise RequestValidationError([problem | {"loc": ("body", *problem["loc"])}
                                      for problem in error.problems]) from None


@router.get("/accounts/{account_id}/preferences", summary="Read an account's preferences",
            response_model=PreferenceDocument)
def get_preferences(account_id: str) -> dict[str, Any]:
    """The account's preference document: `channels`, `categories` and `types`, each
    present (`{}` when empty). A setting left out is on."""
    return _stored(account_id, read_preferences(account_id))


@router.put("/accounts/{account_id}/preferences", summary="Replace an account's preferences",
            response_model=PreferenceDocument)
def put_preferences(account_id: str, body: PreferenceDocument) -> dict[str, Any]:
    """Replace the whole document. 422 naming the type and channel when it turns off a
    channel the type requires (`types.esim.ready.email: false`), or naming an unknown
    type; nothing changes then."""
    return _write(account_id, body.model_dump(), merge=False)


@router.patch("/accounts/{account_id}/preferences", summary="Change an account's preferences",
              response_model=PreferenceDocument)
def patch_preferences(account_id: str,
                      body: Annotated[dict[str, Any], _MERGE_PATCH]) -> dict[str, Any]:
    """Merge the given settings into the document (a JSON merge patch, RFC 7396): nested
    objects merge, `null` removes a setting. The result must be a valid document (as for
    `PUT`), or nothing changes."""
    return _write(account_id, body, merge=True)
