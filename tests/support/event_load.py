"""A steady load of events through herald's real HTTP API, for the failover tests: the
app under uvicorn in a thread of the test process on a free port, a client thread that
posts one event every ``every`` seconds, counting each answer by status and keeping the
notifications the API accepted, a watch on progress, the worker processes and what the
deliveries ended as."""

from __future__ import annotations

import collections
import itertools
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from sqlalchemy.exc import OperationalError
from sqlmodel import select

from herald import db
from models.notifications import Delivery
from providers.mock import MockProvider
from tests.support.processes import spawn_herald
from tests.support.services import find_free_port
from tests.support.waiting import wait_for

#: Seconds the client waits for one answer (longer than any bound herald puts on a
#: request that meets a dead dependency).
REQUEST_TIMEOUT_S = 15.0


@contextmanager
def serving_app(**options: Any) -> Iterator[str]:
    """herald's app under uvicorn in a thread of this process on a free port, with these
    ``uvicorn.Config`` options besides; yields its base URL, stops it afterwards."""
    from herald.web import create_app

    config = uvicorn.Config(create_app(), host="127.0.0.1", port=find_free_port(),
                            log_level="warning", lifespan="off", timeout_graceful_shutdown=2,
                            **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True, name="uvicorn")
    thread.start()
    wait_for(lambda: server.started, timeout=20, what="uvicorn to start")
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def create_accounts(base: str, count: int, tag: str) -> list[str]:
    """``count`` accounts with an email address and a phone number; their ids."""
    ids = []
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S) as client:
        for n in range(count):
            response = client.post("/v1/accounts", json={
                "email": f"{tag}{n}@example.com", "phone": f"+96654{n:07d}"})
            assert response.status_code == 201, response.text
            ids.append(str(response.json()["id"]))
    return ids


class EventLoad:
    """Posts an ``account.welcome`` event every ``every`` seconds on a thread of its own,
    on email and SMS in turn, until :meth:`stop`. ``statuses`` counts the answers (a
    transport error counts as ``"no answer"``); ``accepted`` holds the notification ids
    answered 202, with the times they were accepted in ``accepted_at``."""

    def __init__(self, base: str, accounts: list[str], tag: str, every: float = 0.05) -> None:
        self._base, self._accounts, self._tag, self._every = base, accounts, tag, every
        self.statuses: collections.Counter[int | str] = collections.Counter()
        self.accepted: list[str] = []
        self.accepted_at: list[float] = []
        self.bodies: dict[int, str] = {}  # the first body of each unexpected status
        self.answers: list[tuple[float, int | str]] = []  # (time.monotonic(), status)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="event-load")
        self._thread.start()

    def _run(self) -> None:
        n = 0
        with httpx.Client(base_url=self._base, timeout=REQUEST_TIMEOUT_S) as client:
            while not self._stop.wait(self._every):
                channel = "email" if n % 2 else "sms"
                body = {"type": "account.welcome", "occurrence": f"{self._tag}-{n}",
                        "account_id": self._accounts[n % len(self._accounts)],
                        "channels": [channel]}
                n += 1
                try:
                    response = client.post("/v1/events", json=body)
                except httpx.HTTPError:
                    self.statuses["no answer"] += 1
                    self.answers.append((time.monotonic(), "no answer"))
                    continue
                self.statuses[response.status_code] += 1
                self.answers.append((time.monotonic(), response.status_code))
                if response.status_code == 202:
                    self.accepted.append(str(response.json()["id"]))
                    self.accepted_at.append(time.monotonic())
                elif response.status_code != 503:
                    self.bodies.setdefault(response.status_code, response.text[:500])

    def count(self, status: int | str) -> int:
        """How many answers had ``status`` so far."""
        return self.statuses[status]

    def count_after(self, status: int | str, since: float) -> int:
        """How many answers had ``status`` after ``since`` (a ``time.monotonic()``)."""
        return sum(1 for at, found in self.answers if found == status and at > since)

    def stop(self) -> None:
        """Stop posting (the request in flight ends first)."""
        self._stop.set()
        self._thread.join(timeout=REQUEST_TIMEOUT_S + 5)

    def longest_gap(self, since: float) -> float:
        """The longest time between two accepted events after ``since`` (a
        ``time.monotonic()``): the API's seconds without progress."""
        times = [since, *[t for t in self.accepted_at if t > since]]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


@contextmanager
def steady_load(base: str, accounts: list[str], tag: str) -> Iterator[EventLoad]:
    """An :class:`EventLoad` that the workers keep up with: the block runs once 40 sends
    went through, and the load stops when it ends, however it ends."""
    load = EventLoad(base, accounts, tag)
    try:
        wait_for(lambda: len(MockProvider.sends()) >= 40, timeout=30, every=0.2,
                 what="sends to progress")
        yield load
    finally:
        load.stop()


class ProgressWatch:
    """Reads ``count()`` (a number that only grows while work is done: sends accepted by
    the mock provider) every ``every`` seconds on a thread of its own, keeping when it
    grew, until :meth:`stop` (or the end of a ``with`` block on it). A failed read counts
    as no progress."""

    def __init__(self, count: Callable[[], int], every: float = 0.1) -> None:
        self._count, self._every = count, every
        self.grew_at: list[float] = []
        self._last = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="progress")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                value = self._count()
            except Exception:  # an unreadable moment is no progress
                continue
            if value > self._last:
                if self._last >= 0:
                    self.grew_at.append(time.monotonic())
                self._last = value

    def longest_stall(self, since: float, until: float) -> float:
        """The longest time without progress between ``since`` and ``until`` (both
        ``time.monotonic()``)."""
        times = [since, *[t for t in self.grew_at if since < t < until], until]
        return max(b - a for a, b in itertools.pairwise(times))

    def stop(self) -> None:
        """Stop reading."""
        self._stop.set()
        self._thread.join(timeout=10)

    def __enter__(self) -> ProgressWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


#: The queues the load's events go through (the channels' and the orchestration's).
PIPELINE_QUEUES = ("notification-email", "notification-sms", "notification-orchestration")
#: The most sends one worker process of those queues holds at once (email 5, SMS 2,
#: orchestration 2).
IN_FLIGHT_PER_PROCESS = 9


def pipeline_worker(*imports: str) -> subprocess.Popen[bytes]:
    """A ``herald worker`` of :data:`PIPELINE_QUEUES` with the providers' rate limits lifted
    (these tests are about loss, not throughput) and ``imports`` (``--import`` modules)."""
    options = [arg for module in ("bench.unlimited", *imports) for arg in ("--import", module)]
    return spawn_herald("worker", *options, *PIPELINE_QUEUES)


def delivery_outcomes(notifications: list[str]) -> collections.Counter[str]:
    """The deliveries of ``notifications`` by outcome. The test's own pooled connections
    may predate a database restart: a dead one fails its statement once and is replaced,
    so a read is tried three times."""
    for _ in range(3):
        try:
            with db.session() as session:
                return collections.Counter(session.exec(select(Delivery.outcome).where(
                    Delivery.notification_id.in_(notifications))).all())
        except OperationalError:
            continue
    raise AssertionError("the database does not answer the test")


def wait_all_sent(load: EventLoad, timeout: float,
                  detail: Callable[[], object] = lambda: "") -> None:
    """Wait until every event ``load`` got accepted has its delivery sent; a timeout says
    what the deliveries are (and ``detail()``)."""
    try:
        wait_for(lambda: delivery_outcomes(load.accepted)["sent"] == len(load.accepted),
                 timeout=timeout, every=0.5, what="every accepted event's delivery to be sent")
    except AssertionError as error:
        raise AssertionError(f"{error}: {dict(delivery_outcomes(load.accepted))} "
                             f"{detail()}") from None


@contextmanager
def killed_at_end(processes: list[subprocess.Popen[bytes]]) -> Iterator[list[int | None]]:
    """Yield a list that, once the block ends (however it ends), holds each process's
    exit code as it stood then (None: still running, as a process that rode a failure
    out is); the processes are killed then."""
    exits: list[int | None] = []
    try:
        yield exits
    finally:
        exits.extend(process.poll() for process in processes)
        for process in processes:
            process.kill()
            process.wait(timeout=10)


#: A made-up id for every path parameter of :func:`probe_get_routes`.
NO_SUCH_ID = "01900000-0000-7000-8000-000000000000"


def probe_get_routes(base: str, admin_token: str) -> dict[str, int]:
    """Each GET route the API's OpenAPI document lists (path parameters filled with
    :data:`NO_SUCH_ID`, sent with ``admin_token``) with the status it answers now; event
    streams, which never end, are left out."""
    answers = {}
    with httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT_S,
                      headers={"Authorization": f"Bearer {admin_token}"}) as client:
        paths = sorted(path for path, methods in client.get("/openapi.json").json()[
            "paths"].items() if "get" in methods and not path.endswith("/stream"))
        for path in paths:
            url = path
            for name in (part[1:-1] for part in path.split("/") if part.startswith("{")):
                url = url.replace(f"{{{name}}}", NO_SUCH_ID)
            answers[path] = client.get(url).status_code
    return answers
