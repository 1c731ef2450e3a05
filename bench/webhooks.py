"""Outbound webhooks: messages relayed per second to a local receiver, and what an
endpoint subscribed to ``delivery.sent`` adds to the delivery whose outcome writes its
message.

``python -m bench.webhooks [--messages N] [--endpoints E] [--repeat R]``. Uses
``$DATABASE_URL`` / ``$REDIS_URL`` or starts private servers (``bench.e2e``'s). The
receiver is a process of its own (``python -m bench.webhooks --serve PORT``): an asyncio
HTTP/1.1 server that answers 200 to every POST on kept-alive connections, so that what is
measured is the relay, not a slow receiver. Each round measures the machine
(``bench.machine``), then:

- **relay**: 2 ``herald worker webhook-delivery`` processes, E endpoints on the receiver
  (each a group of its own, 2 sends in flight at most per endpoint). N pending messages
  spread over the endpoints are written in one transaction, their jobs added through the
  relay's own hand-off (one round trip per chunk); the clock runs from the hand-off to
  the last message ``delivered`` in PostgreSQL. Also the workers' CPU ms per message.
- **trigger cost**: one email delivery attempt (claim → mock accepted → ``sent``) in
  process, 200 of them without any endpoint and 200 with one endpoint subscribed to
  ``delivery.sent``: statements and CPU ms per attempt (``bench.e2e.per_unit_costs``).

Appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid

from sqlalchemy import func, insert, select, text

from bench import machine, publish
from bench.e2e import REPO, CpuMeter, _accounts, _configure, _services, per_unit_costs

#: Worker processes of the relay run.
PROCESSES = 2
#: Messages relayed before the clock starts (workers booted, connections open).
WARM_UP = 200


# -- the receiver ---------------------------------------------------------------------------
async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read requests on one connection and answer each 200, until the client closes."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _serve(port: int) -> None:
    server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start_receiver() -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "bench.webhooks", "--serve", str(port)],
                               cwd=REPO)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the receiver did not start")


# -- the relay run ------------------------------------------------------------------------------
def _endpoints(port: int, count: int) -> list[str]:
    from herald import db
    from models.webhooks import WebhookEndpoint, forget_subscribed_types

    with db.get_engine().begin() as connection:
        connection.execute(text("TRUNCATE webhook_messages, webhook_endpoints CASCADE"))
    rows = [WebhookEndpoint(url=f"http://127.0.0.1:{port}/e{n}", events=["delivery.sent"])
            for n in range(count)]
    with db.session() as session:
        session.add_all(rows)
    forget_subscribed_types()
    return [row.id for row in rows]


def _write_messages(endpoints: list[str], count: int) -> list[tuple[str, str]]:
    """``count`` pending messages over ``endpoints``, in one transaction."""
    from herald import db
    from models.base import utcnow
    from models.webhooks import WebhookMessage, message_id

    now = utcnow()
    pairs = [(message_id(), endpoints[n % len(endpoints)]) for n in range(count)]
    body = {"type": "delivery.sent", "timestamp": now.isoformat(),
            "data": {"id": "d", "outcome": "sent"}}
    with db.get_engine().begin() as connection:
        connection.execute(insert(WebhookMessage.__table__), [  # type: ignore[attr-defined]
            {"id": mid, "endpoint_id": eid, "type": "delivery.sent", "body": body,
             "status": "pending", "attempts": [], "handed_off_at": now, "created_at": now}
            for mid, eid in pairs])
    return pairs


def _delivered() -> int:
    from herald import db
    from models.webhooks import WebhookMessage

    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(WebhookMessage)
                                  .where(WebhookMessage.status == "delivered")) or 0)


def _relay(endpoints: list[str], pairs: list[tuple[str, str]]) -> None:
    """Hand the messages to the relay and wait until every one is delivered."""
    from actors.webhooks import hand_off

    target = _delivered() + len(pairs)
    for start in range(0, len(pairs), 1_000):
        hand_off(pairs[start:start + 1_000])
    deadline = time.monotonic() + 600
    while _delivered() < target:
        if time.monotonic() > deadline:
            raise RuntimeError("the relay did not deliver every message in 10 minutes")
        time.sleep(0.01)


def relay_run(port: int, endpoints_count: int, messages: int,
              started: list) -> tuple[float, float]:
    """Messages/s and the workers' CPU ms per message, with :data:`PROCESSES` workers."""
    endpoints = _endpoints(port, endpoints_count)
    workers = [subprocess.Popen(
        [sys.executable, "-m", "herald.cli", "worker", "webhook-delivery"], cwd=REPO,
        env={**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "WARNING"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(PROCESSES)]
    try:
        _relay(endpoints, _write_messages(endpoints, WARM_UP))
        pairs = _write_messages(endpoints, messages)
        with CpuMeter([worker.pid for worker in workers], started) as meter:
            clock = time.perf_counter()
            _relay(endpoints, pairs)
            elapsed = time.perf_counter() - clock
        return messages / elapsed, 1000 * meter.spent["workers"] / messages
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=60)


def trigger_costs(port: int, accounts: list[str]) -> dict[str, dict[str, float]]:
    """A delivery attempt's statements and CPU ms with no endpoint, then with one
    endpoint subscribed to ``delivery.sent`` (its message written, not relayed)."""
    _endpoints(port, 0)
    without = per_unit_costs(accounts)
    _endpoints(port, 1)
    with_one = per_unit_costs(accounts)
    return {"no endpoint": without, "one subscribed endpoint": with_one}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=5_000)
    parser.add_argument("--endpoints", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve(args.serve))
        return
    env, started = _services()
    receiver, port = _start_receiver()
    rates: list[float] = []
    cpu: list[float] = []
    single: list[float] = []
    costs: list[dict[str, dict[str, float]]] = []
    speeds: list[dict[str, float | None]] = []
    try:
        _configure({**env, "QUEUE_PREFIX": f"webhooks{uuid.uuid4().hex[:6]}",
                    "BROKER": "redis", "LOG_LEVEL": "WARNING", "WEBHOOK_ALLOW_HTTP": "1",
                    "WEBHOOK_ALLOW_PRIVATE": "1", "EMAIL_PROVIDER": "mock",
                    "SMS_PROVIDER": "mock"})
        import logging

        logging.disable(logging.INFO)
        from herald.db import migrate

        migrate()
        accounts = _accounts()
        for round_ in range(args.repeat):
            speeds.append(machine.measure(os.environ["DATABASE_URL"], os.environ["REDIS_URL"]))
            rate, per_message = relay_run(port, args.endpoints, args.messages, started)
            rates.append(rate)
            cpu.append(per_message)
            one, _ = relay_run(port, 1, args.messages // 5, started)
            single.append(one)
            costs.append(trigger_costs(port, accounts))
            print(f"round {round_ + 1}: {rate:,.0f} messages/s over {args.endpoints} "
                  f"endpoints, {one:,.0f}/s to one", flush=True)
    finally:
        receiver.kill()
        for service in started:
            service.stop()
    _report(args, rates, cpu, single, costs, speeds)


def _report(args: argparse.Namespace, rates: list[float], cpu: list[float],
            single: list[float], costs: list[dict[str, dict[str, float]]],
            speeds: list[dict[str, float | None]]) -> None:
    median = statistics.median

    def each(values: list[float], form: str = ",.0f") -> str:
        return f"{median(values):{form}} ({', '.join(f'{v:{form}}' for v in values)})"

    lines = ["", f"Outbound webhooks ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, "
             f"{PROCESSES} relay worker processes, a local asyncio receiver; "
             f"{args.repeat} rounds, median and each round):", "",
             "| measure | value |", "|---|---|",
             f"| messages relayed/s, {args.messages} messages over {args.endpoints} "
             f"endpoints | {each(rates)} |",
             f"| messages relayed/s, {args.messages // 5} messages to one endpoint (2 in "
             f"flight) | {each(single)} |",
             f"| relay workers' CPU ms per message | {each(cpu, '.2f')} |"]
    for label in ("no endpoint", "one subscribed endpoint"):
        lines += [f"| a delivery attempt's statements, {label} | "
                  f"{each([c[label]['delivery_statements'] for c in costs], '.2f')} |",
                  f"| a delivery attempt's CPU ms, {label} | "
                  f"{each([c[label]['delivery_cpu_ms'] for c in costs], '.2f')} |"]
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
