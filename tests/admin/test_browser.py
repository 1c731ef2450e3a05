"""The console's page (``GET /admin``) in a real headless chromium over a real server:
signed out it shows nothing but the sign-in prompt; signed in it lists every registry
queue, follows the live stream, opens a failed job's stack trace, retries it behind a
confirmation, and finds a delivery's timeline by its id."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import (
    Browser,
    Locator,
    Page,
    Playwright,
    Request,
    expect,
    sync_playwright,
)
from pydantic import BaseModel

from herald import settings
from herald.queue import (
    JobState,
    QueueSpec,
    Registry,
    current_app,
    enqueue,
    enqueue_many,
    queue,
    running_worker,
)
from tests.admin.conftest import ADMIN_TOKEN
from tests.support.admin.browser import EXPECT_MS, launch_chromium, serving, sign_in
from tests.support.waiting import wait_for

TEMPLATES = Path(__file__).resolve().parents[2] / "templates" / "admin"
#: A queue of this test's own: a job fails when its payload says so.
QUEUE = "t-console-page"
#: This test's own declarations (the App of each test reads them beside herald's).
registry = Registry()
registry.declare(QueueSpec(name=QUEUE, concurrency=1, attempts=1))


class PageJob(BaseModel):
    """What a job of :data:`QUEUE` does: fail, or not."""

    key: str
    fail: bool = False


@registry.actor(queue=QUEUE, payload=PageJob)
def console_page_job(job: PageJob) -> None:
    """Fails with a recognisable message when the job says so."""
    if job.fail:
        raise RuntimeError(f"console page test failure {job.key}")


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """One chromium for the module; each test gets a fresh page (no shared storage)."""
    chromium = launch_chromium(playwright)
    yield chromium
    chromium.close()


@pytest.fixture
def origin(console: str) -> Iterator[str]:
    """herald's app served for real (the stream needs a real HTTP connection)."""
    from herald.web import create_app

    current_app().include(registry)
    with serving(create_app()) as served:
        yield served


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    yield opened
    context.close()


def queue_cell(page: Page, name: str, field: str) -> Locator:
    return page.locator(f'#queues tr[data-queue="{name}"] [data-field="{field}"]')


def api_calls(page: Page) -> list[Request]:
    """Every request the page makes to the ``/admin`` API from now on (the page itself,
    ``/admin``, left out)."""
    seen: list[Request] = []
    page.on("request", lambda request: seen.append(request)
            if re.search(r"/admin/.", request.url) else None)
    return seen


# -- the page as the server sends it ---------------------------------------------------------
def test_the_page_is_a_404_while_admin_token_is_unset(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the console turned off
    monkeypatch.setenv("ADMIN_TOKEN", "")
    settings.reset_settings()
    # When the page is asked for; Then it is not there, like the rest of /admin
    response = client.get("/admin")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "<html" not in response.text


def test_the_page_carries_a_strict_policy_and_loads_nothing_from_elsewhere(
        client: TestClient) -> None:
    # When the page is fetched twice
    first, second = client.get("/admin"), client.get("/admin")
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/html")
    # Then its policy allows this origin only, and inline code only with its own nonce
    policy = first.headers["content-security-policy"]
    assert "default-src 'self'" in policy and "unsafe-inline" not in policy
    nonce = re.search(r"script-src 'nonce-([^']+)'", policy).group(1)
    assert f"style-src 'nonce-{nonce}'" in policy
    assert nonce not in second.headers["content-security-policy"]  # one per response
    tags = re.findall(r"<(?:script|style)\b[^>]*>", first.text)
    assert tags and all(f'nonce="{nonce}"' in tag for tag in tags)
    # And nothing is loaded from another origin (no CDN: it works offline)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", first.text)
    assert "@import" not in first.text and "url(" not in first.text
    # And the script and style are the files, as they are (the template did not alter them)
    for name in ("console.js", "console.css"):
        assert (TEMPLATES / name).read_text() in first.text


# -- in a browser ------------------------------------------------------------------------------
def test_without_the_token_the_page_shows_nothing_but_the_sign_in_prompt(
        origin: str, page: Page) -> None:
    calls = api_calls(page)
    # Given the page opened without a token
    page.goto(f"{origin}/admin")
    # Then the sign-in prompt shows, and no queue name is anywhere in the DOM
    expect(page.get_by_label("Admin token")).to_be_visible()
    expect(page.locator("#console")).to_be_hidden()

    def no_queue_names() -> None:
        html = page.content()
        assert [spec.name for spec in current_app().specs() if spec.name in html] == []

    no_queue_names()
    # When a wrong token is tried
    sign_in(page, origin, "not-the-token")
    # Then it is refused, and the page still shows nothing but the prompt
    expect(page.get_by_role("alert")).to_have_text("That token was refused.")
    expect(page.locator("#console")).to_be_hidden()
    no_queue_names()
    # And no API call the page made succeeded: each one was refused
    assert calls and all(call.response().status == 401 for call in calls)
    # And the API itself answers the page's origin nothing without the token
    status = page.evaluate("fetch('/admin/health/queues').then((r) => r.status)")
    assert status == 401


def test_signed_in_it_lists_every_registry_queue_and_the_stream_updates_counts_and_badges(
        origin: str, page: Page) -> None:
    # Given the operator signed in
    sign_in(page, origin, ADMIN_TOKEN)
    # Then every queue of the registry has its row, in the registry's order
    names = [spec.name for spec in current_app().specs()]
    expect(page.locator("#queues tbody tr")).to_have_count(len(names), timeout=EXPECT_MS)
    rows = page.locator("#queues tbody tr")
    assert [rows.nth(i).get_attribute("data-queue") for i in range(len(names))] == names
    expect(queue_cell(page, QUEUE, "waiting")).to_have_text("0")
    expect(page.locator("#live")).to_contain_text("live", timeout=EXPECT_MS)
    # And the token is kept for the tab, never in the page's URL
    assert page.evaluate("sessionStorage.getItem('herald.adminToken')") == ADMIN_TOKEN
    assert ADMIN_TOKEN not in page.url

    # When jobs arrive after the page loaded (no worker runs the queue)
    page.evaluate("window.loadedOnce = true")
    calls = api_calls(page)
    enqueue_many(console_page_job, [{"key": str(key)} for key in range(3)])  # one round trip
    # Then the waiting count follows, without a reload and without polling: the stream did it
    expect(queue_cell(page, QUEUE, "waiting")).to_have_text("3", timeout=EXPECT_MS)
    assert page.evaluate("window.loadedOnce") is True
    assert [c.url for c in calls if c.url.endswith("/admin/health/queues")] == []
    # And the backlog grew by 3 between two samples, more than the queue's concurrency (1)
    # drains: red; the next sample shows no growth, and the badge is back to ok
    expect(queue_cell(page, QUEUE, "health")).to_have_text("backlog growing")
    expect(queue_cell(page, QUEUE, "health")).to_have_text("ok", timeout=EXPECT_MS)
    expect(queue_cell(page, QUEUE, "waiting")).to_have_text("3")


def test_a_failed_jobs_stack_trace_opens_and_retry_moves_it_out_of_failed(
        origin: str, page: Page) -> None:
    # Given a job that failed for real
    enqueue(console_page_job, {"key": "doomed", "fail": True}, job_id="doomed")
    with running_worker([QUEUE]):
        wait_for(lambda: (job := queue(QUEUE).get("doomed")) and job.state == JobState.FAILED,
                 what="the job to fail")
    sign_in(page, origin, ADMIN_TOKEN)
    expect(queue_cell(page, QUEUE, "failed")).to_have_text("1", timeout=EXPECT_MS)
    expect(queue_cell(page, QUEUE, "health")).to_have_text("recent failures")

    # When the operator opens the queue
    page.locator(f'#queues tr[data-queue="{QUEUE}"] th button').click()
    # Then its chart of the last hour counts the failure
    expect(page.locator("#chart-box svg")).to_have_attribute(
        "aria-label", "Last hour: 0 completed, 1 failed")
    # And the failed job
    page.locator("#jobs").get_by_role("button", name="doomed").click()
    # Then its full stack trace shows, with the exception and where it was raised
    stack = page.locator("#job-stack")
    expect(stack).to_be_visible()
    expect(stack).to_contain_text("Traceback")
    expect(stack).to_contain_text("RuntimeError: console page test failure doomed")
    expect(stack).to_contain_text("console_page_job")
    expect(page.locator("#job-payload")).to_contain_text('"fail": true')

    # When retry is asked for and the confirmation is dismissed with Escape
    dialog = page.locator("#job-dialog")
    dialog.get_by_role("button", name="Retry job").click()
    confirm = page.locator("#confirm")
    expect(confirm).to_be_visible()
    page.keyboard.press("Escape")
    expect(confirm).to_be_hidden()
    # And asked again and confirmed from the keyboard
    dialog.get_by_role("button", name="Retry job").click()
    page.locator("#confirm-ok").focus()
    page.keyboard.press("Enter")

    # Then the job left failed (no worker runs the queue: it waits), in the page and the ledger
    expect(dialog).to_be_hidden(timeout=EXPECT_MS)
    expect(page.locator("#jobs tbody")).to_contain_text("No failed jobs", timeout=EXPECT_MS)
    expect(queue_cell(page, QUEUE, "failed")).to_have_text("0", timeout=EXPECT_MS)
    assert queue(QUEUE).get("doomed").state == JobState.WAITING
    # And the audit log holds that one retry only: the dismissed one did nothing
    audit = page.locator("#audit tbody tr")
    expect(audit).to_have_count(1, timeout=EXPECT_MS)
    expect(audit).to_contain_text("job.retry")
    expect(audit).to_contain_text("doomed")


def test_search_by_a_delivery_id_finds_its_timeline(origin: str, page: Page) -> None:
    # Given an email delivered through the pipeline by the mock provider
    with httpx.Client(base_url=origin, timeout=10) as api:
        created = api.post("/v1/accounts", json={"email": "noura@example.com", "locale": "en"})
        assert created.status_code == 201, created.text
        event = api.post("/v1/events", json={"type": "account.welcome", "occurrence": "signup",
                                             "account_id": created.json()["id"],
                                             "channels": ["email"]})
        assert event.status_code == 202, event.text
        (delivery,) = event.json()["deliveries"]
        with running_worker(["notification-email"]):
            sent = wait_for(lambda: (body := api.get(f"/v1/deliveries/{delivery['id']}").json())
                            ["outcome"] == "sent" and body, what="the email to be sent")
    # When the operator searches for the delivery's id
    sign_in(page, origin, ADMIN_TOKEN)
    page.get_by_role("searchbox").fill(delivery["id"])
    page.get_by_role("searchbox").press("Enter")
    # Then the delivery is found with its job and its timeline, which names the provider's
    # message id
    hit = page.locator(f'#search-list li[data-kind="delivery"][data-id="{delivery["id"]}"]')
    expect(hit).to_be_visible(timeout=EXPECT_MS)
    expect(hit.locator('ol.timeline li[data-event="created"]')).to_be_visible()
    expect(hit.locator('ol.timeline li[data-event="sent"]')).to_contain_text(
        sent["provider_message_id"])
    expect(hit).to_contain_text(f"notification-email / {delivery['id']}")
