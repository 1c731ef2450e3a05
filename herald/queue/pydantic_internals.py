"""Every place the queue library relies on pydantic's internals, in one module.

Every job added is validated against its actor's payload model and stored as JSON, and a
bulk add does that thousands of times a request. ``model_validate`` and
``model_dump_json`` with their default arguments are pydantic-core's validator and
serializer behind Python layers that cost as much again, so the library calls the two
directly, through a model class's ``__pydantic_validator__`` and
``__pydantic_serializer__``: attributes pydantic sets on every model but does not promise
to keep. ``tests/queue/test_queue_pydantic_internals.py`` checks both against
``model_validate`` and ``model_dump_json`` of the installed pydantic, so an upgrade
outside :data:`SUPPORTED_PYDANTIC` fails there, loudly, in one place.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

#: The pydantic versions whose internals this module was checked against (the same range
#: as the package's dependency).
SUPPORTED_PYDANTIC = (">=2.14", "<2.15")


def validate(model_type: type[M], payload: Any) -> M:
    """``model_type.model_validate(payload)``: the model instance, or pydantic's
    ValidationError when the payload does not fit."""
    # pydantic-core types its validator's result as Any: it is an instance of model_type
    return cast(M, model_type.__pydantic_validator__.validate_python(payload))


def dump_json(model: BaseModel) -> str:
    """``model.model_dump_json()``: the model as JSON text."""
    return model.__pydantic_serializer__.to_json(model).decode()
