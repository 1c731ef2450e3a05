"""Events/s through ``POST /v1/events/bulk``: a real ``herald web`` on PostgreSQL + Redis.

``python -m bench.bulk [--requests N] [--clients C] [--type account.welcome|payment.receipt]
[--repeat R]``. Uses ``$DATABASE_URL`` / ``$REDIS_URL`` or starts private servers, serves
this checkout's code (``PYTHONPATH``), and sends N requests of 1,000 new events each from
C client threads at once (httpx, bodies encoded before the clock starts), then the same
requests again (every event an occurrence that exists: 200, nothing sent). Two warm-up
requests go first. No workers run: what is measured is accepting (persisting, enqueueing,
stamping) and answering. An ``account.welcome`` is three deliveries (email and SMS
queued, in-app delivered), a ``payment.receipt`` one email. The median of R rounds is
reported with every run; appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench import publish
from bench.e2e import _services

REPO = Path(__file__).resolve().parents[1]
EVENTS_PER_REQUEST = 1000
ACCOUNTS = 50


def _event(kind: str, account_id: str, occurrence: str) -> dict[str, object]:
    if kind == "payment.receipt":
        return {"type": kind, "account_id": account_id, "occurrence": occurrence,
                "data": {"amount": "49.00", "currency": "SAR", "order_id": occurrence}}
    return {"type": kind, "account_id": account_id, "occurrence": occurrence}


def _serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "web", "--host", "127.0.0.1", "--port", str(port)],
        env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "herald web exited"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise TimeoutError("herald web did not answer within 60 s")


def _rate(client: httpx.Client, bodies: list[bytes], clients: int, status: int) -> float:
    """Events/s of sending ``bodies`` from ``clients`` threads; every event answered
    ``status``."""
    def send(body: bytes) -> bytes:
        response = client.post("/v1/events/bulk", content=body,
                               headers={"content-type": "application/json"})
        assert response.status_code == 200, response.text[:300]
        return response.content

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(send, bodies))
    elapsed = time.perf_counter() - start
    assert all(r["status"] == status for a in answers for r in json.loads(a)["results"])
    return len(bodies) * EVENTS_PER_REQUEST / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--type", default="account.welcome",
                        choices=["account.welcome", "payment.receipt"])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env, started = _services()
    env = {**os.environ, **env, "BROKER": "redis", "QUEUE_PREFIX": f"bulk{uuid.uuid4().hex[:6]}",
           "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock", "LOG_LEVEL": "WARNING"}
    from herald import db

    db.migrate(env["DATABASE_URL"])
    port = 18000 + os.getpid() % 1000
    server = _serve(env, port)
    new: list[float] = []
    repeated: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            accounts = [client.post("/v1/accounts", json={"email": f"b{i}@example.com",
                                                          "phone": "+966501234567"}).json()["id"]
                        for i in range(ACCOUNTS)]

            def bodies(run: str, count: int) -> list[bytes]:
                return [json.dumps({"events": [
                    _event(args.type, accounts[i % ACCOUNTS], f"{run}-{r}-{i}")
                    for i in range(EVENTS_PER_REQUEST)]}).encode() for r in range(count)]

            _rate(client, bodies("warm-up", 2), 1, 202)
            for round_ in range(args.repeat):
                sent = bodies(f"round{round_}", args.requests)
                new.append(_rate(client, sent, args.clients, 202))
                repeated.append(_rate(client, sent, args.clients, 200))
    finally:
        server.terminate()
        server.wait(30)
        for service in started:
            service.stop()

    def runs(rates: list[float]) -> str:
        return (f"{statistics.median(rates):,.0f} "
                f"({', '.join(f'{rate:,.0f}' for rate in rates)})")

    publish(["", f"Bulk events ({time.strftime('%Y-%m-%d %H:%M')}, `herald web` on "
             f"PostgreSQL + Redis, {args.requests} requests × {EVENTS_PER_REQUEST} "
             f"`{args.type}` from {args.clients} client thread(s); median of {args.repeat} "
             "rounds, each in brackets):", "", "| measure | events/s |", "|---|---|",
             f"| new events | {runs(new)} |", f"| the same events again (200) | "
             f"{runs(repeated)} |"])


if __name__ == "__main__":
    main()
