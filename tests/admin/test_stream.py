"""GET /admin/health/queues/stream over real HTTP (uvicorn on a free port, read with
httpx): the rows at once and every 5 s, live counts, a dropped client stops the stream,
and a Redis that is away is reported on the stream rather than ending it."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import uvicorn

from herald.queue import enqueue
from tests.admin.conftest import ADMIN_HEADERS
from tests.cli.test_cli import free_port
from tests.support.admin.workload import QUEUE, console_work, point_at_stopped_redis
from tests.support.waiting import wait_for

#: Seconds within which two events must have arrived (the interval is 5 s).
TWO_EVENTS_S = 11.0
#: The first event is sent at once: it must come well before the first interval ends.
FIRST_EVENT_S = 4.0


@pytest.fixture
def server(console: str) -> Iterator[str]:
    """The app under uvicorn in a thread of this process, on a free port; its origin."""
    from herald.web import create_app

    config = uvicorn.Config(create_app(), host="127.0.0.1", port=free_port(),
                            log_level="warning", lifespan="off", timeout_graceful_shutdown=2)
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    wait_for(lambda: web.started, timeout=20, what="uvicorn to start")
    yield f"http://127.0.0.1:{config.port}"
    web.should_exit = True
    thread.join(timeout=20)
    assert not thread.is_alive(), "uvicorn did not stop"


def events(response: httpx.Response) -> Iterator[tuple[str, Any]]:
    """Each Server-Sent Event of ``response``: its type (``message`` unless named) and its
    data as JSON."""
    kind, data = "message", []
    for line in response.iter_lines():
        if line.startswith("event:"):
            kind = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
        elif line == "" and data:
            yield kind, json.loads("\n".join(data))
            kind, data = "message", []


def live_streams(origin: str) -> float:
    """The live-stream gauge the app serves on /metrics."""
    text = httpx.get(f"{origin}/metrics", timeout=10).text
    found = re.search(r"^herald_admin_streams (\S+)$", text, re.MULTILINE)
    assert found, "no herald_admin_streams gauge on /metrics"
    return float(found.group(1))


def open_stream(origin: str) -> Any:
    return httpx.stream("GET", f"{origin}/admin/health/queues/stream", headers=ADMIN_HEADERS,
                        timeout=httpx.Timeout(10.0, read=TWO_EVENTS_S))


def test_the_stream_sends_the_rows_at_once_then_every_five_seconds(server: str) -> None:
    # Given a client on the stream
    started = time.monotonic()
    with open_stream(server) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        stream = events(response)
        # When the first event arrives
        kind, first = next(stream)
        first_at = time.monotonic() - started
        # Then it came at once, with the snapshot's rows
        assert kind == "message" and first_at < FIRST_EVENT_S
        snapshot = httpx.get(f"{server}/admin/health/queues", headers=ADMIN_HEADERS).json()
        assert [r["name"] for r in first["queues"]] == [r["name"] for r in snapshot["queues"]]
        assert set(first["queues"][0]) == set(snapshot["queues"][0])
        assert next(r for r in first["queues"] if r["name"] == QUEUE)["delayed"] == 0
        # When a job is added before the next event
        enqueue(console_work, {"key": "later"}, job_id="later", delay=timedelta(hours=1))
        _, second = next(stream)
        # Then the second event came within 11 s of the request, with the new count
        assert time.monotonic() - started < TWO_EVENTS_S
        assert next(r for r in second["queues"] if r["name"] == QUEUE)["delayed"] == 1
        assert second["generated_at"] > first["generated_at"]


def test_a_client_that_goes_away_is_dropped(server: str) -> None:
    # Given no stream open, then a client reading one
    baseline = live_streams(server)
    with open_stream(server) as response:
        stream = events(response)  # kept: dropping the reader would close the connection
        next(stream)
        assert live_streams(server) == baseline + 1
    # When it disconnects (the with block closed the connection)
    # Then the server ends its stream: the gauge falls back without any further event
    wait_for(lambda: live_streams(server) == baseline, timeout=5, every=0.1,
             what="the stream of the client that left to end")


def test_a_stream_asked_for_one_event_ends_after_it(server: str) -> None:
    # When a script asks the stream for one event
    with httpx.stream("GET", f"{server}/admin/health/queues/stream", params={"events": 1},
                      headers=ADMIN_HEADERS, timeout=TWO_EVENTS_S) as response:
        got = []
        for event in events(response):
            got.append(event)
            if len(got) > 1:  # a stream that went on: stop reading, the check fails below
                break
    # Then it gets the snapshot, and the stream ends there
    assert [kind for kind, _ in got] == ["message"]
    assert QUEUE in [row["name"] for row in got[0][1]["queues"]]


def test_a_redis_that_is_away_is_reported_on_the_stream(
        server: str, monkeypatch: pytest.MonkeyPatch, private_redis_url: str) -> None:
    # Given herald on a Redis of its own that has stopped
    point_at_stopped_redis(monkeypatch, private_redis_url)
    # When a client opens the stream
    with open_stream(server) as response:
        kind, body = next(events(response))
    # Then the stream answers with an error event in the API's error shape
    assert response.status_code == 200
    assert kind == "error" and body["error"]["code"] == "unavailable"
