"""The API's own documentation: ``/openapi.json``, ``/docs`` (Swagger UI) and ``/redoc``.

They are behind ``/v1``'s door (:func:`herald.web.auth.check_bearer_token`): the API token
while it is set, else protected mode's loopback and ``Host`` checks (or HERALD_OPEN_API):
the schema maps every route an attacker could try. ``DOCS_PUBLIC=1`` opens them (docs/api.md,
"Routes"). FastAPI's stock routes cannot be guarded, so the app is built without them and
these take their place.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from herald.settings import get_settings
from herald.web.auth import check_bearer_token

#: Where the schema is served.
OPENAPI_URL = "/openapi.json"


def check_docs_access(request: Request) -> None:
    """Let the request read the docs, or raise as ``/v1``'s door does (401, or 403
    ``api_token_required`` / ``host_not_allowed`` in protected mode); DOCS_PUBLIC lets
    every request read them."""
    if not get_settings().docs_public:
        check_bearer_token(request)


def install_docs(app: FastAPI) -> None:
    """Serve ``app``'s schema and its two documentation pages, each behind
    :func:`check_docs_access`."""

    @app.get(OPENAPI_URL, include_in_schema=False)
    def openapi(request: Request) -> JSONResponse:
        check_docs_access(request)
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        check_docs_access(request)
        return get_swagger_ui_html(openapi_url=OPENAPI_URL, title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        check_docs_access(request)
        return get_redoc_html(openapi_url=OPENAPI_URL, title=f"{app.title} - ReDoc")
