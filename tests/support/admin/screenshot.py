"""Make docs/console.png: the signed-in console at 1280 px over a little real traffic.

Run it against throw-away servers (it migrates the database and writes to Redis)::

    .venv/bin/python -m tests.support.services run -- \
        .venv/bin/python -m tests.support.admin.screenshot

Traffic: welcome events sent by the mock providers, a few more left waiting, and one
email the mock refuses for good (a failed job in ``notification-email``, the queue the
screenshot opens).
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

from tests.support.admin.browser import EXPECT_MS, launch_chromium, serving, sign_in
from tests.support.waiting import wait_for

DOCS = Path(__file__).resolve().parents[3] / "docs"
TOKEN = uuid.uuid4().hex


def _configure() -> None:
    """herald over the servers the environment names, with a queue prefix of its own."""
    missing = [var for var in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(var)]
    if missing:
        sys.exit(f"set {', '.join(missing)}: run it under python -m tests.support.services run --")
    os.environ.update({"BROKER": "redis", "QUEUE_PREFIX": f"shot{uuid.uuid4().hex[:8]}",
                       "ADMIN_TOKEN": TOKEN, "API_TOKEN": "", "EMAIL_PROVIDER": "mock",
                       "SMS_PROVIDER": "mock", "PUSH_PROVIDER": "mock", "LOG_LEVEL": "ERROR"})
    from herald import db

    db.migrate()


def _traffic(origin: str) -> None:
    """Welcome events sent through the pipeline, more left waiting, one email refused."""
    from herald.queue import queue, running_worker
    from providers.mock import MockProvider

    MockProvider.script("user3@example.com", "terminal")

    with httpx.Client(base_url=origin, timeout=10) as api:
        def welcome(index: int) -> None:
            account = api.post("/v1/accounts", json={"email": f"user{index}@example.com",
                                                     "phone": f"+96650123{index:04d}"})
            account.raise_for_status()
            api.post("/v1/events", json={"type": "account.welcome", "occurrence": "signup",
                                         "account_id": account.json()["id"]}).raise_for_status()

        for index in range(12):
            welcome(index)
        with running_worker(["notification-email", "notification-sms"]):
            wait_for(lambda: queue("notification-email").counts()["failed"] == 1
                     and queue("notification-email").counts()["completed"] == 11
                     and queue("notification-sms").counts()["completed"] == 12, timeout=90,
                     what="the first deliveries to be sent")
        for index in range(12, 20):
            welcome(index)


def main(argv: list[str] | None = None) -> None:
    """Write the screenshot (default docs/console.png, 1280 px wide)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", type=Path, default=DOCS / "console.png")
    parser.add_argument("--width", type=int, default=1280, help="viewport width in px")
    args = parser.parse_args(argv)
    _configure()
    from herald.web import create_app

    with serving(create_app()) as origin, sync_playwright() as playwright:
        _traffic(origin)
        browser = launch_chromium(playwright)
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        sign_in(page, origin, TOKEN)
        row = page.locator('#queues tr[data-queue="notification-email"]')
        expect(row.locator('[data-field="failed"]')).to_have_text("1", timeout=EXPECT_MS)
        row.locator("th button").click()
        expect(page.locator("#jobs tbody button")).to_have_count(1, timeout=EXPECT_MS)
        page.screenshot(path=str(args.output), full_page=True)
        browser.close()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
