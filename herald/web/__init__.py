"""herald's HTTP app: ``create_app()`` for ASGI servers and tests, ``serve()`` for
``herald web``."""

from herald.web.app import create_app, serve

__all__ = ["create_app", "serve"]
