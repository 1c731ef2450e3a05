"""``GET /admin``: the operator console's page (no data of its own: it signs in with
ADMIN_TOKEN and reads the ``/admin`` API).

The page is one HTML document with its script and style inline (no build step, no CDN:
it works offline). A browser navigation cannot send a bearer header, so the page itself
is served without one; every piece of data it shows comes from the token-checked
``/admin`` API, called with the token the operator types in (kept in sessionStorage).
While ADMIN_TOKEN is unset the page is a 404 like the rest of ``/admin``.

Each response carries a strict Content-Security-Policy: nothing but this origin, and
inline script and style only with the response's own nonce (see docs/console.md).
"""

from __future__ import annotations

import secrets
from functools import cache

import jinja2
from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from actors.render import TEMPLATES_DIR
from herald.web.auth import require_console_on

router = APIRouter(tags=["admin"])

#: The page's template, relative to the ``templates/`` directory.
PAGE_TEMPLATE = "admin/console.html"


@cache
def _environment() -> jinja2.Environment:
    """Jinja2 over ``templates/`` with HTML autoescaping (the page inserts no data, but the
    nonce goes through it all the same)."""
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              auto_reload=False)


def content_security_policy(nonce: str) -> str:
    """The page's policy: same origin only, inline script and style only with ``nonce``,
    no frames, no forms posted anywhere, no plugins."""
    return "; ".join([
        "default-src 'self'",
        f"script-src 'nonce-{nonce}'",
        f"style-src 'nonce-{nonce}'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ])


@router.get("/admin", response_class=HTMLResponse, summary="The operator console (HTML)",
            responses={404: {"description": "ADMIN_TOKEN is unset: the console is off"}})
def console_page() -> HTMLResponse:
    """The console's HTML page; 404 while ADMIN_TOKEN is unset. It holds no data: it asks
    for the token and reads everything from the ``/admin`` API."""
    require_console_on()
    nonce = secrets.token_urlsafe(18)
    html = _environment().get_template(PAGE_TEMPLATE).render(nonce=nonce)
    return HTMLResponse(html, headers={
        "Content-Security-Policy": content_security_policy(nonce),
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    })
