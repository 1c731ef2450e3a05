"""``/v1/accounts``: create and change the accounts notifications go to (docs/api.md,
"Accounts and events"). The work is in ``actors.orchestration``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from actors import orchestration
from actors.locales import Locale
from herald.text import SingleLine
from herald.web.auth import protected_router
from herald.web.errors import api_error, not_found

router = protected_router(["accounts"])


def _absent_when_unset(schema: dict[str, Any]) -> None:
    # the default only stands for "leave unchanged": null is not a value of these fields
    schema.pop("default", None)


def _unchanged() -> Any:
    """A PATCH field that may be left out but, given, may not be null."""
    return Field(default=None, json_schema_extra=_absent_when_unset)


#: An IANA name (null: UTC); checked against the tz database (docs/api.md#quiet-hours).
_TIMEZONE: Any = Field(default=None, max_length=64, examples=["Europe/Berlin"])
#: Daily or per weekday windows (null: never held), checked by actors.quiet_hours.
_QUIET_HOURS: Any = Field(default=None, examples=[
    {"start": "22:00", "end": "08:00"}, {"sat": [{"start": "20:00", "end": "10:00"}]}])


class AccountIn(BaseModel):
    """A new account. Accounts are keyed by id: an email or phone may appear on several."""

    model_config = ConfigDict(extra="forbid")
    email: SingleLine | None = Field(default=None, max_length=320)
    phone: SingleLine | None = Field(default=None, max_length=20)
    locale: Locale = "en"
    active: bool = True
    marketing_opt_out: bool = False
    push_subscription_id: SingleLine | None = Field(default=None, max_length=128)
    timezone: SingleLine | None = _TIMEZONE
    quiet_hours: dict[str, Any] | None = _QUIET_HOURS


class AccountPatch(BaseModel):
    """Changes to an account (only the fields given). ``email``, ``phone``,
    ``push_subscription_id``, ``timezone`` and ``quiet_hours`` may be set to null
    (removed); the others may not."""

    model_config = ConfigDict(extra="forbid")
    email: SingleLine | None = Field(default=None, max_length=320)
    phone: SingleLine | None = Field(default=None, max_length=20)
    locale: Locale = _unchanged()
    active: bool = _unchanged()
    marketing_opt_out: bool = _unchanged()
    push_subscription_id: SingleLine | None = Field(default=None, max_length=128)
    timezone: SingleLine | None = _TIMEZONE
    quiet_hours: dict[str, Any] | None = _QUIET_HOURS


def _account_view(account: Any) -> dict[str, Any]:
    return {"id": account.id, "email": account.email, "phone": account.phone,
            "locale": account.locale, "active": account.active,
            "marketing_opt_out": account.marketing_opt_out,
            "push_subscription_id": account.push_subscription_id,
            "timezone": account.timezone, "quiet_hours": account.quiet_hours,
            "created_at": account.created_at.isoformat(),
            "updated_at": account.updated_at.isoformat()}


@router.post("/accounts", status_code=201, summary="Create an account")
def create_account(body: AccountIn) -> dict[str, Any]:
    """Create an account (email, E.164 phone, locale, active, marketing opt-out, time
    zone, quiet hours)."""
    try:
        account = orchestration.create_account(**body.model_dump())
    except ValueError as error:
        raise api_error(422, "invalid_account", str(error)) from None
    return _account_view(account)


@router.patch("/accounts/{account_id}", summary="Change an account")
def update_account(account_id: str, body: AccountPatch) -> dict[str, Any]:
    """Change the given fields of an account."""
    try:
        account = orchestration.update_account(account_id, **body.model_dump(exclude_unset=True))
    except orchestration.AccountNotFound:
        raise not_found("account", account_id) from None
    except ValueError as error:
        raise api_error(422, "invalid_account", str(error)) from None
    return _account_view(account)
