"""A real browser on a real server for the console's page: herald's app under uvicorn in
a thread on a free port, and Debian's chromium driven by Playwright (Playwright's own
browser download is never used; ``make test`` installs chromium, see
tests/support/services.py)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, Playwright

from tests.support.services import find_free_port
from tests.support.waiting import wait_for

#: Milliseconds a page element may take to show what a test expects (the stream's first
#: sample arrives within 1 s, the next ones every 5 s).
EXPECT_MS = 15_000


def chromium_path() -> str:
    """Debian's chromium (``make test`` installs it when missing)."""
    found = shutil.which("chromium") or shutil.which("chromium", path="/usr/bin")
    assert found, "chromium is not installed: run the tests with `make test`"
    return found


def launch_chromium(playwright: Playwright) -> Browser:
    """Headless chromium; without its sandbox as root (chromium refuses it otherwise)."""
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    return playwright.chromium.launch(executable_path=chromium_path(), args=args, headless=True)


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """``app`` under uvicorn on a free port of 127.0.0.1 for the block; yields its origin.
    Open streams are cut 2 s into the shutdown."""
    port = find_free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None,
                                           log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, name=f"web-{port}", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout=30,
                 what="uvicorn to start")
        assert server.started, "uvicorn did not start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def sign_in(page: Page, origin: str, token: str) -> None:
    """Open the console at ``origin`` and sign in with ``token`` as an operator would."""
    page.goto(f"{origin}/admin")
    page.get_by_label("Admin token").fill(token)
    page.get_by_role("button", name="Sign in").click()
