"""No request, however malformed, yields a 5xx (SPEC section 9), fuzzed from the OpenAPI
schema: schemathesis generates requests for every operation, both valid and invalid
against the schema (wrong types, missing fields, unknown methods), and sends them to the
app on PostgreSQL + Redis."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode

from herald.web import create_app

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
                                max_examples=60)


@schema.parametrize()
# no deadline: a shared CI machine's pauses are not the app's; no example database on disk
@settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: Any, pipeline: None) -> None:
    response = case.call()
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} → {response.status_code}: "
        f"{response.text[:300]}")
    # every error leaves in the app's one shape
    if response.status_code >= 400:
        assert set(response.json()["error"]) >= {"code", "message"}
