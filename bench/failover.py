"""What provider failover costs while every circuit is closed: end-to-end deliveries/s
with a chain of one (``mock``) beside a chain of two (``mock-a,mock-b``), and the Redis
commands each delivery costs with each. A chain of one mock instance (``mock-a``) runs
too, so that what an instance costs over the plain mock is not taken for the chain's cost.

``python -m bench.failover [--events N] [--repeat R] [--monitor-events M] [--baseline DIR]``.
The machinery is :mod:`bench.e2e`'s (its servers, accounts with a history, ``run_once``:
real ``herald worker`` processes on the email and SMS queues, rate limits lifted,
``account.welcome`` on email + SMS), with 2 worker processes. Each of ``--repeat``
rounds measures the machine (``bench.machine``), then runs every arm once, the arms'
order alternating from round to round, so that the machine's drift falls on each arm
alike (paired rounds). ``--baseline DIR`` adds an arm whose workers run the code in DIR,
a checkout from before provider chains (``git archive <commit> | tar -x -C DIR``): today's
path with no breaker at all.

Then one short run per arm with Redis ``MONITOR`` on (not timed: MONITOR slows Redis)
counts the commands clients sent per delivery, by command — each one a round trip, or
part of a pipeline's — and those scripts ran inside Redis (no round trip of their own).
Appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import redis

from bench import machine, publish
from bench.e2e import REPO, _accounts, _configure, _reset_tables, _services, run_once

#: Worker processes of every run.
PROCESSES = 2
#: Each arm: its label and the settings its workers run with (the others unset).
CHAIN_OF_ONE = {"EMAIL_PROVIDERS": "mock", "SMS_PROVIDERS": "mock"}
#: A chain of one mock instance: what an instance costs over the plain mock (its state
#: and idempotency key, read and written in its send's one script), apart from the chain.
CHAIN_OF_ONE_INSTANCE = {"MOCK_INSTANCES": "mock-a,mock-b", "EMAIL_PROVIDERS": "mock-a",
                         "SMS_PROVIDERS": "mock-a"}
CHAIN_OF_TWO = {"MOCK_INSTANCES": "mock-a,mock-b", "EMAIL_PROVIDERS": "mock-a,mock-b",
                "SMS_PROVIDERS": "mock-a,mock-b"}
#: Every variable an arm may set: each arm unsets those it does not name.
ARM_VARIABLES = ("MOCK_INSTANCES", "EMAIL_PROVIDERS", "SMS_PROVIDERS", "EMAIL_PROVIDER",
                 "SMS_PROVIDER", "PYTHONPATH")


def _arm(values: dict[str, str]) -> None:
    """Set the arm's variables (and unset the others) for this process and the workers it
    starts; the settings are read again."""
    from herald import settings

    for name in ARM_VARIABLES:
        os.environ.pop(name, None)
    os.environ.update(values)
    settings.reset_settings()


def script_names() -> dict[str, str]:
    """The SHA1 of the scripts a send runs → a name (the others are the job queue's, and
    a ``--baseline`` tree's own versions of these)."""
    # their private Script objects: what the bench counts is exactly those scripts' calls
    from providers import circuit, mock

    return {circuit._ALLOW.sha: "circuit allow", circuit._RECORD.sha: "circuit record",
            mock._SEND_SCRIPT.sha: "mock send"}


class RedisCommands:
    """The commands Redis runs while in the block (``MONITOR`` on a connection of its own),
    by who sent them: a client (``sent``) or a script (``scripted``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sent: Counter[str] = Counter()
        self.scripted: Counter[str] = Counter()
        self._stop = threading.Event()
        self._scripts = script_names()

    def __enter__(self) -> RedisCommands:
        self._client = redis.Redis.from_url(self.url)
        self._monitor = self._client.monitor().__enter__()
        self._thread = threading.Thread(target=self._count, daemon=True)
        self._thread.start()
        return self

    def _count(self) -> None:
        with contextlib.suppress(redis.ConnectionError, ValueError, OSError):
            for command in self._monitor.listen():
                if self._stop.is_set():
                    return
                words = command["command"].split(" ", 2)
                name = words[0].strip('"').upper()
                if name == "EVALSHA" and len(words) > 1:
                    sha = words[1].strip('"')
                    name = f"EVALSHA {self._scripts.get(sha, 'other')}"
                bucket = self.scripted if command.get("client_type") == "lua" else self.sent
                bucket[name] += 1

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        # a command of our own ends the listener's wait
        redis.Redis.from_url(self.url).ping()
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self._monitor.__exit__(None, None, None)
        self._client.close()


def _arms(baseline: Path | None) -> list[tuple[str, dict[str, str], Path]]:
    """(label, settings, source tree of the workers) of each arm."""
    arms = [("chain of one (mock)", CHAIN_OF_ONE, REPO),
            ("chain of one (mock-a)", CHAIN_OF_ONE_INSTANCE, REPO),
            ("chain of two (mock-a, mock-b)", CHAIN_OF_TWO, REPO)]
    if baseline is not None:
        arms.insert(0, (f"before provider chains ({baseline.name})",
                        {"EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
                         "PYTHONPATH": str(baseline)}, baseline))
    return arms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3,
                        help="paired rounds (default 3)")
    parser.add_argument("--monitor-events", type=int, default=300,
                        help="events of each arm's MONITOR run (default 300; 0 skips them)")
    parser.add_argument("--baseline", type=Path,
                        help="a source tree of herald before provider chains: an arm of its own")
    args = parser.parse_args()
    env, started = _services()
    speeds: list[dict[str, float | None]] = []
    try:
        _configure({**env, "QUEUE_PREFIX": f"failover{uuid.uuid4().hex[:6]}",
                    "BROKER": "redis", "LOG_LEVEL": "WARNING"})
        import logging

        logging.disable(logging.INFO)
        _reset_tables()
        accounts = _accounts()
        arms = _arms(args.baseline)
        rates: dict[str, list[float]] = {label: [] for label, _, _ in arms}
        workers_cpu: dict[str, list[float]] = {label: [] for label, _, _ in arms}
        commands: dict[str, RedisCommands] = {}
        for round_ in range(args.repeat):
            speeds.append(machine.measure(os.environ["DATABASE_URL"],
                                          os.environ["REDIS_URL"]))
            for label, values, repo in (arms if round_ % 2 == 0 else arms[::-1]):
                _arm(values)
                rate, costs = run_once(args.events, PROCESSES, accounts, 1, started,
                                       repo=repo)
                rates[label].append(rate)
                workers_cpu[label].append(costs["workers"])
                print(f"round {round_ + 1}: {label}: {rate:,.0f} deliveries/s",
                      flush=True)
        if args.monitor_events:
            for label, values, repo in arms:
                _arm(values)
                counted = RedisCommands(os.environ["REDIS_URL"])
                run_once(args.monitor_events, PROCESSES, accounts, 1, started, repo=repo,
                         watch=counted)
                commands[label] = counted
    finally:
        for service in started:
            service.stop()
    _report(args, rates, workers_cpu, commands, speeds)


def _report(args: argparse.Namespace, rates: dict[str, list[float]],
            workers_cpu: dict[str, list[float]], commands: dict[str, RedisCommands],
            speeds: list[dict[str, float | None]]) -> None:
    median = statistics.median
    reference = "chain of one (mock)"
    lines = ["", f"Provider failover ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, "
             f"{PROCESSES} worker processes, {args.events} events × email + SMS, every "
             f"circuit closed; {args.repeat} paired rounds, the arms' order alternating; "
             "median, each round in brackets):", "", "| measure | value |", "|---|---|"]
    for label, values in rates.items():
        lines.append(f"| deliveries/s, {label} | {median(values):,.0f} "
                     f"({', '.join(f'{v:,.0f}' for v in values)}) |")
    for label, values in rates.items():
        if label != reference:
            ratios = [v / r - 1 for v, r in zip(values, rates[reference], strict=True)]
            lines.append(f"| {label} against the chain of one, per round | "
                         f"{median(ratios):+.1%} ({', '.join(f'{x:+.1%}' for x in ratios)}) |")
    for label, values in workers_cpu.items():
        lines.append(f"| workers' CPU ms per delivery, {label} | {median(values):.2f} |")
    deliveries = 2 * args.monitor_events
    for label, counted in commands.items():
        top = ", ".join(f"{name} {n / deliveries:.2f}" for name, n in counted.sent.most_common(10))
        lines.append(f"| Redis commands sent per delivery, {label} | "
                     f"{sum(counted.sent.values()) / deliveries:.2f} ({top}) |")
        lines.append(f"| … run inside scripts per delivery, {label} | "
                     f"{sum(counted.scripted.values()) / deliveries:.2f} |")
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
