"""``/v1/activations``: start an operator activation and read its steps (docs/api.md,
"Payments and activations"). The work is in ``actors.activation``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from actors import activation as activations
from herald.text import SingleLine
from herald.web.auth import protected_router
from herald.web.errors import api_error, found
from models.activations import activation_view

router = protected_router(["activations"])


class ActivationIn(BaseModel):
    """An activation: whose, with which operator, for which number."""

    model_config = ConfigDict(extra="forbid")
    account_id: SingleLine = Field(min_length=1, max_length=36)
    operator_slug: SingleLine = Field(min_length=1, max_length=32)
    #: E.164, like +966501234567.
    msisdn: SingleLine = Field(min_length=1, max_length=20)


@router.post("/activations", status_code=201, summary="Start an activation")
def create_activation(body: ActivationIn) -> dict[str, Any]:
    """The activation, ``pending`` at ``initiate`` until its payment settles."""
    try:
        activation = activations.create_activation(**body.model_dump())
    except activations.ActivationNotFound as error:
        raise api_error(404, "account_not_found", str(error)) from None
    except activations.InvalidActivation as error:
        raise api_error(422, "invalid_activation", str(error)) from None
    return activation_view(activation, [])


@router.get("/activations/{activation_id}", summary="An activation and its steps")
def get_activation(activation_id: str) -> dict[str, Any]:
    """Step, status and the history of its step attempts."""
    activation, records = found(activations.get_activation(activation_id), "activation",
                                activation_id)
    return activation_view(activation, records)
