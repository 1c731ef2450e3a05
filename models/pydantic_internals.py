"""Every place herald relies on pydantic's internals (as SQLModel's table models use them),
in one module.

A table model instance is a pydantic model whose fields SQLAlchemy instruments. Both keep
a field's value in the instance's ``__dict__``: pydantic stores validated fields there,
SQLAlchemy stores each loaded attribute there (an expired one is absent) and its
instrumented attributes read it from there before they look at the instance's ORM state.
The hot paths of many rows use that directly, past the per-field machinery of both
(bench/README.md, "The HTTP front door", measures what it is worth): reading the values
(``models.base.FieldReader``), building a read-only row as pydantic's ``model_construct``
would (``models.base.snapshot``), and writing a value of a row no session tracks (an
in-app delivery's gate, ``models.notifications.suppress_gated``).

None of this is pydantic's, SQLModel's or SQLAlchemy's public API.
``tests/models/test_pydantic_internals.py`` checks each use against the installed versions,
so an upgrade outside :data:`SUPPORTED_PYDANTIC`, :data:`SUPPORTED_SQLMODEL` or
:data:`SUPPORTED_SQLALCHEMY` fails there, loudly, in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from sqlmodel import SQLModel

M = TypeVar("M", bound=SQLModel)

#: The pydantic versions whose internals this module was checked against (the same range
#: as the package's dependency).
SUPPORTED_PYDANTIC = (">=2.14", "<2.15")
#: The SQLModel versions likewise. SQLModel's versions are all 0.0.x, its API not declared
#: stable: any 0.0.x release may change what ``construct`` skips, so the range stops at
#: the next one checked, 0.1.
SUPPORTED_SQLMODEL = (">=0.0.50", "<0.1")

#: The SQLAlchemy versions likewise: its instrumented attributes read a value present in
#: the instance's ``__dict__`` before its ORM state (which ``construct`` leaves out).
SUPPORTED_SQLALCHEMY = (">=2.1", "<2.2")

#: What pydantic's BaseModel keeps on an instance (its ``__slots__``): ``construct`` sets
#: every one of them; a pydantic that adds one fails the fence's test.
INSTANCE_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__",
                  "__pydantic_private__")


def field_values(instance: SQLModel) -> dict[str, Any]:
    """The field values ``instance`` holds, by field name: those given, defaulted or
    loaded from the database; an attribute a commit expired is absent (read it through the
    ORM). The mapping is the instance's own: never write to it (:func:`set_field_values`).
    """
    return instance.__dict__


def construct(model: type[M], values: dict[str, Any], given: set[str]) -> M:
    """An instance of ``model`` holding ``values`` (every field, defaults included, taken
    as they are: no validation), ``given`` its fields set, as ``model.model_construct``
    builds it less its per-field alias look-ups.

    SQLModel's ``__new__`` only sets pydantic's three private attributes, set here too;
    SQLAlchemy's ``__init__`` is skipped, so the instance has no ORM state: it reads like
    any row (its attributes read ``values``) and must never be added to a session.
    ``values`` becomes the instance's own mapping.
    """
    instance = object.__new__(model)
    object.__setattr__(instance, "__dict__", values)
    object.__setattr__(instance, "__pydantic_fields_set__", given)
    object.__setattr__(instance, "__pydantic_extra__", None)
    object.__setattr__(instance, "__pydantic_private__", None)
    return instance


def set_field_values(instance: SQLModel, values: Mapping[str, Any]) -> None:
    """Write ``values`` into ``instance``'s fields, unvalidated and unseen by SQLAlchemy's
    change tracking: for rows already written by the caller's own statement, whose values
    it brings up to date (never for a row a session will flush)."""
    instance.__dict__.update(values)
