"""The HTTP front door: events accepted/s through ``herald web``, one at a time and in bulk.

``python -m bench.web [--duration 15] [--repeat 3] [--connections 32]``. Uses
``$DATABASE_URL`` / ``$REDIS_URL`` or starts private servers. Runs ``herald web`` as the
Procfile does (default settings: ``WEB_CONCURRENCY`` unset, so one process per core,
INFO logging to a file), no worker, and drives it with ``wrk`` (2 threads) from this
machine, which PostgreSQL and Redis share. Each round measures the machine's speeds
(``bench.machine``), then, on the same processes:

* ``GET /healthz`` — the ceiling of the HTTP layer with no work behind it;
* ``POST /v1/events`` — ``account.welcome`` events (email, SMS, in-app) for 200 accounts,
  every occurrence new, ``--connections`` at once;
* ``POST /v1/events/bulk`` — ``--bulk-size`` events per request, ``--bulk-connections`` at
  once.

For each: requests/s, latency p50 / p99 (wrk's), the CPU per event of each process group
(the web processes, PostgreSQL, Redis, wrk itself), and a check that nothing accepted is
lost: every 202's notification is in the database, and each of its email and SMS
deliveries has its job in the queue and its handoff stamp. Medians of the rounds, every
round in brackets; appended to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import text

from bench import machine, publish
from bench.e2e import _accounts, _configure, _reset_tables, _services, server_roots, tree_cpu_s
from bench.e2e import _with_descendants as with_descendants

REPO = Path(__file__).resolve().parents[1]
#: A logging config that leaves the loggers to the app's own configuration, as ``herald
#: web`` does (uvicorn's CLI would otherwise install its own handlers first).
_NO_LOG_CONFIG = Path(__file__).with_name("uvicorn_no_logging.json")

#: What both wrk scripts begin with: the accounts, a thread number, and a file of the
#: thread's own for its responses' ``status id`` lines.
PRELUDE_LUA = r"""
local accounts = {}
for line in io.lines("%(accounts)s") do accounts[#accounts + 1] = line end
local threads = 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function init(args)
  prefix = "%(run)s-" .. tid
  out = io.open("%(out)s/responses-" .. tid, "w")
  counter = 0
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
"""

#: A wrk script that posts one new event per request and writes ``status id`` per
#: response to a file of its thread (the ids of the 202s are checked afterwards).
SINGLE_LUA = PRELUDE_LUA + r"""
function request()
  counter = counter + 1
  return wrk.format(nil, "/v1/events", nil,
    '{"type":"account.welcome","account_id":"' .. accounts[counter %% #accounts + 1] ..
    '","occurrence":"' .. prefix .. "-" .. counter .. '"}')
end
function response(status, headers, body)
  out:write(status, " ", status == 202 and body:match('^{"id":"([^"]+)"') or "-", "\n")
  out:flush()
end
"""

#: The same for ``POST /v1/events/bulk``: ``size`` events per request, one line per result.
BULK_LUA = PRELUDE_LUA + r"""
function request()
  local events = {}
  for i = 1, %(size)d do
    counter = counter + 1
    events[i] = '{"type":"account.welcome","account_id":"' ..
      accounts[counter %% #accounts + 1] .. '","occurrence":"' .. prefix .. "-" .. counter .. '"}'
  end
  return wrk.format(nil, "/v1/events/bulk", nil,
                    '{"events":[' .. table.concat(events, ",") .. ']}')
end
function response(status, headers, body)
  if status ~= 200 then out:write(status, " -\n") else
    for result in body:gmatch('{"status":%%d+,"[^{]*{"id":"[^"]+"') do
      out:write(result:match('"status":(%%d+)'), " ", result:match('{"id":"([^"]+)"$'), "\n")
    end
    for status in body:gmatch('{"status":(4%%d%%d),"error"') do out:write(status, " -\n") end
  end
  out:flush()
end
"""


def _start_web(env: dict[str, str], workdir: Path,
               plain: bool = False) -> tuple[subprocess.Popen, str]:
    """``herald web`` as the Procfile runs it (only the port is chosen), logging to a file;
    with ``plain``, the same app and processes under uvicorn's pure-Python HTTP parser
    (h11) and asyncio's own event loop."""
    from herald.web.app import web_processes
    from tests.support.services import find_free_port

    port = find_free_port()
    log = (workdir / "web.log").open("ab")
    command = ([sys.executable, "-m", "uvicorn", "--factory", "herald.web.app:create_served_app",
                "--http", "h11", "--loop", "asyncio", "--workers", str(web_processes()),
                "--port", str(port), "--log-config", str(_NO_LOG_CONFIG)] if plain
               else [sys.executable, "-m", "herald.cli", "web"])
    process = subprocess.Popen(command, cwd=REPO, env={**env, "PORT": str(port)},
                               stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"herald web exited: {(workdir / 'web.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                break
        except OSError:
            time.sleep(0.2)
    # every process of the group answers: uvicorn's children start after the parent listens
    time.sleep(3)
    return process, base


def _latency_ms(output: str, percentile: str) -> float:
    found = re.search(rf"^\s+{percentile}%\s+([\d.]+)(us|ms|s)\s*$", output, re.M)
    if found is None:
        return float("nan")
    value, unit = float(found.group(1)), found.group(2)
    return value * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


class Wrk:
    """One wrk run against the web processes, with the CPU each process group spent."""

    def __init__(self, web_pid: int, started: list, duration_s: float,
                 connections: int) -> None:
        self.web_pid, self.started = web_pid, started
        self.duration_s, self.connections = duration_s, connections

    def _groups(self) -> dict[str, list[int]]:
        return {"web processes": [self.web_pid], **server_roots(self.started)}

    def run(self, url: str, script: Path | None = None,
            duration_s: float | None = None) -> dict[str, float | str]:
        """Requests/s, p50 and p99 in ms, and CPU seconds per group over the run."""
        groups = self._groups()
        before = {name: sum(tree_cpu_s(root) for root in roots)
                  for name, roots in groups.items()}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        command = ["wrk", "-t2", f"-c{self.connections}",
                   f"-d{duration_s or self.duration_s}s", "--latency", "--timeout", "10s"]
        if script is not None:
            command += ["-s", str(script)]
        output = subprocess.run([*command, url], capture_output=True, text=True,
                                check=True).stdout
        after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent: dict[str, float | str] = {
            name: sum(tree_cpu_s(root) for root in roots) - before[name]
            for name, roots in groups.items()}
        spent["wrk"] = (after_children.ru_utime - children.ru_utime
                        + after_children.ru_stime - children.ru_stime)
        rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
        spent |= {"requests/s": float(rate.group(1)) if rate else 0.0,
                  "p50": _latency_ms(output, "50"), "p99": _latency_ms(output, "99"),
                  "output": output}
        return spent


def _responses(out: Path) -> tuple[dict[str, int], list[str]]:
    """Statuses counted, and the notification ids of the 202s, from the wrk threads' files."""
    statuses: dict[str, int] = {}
    accepted: list[str] = []
    for path in out.glob("responses-*"):
        for line in path.read_text().splitlines():
            status, _, notification_id = line.partition(" ")
            statuses[status] = statuses.get(status, 0) + 1
            if status == "202":
                accepted.append(notification_id)
        path.unlink()
    return statuses, accepted


def lost(accepted: list[str]) -> int:
    """How many of these accepted notifications miss their row, or a job or the handoff
    stamp of one of their email and SMS deliveries."""
    from herald.db import get_engine
    from herald.queue import queue

    queues = {"email": queue("notification-email"), "sms": queue("notification-sms")}
    missing = 0
    with get_engine().connect() as connection:
        for start in range(0, len(accepted), 1000):
            chunk = accepted[start:start + 1000]
            found = connection.execute(text(
                "SELECT n.id, d.id, d.channel, d.queued_at FROM notifications n"
                " JOIN deliveries d ON d.notification_id = n.id"
                " WHERE n.id = ANY(:ids) AND d.channel IN ('email', 'sms')"),
                {"ids": chunk}).all()
            deliveries: dict[str, int] = {}
            for notification_id, delivery_id, channel, queued_at in found:
                deliveries[notification_id] = deliveries.get(notification_id, 0) + 1
                if queued_at is None or queues[channel].get(delivery_id) is None:
                    missing += 1
            missing += sum(1 for n in chunk if deliveries.get(n) != 2)
    return missing


def _script(template: str, workdir: Path, accounts: Path, **values: object) -> Path:
    path = workdir / f"{uuid.uuid4().hex[:8]}.lua"
    path.write_text(template % {"accounts": accounts, "out": workdir,
                                "run": uuid.uuid4().hex[:10], **values})
    return path


def one_round(base: str, web_pid: int, started: list, workdir: Path, accounts: Path,
              args: argparse.Namespace) -> dict[str, float]:
    """Health, single events and bulk events against the same web processes."""
    wrk = Wrk(web_pid, started, args.duration, args.connections)
    results: dict[str, float] = {}
    health = wrk.run(f"{base}/healthz")
    results["GET /healthz requests/s"] = float(health["requests/s"])
    results["GET /healthz p99 ms"] = float(health["p99"])

    # every script names new occurrences
    results |= _measure("POST /v1/events", "accepted/s", "responses", wrk, base,
                        lambda: _script(SINGLE_LUA, workdir, accounts), workdir,
                        float(args.duration))
    results["POST /v1/events ÷ /healthz"] = (results["POST /v1/events accepted/s"]
                                             / float(health["requests/s"]))
    results |= _measure("POST /v1/events/bulk", "events accepted/s", "results",
                        Wrk(web_pid, started, args.duration, args.bulk_connections),
                        base, lambda: _script(BULK_LUA, workdir, accounts,
                                              size=args.bulk_size), workdir,
                        float(args.duration), per_request=f" per request of {args.bulk_size}")
    return results


def _measure(route: str, rate: str, answers: str, wrk: Wrk, base: str,
             script: Callable[[], Path], workdir: Path, seconds: float,
             per_request: str = "") -> dict[str, float]:
    """One route's measure after a 3 s warm-up (connections, prepared statements): events
    accepted/s, latency (p50 for single requests), answers other than 202, the accepted
    ones lost, and the CPU per event of each process group."""
    wrk.run(base, script(), duration_s=3)
    _responses(workdir)
    measured = wrk.run(base, script())
    statuses, accepted = _responses(workdir)
    count = len(accepted)
    results: dict[str, float] = {f"{route} {rate}": count / seconds}
    if not per_request:
        results[f"{route} p50 ms"] = float(measured["p50"])
    results |= {
        f"{route} p99 ms{per_request}": float(measured["p99"]),
        f"{route} {answers} other than 202": sum(
            n for status, n in statuses.items() if status != "202"),
        f"{route} accepted but lost": lost(accepted)}
    for name in ("web processes", "postgres", "redis", "wrk"):
        if name in measured:
            results[f"{route} CPU ms per event: {name}"] = (
                1000 * float(measured[name]) / max(count, 1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=int, default=15, help="seconds per measure")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--bulk-size", type=int, default=1000)
    parser.add_argument("--bulk-connections", type=int, default=4)
    parser.add_argument("--plain-uvicorn", action="store_true",
                        help="serve with h11 and asyncio in place of httptools and uvloop")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench.web needs wrk (Debian: apt-get install wrk)")
    env, started = _services()
    workdir = Path(tempfile.mkdtemp(prefix="herald-bench-web-"))
    rounds: list[dict[str, float]] = []
    speeds: list[dict[str, float | None]] = []
    web = None
    try:
        prefix = f"web{uuid.uuid4().hex[:6]}"
        _configure({**env, "QUEUE_PREFIX": prefix, "BROKER": "redis"})
        _reset_tables()
        accounts = workdir / "accounts.txt"
        accounts.write_text("\n".join(_accounts()) + "\n")
        server_env = {key: value for key, value in os.environ.items()
                      if key not in ("WEB_CONCURRENCY", "LOG_LEVEL", "API_TOKEN")}
        web, base = _start_web(server_env, workdir, plain=args.plain_uvicorn)
        processes = len(with_descendants(web.pid))
        for _ in range(args.repeat):
            speeds.append(machine.measure(os.environ["DATABASE_URL"], os.environ["REDIS_URL"]))
            rounds.append(one_round(base, web.pid, started, workdir, accounts, args))
    finally:
        if web is not None:
            web.terminate()
            web.wait(timeout=60)
        for service in started:
            service.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    server = ("uvicorn with h11 and asyncio (`--plain-uvicorn`)" if args.plain_uvicorn
              else "`herald web` as the Procfile runs it")
    lines = ["", f"HTTP front door ({time.strftime('%Y-%m-%d %H:%M')}, {server}: "
             f"{processes} processes in all (parent included), PostgreSQL "
             f"+ Redis on this machine, no worker; wrk -t2 -c{args.connections} for health "
             f"and single events, -c{args.bulk_connections} with {args.bulk_size} events "
             f"per bulk request, {args.duration} s each; median of {args.repeat} rounds, "
             "each round in brackets):", "", "| measure | value |", "|---|---|"]
    for name in rounds[0]:
        values = [r[name] for r in rounds]
        digits = 0 if values[0] >= 100 or float(values[0]).is_integer() else 2
        lines.append(f"| {name} | {statistics.median(values):,.{digits}f} "
                     f"({', '.join(f'{v:,.{digits}f}' for v in values)}) |")
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
