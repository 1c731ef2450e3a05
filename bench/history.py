"""The cost per job of the throughput history (completed/failed per queue and minute).

``python -m bench.history [--jobs 20000] [--repeat 3]``: the noop-job run of
``bench.run`` (one worker process × 8 threads, the Redis broker, ``$REDIS_URL`` or a
private redis-server), once with the cycle script counting the history and once without,
alternately, each round. "Without" is the same script with its counting helper replaced
by a no-op in the worker process only (nothing in herald can switch the counting off).
Per run it reads jobs processed/s, and from Redis itself (INFO) the server CPU and the
time spent in scripts per job while the jobs ran; it checks that the counting run counted
every job and the other none. Prints the medians, the machine's speed (Redis GET ops/s
and a fixed pure-Python workload, ``bench.machine``), and appends them to
``bench/results.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
from typing import Any

from bench import publish
from bench.machine import python_ms, redis_ops_per_s
from bench.run import THREADS, _herald_setup, _herald_worker, _redis_url
from herald.queue import current_app

QUEUE = "bench-herald"


def _source_without_counting(name: str) -> str:
    """A script's source with the history counting off: a no-op ``count_throughput``
    declared after the shared helpers shadows theirs."""
    from herald.queue.ledger import LUA_DIR

    noop = "\nlocal function count_throughput() end\n" if name == "cycle" else "\n"
    return (LUA_DIR / "common.lua").read_text() + noop + (LUA_DIR / f"{name}.lua").read_text()


def _without_counting() -> None:
    """Make the ledgers this process creates from now on run the cycle script without
    the history counting."""
    from herald.queue import ledger

    ledger._source = _source_without_counting  # type: ignore[assignment]


def _worker(url: str, prefix: str, counting: bool) -> None:
    if not counting:
        _without_counting()
    _herald_worker(url, prefix, 600)


def _server(client: Any) -> tuple[float, float]:
    """Redis's CPU seconds so far, and µs spent in EVALSHA so far."""
    cpu = client.info("cpu")
    scripts = client.info("commandstats").get("cmdstat_evalsha", {"usec": 0})
    return cpu["used_cpu_user"] + cpu["used_cpu_sys"], float(scripts["usec"])


def run_once(url: str, jobs: int, counting: bool) -> dict[str, float]:
    """Process ``jobs`` noop jobs with one worker process; rate and Redis cost per job."""
    import logging

    import redis

    prefix = f"hist{os.getpid()}{'on' if counting else 'off'}"
    noop = _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.queue import enqueue_many, queue

    client = redis.Redis.from_url(url)
    client.flushall()
    enqueue_many(noop, [{"n": i} for i in range(jobs)])
    q = queue(QUEUE)
    cpu_before, script_before = _server(client)
    started = time.perf_counter()
    worker = multiprocessing.Process(target=_worker, args=(url, prefix, counting))
    worker.start()
    while sum(q.counts()[state] for state in ("waiting", "active")) > 0:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    cpu_after, script_after = _server(client)
    worker.terminate()
    worker.join()
    counted = sum(completed for _, completed, _ in q.history())
    if counted != (jobs if counting else 0):
        raise RuntimeError(f"history counted {counted} of {jobs} jobs (counting={counting})")
    return {"processed/s": jobs / elapsed,
            "Redis CPU µs per job": (cpu_after - cpu_before) * 1e6 / jobs,
            "script µs per job (EVALSHA)": (script_after - script_before) / jobs}


def script_once(url: str, jobs: int, counting: bool) -> dict[str, float]:
    """The cycle script alone, no worker: this process fetches 8 jobs per call and reports
    the previous 8 completed in the same call (a busy consumer's round trip); Redis's time
    in the script per job."""
    import logging

    import redis

    prefix = f"hist{os.getpid()}script{'on' if counting else 'off'}"
    noop = _herald_setup(url, prefix)
    logging.disable(logging.INFO)
    from herald.queue import enqueue_many, get_spec

    client = redis.Redis.from_url(url)
    client.flushall()
    enqueue_many(noop, [{"n": i} for i in range(jobs)])
    ledger, spec = current_app().ledger, get_spec(QUEUE)
    if not counting:
        ledger._scripts["cycle"] = client.register_script(_source_without_counting("cycle"))
    config = ledger.cycle_config(spec)
    _, script_before = _server(client)
    done: list[tuple[str, str]] = []
    while True:
        _, started, *_ = ledger.cycle_raw(spec, config, done=done, fetch=THREADS)
        if not started and not done:
            break
        done = [(row[0], row[3]) for row in started]
    _, script_after = _server(client)
    return {"cycle script alone, µs per job (EVALSHA)": (script_after - script_before) / jobs}


def helper_once(url: str, calls: int = 100_000) -> dict[str, float]:
    """The counting helper alone: one script call runs it ``calls`` times on one minute's
    key (as every call but the minute's first does: no expiry to set), less the same
    loop without it; µs per call, which a cycle call pays once however many jobs it
    finishes."""
    import redis

    from herald.queue.ledger import LUA_DIR

    client = redis.Redis.from_url(url)
    loop = ("local n, now = tonumber(ARGV[1]), tonumber(ARGV[2])\n"
            "for i = 1, n do {body} end\nreturn n\n")
    common = (LUA_DIR / "common.lua").read_text() + "\n"
    timed = {}
    for name, body in (("with", 'count_throughput("hist:{bench}:", now, 8, 0)'),
                       ("without", 'local key = "hist:{bench}:" .. i')):
        script = client.register_script(common + loop.format(body=body))
        script(args=[1, 0])  # loaded and its key created before the clock starts
        started = time.perf_counter()
        script(args=[calls, 0])
        timed[name] = time.perf_counter() - started
    client.delete("hist:{bench}:tp:0")
    return {"counting helper alone, µs per cycle call": (timed["with"] - timed["without"])
            * 1e6 / calls}


def _median_and_rounds(values: list[float]) -> tuple[float, str]:
    median = statistics.median(values)
    return median, f"{median:,.1f} ({', '.join(f'{v:,.1f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    multiprocessing.set_start_method("fork")
    url, stop = _redis_url()
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    machine: list[tuple[float | None, float]] = []
    helper: list[float] = []
    try:
        for n in range(args.repeat):
            machine.append((redis_ops_per_s(url), python_ms()))
            # alternate which goes first: the machine's speed drifts within a round too
            for counting in ((True, False) if n % 2 == 0 else (False, True)):
                runs[counting].append({**run_once(url, args.jobs, counting),
                                       **script_once(url, args.jobs, counting)})
            helper.append(helper_once(url)["counting helper alone, µs per cycle call"])
    finally:
        stop()
    lines = [f"bench.history: median of {args.repeat}, {args.jobs} noop jobs, 1 process × "
             f"{THREADS} threads, Redis broker, {os.cpu_count()} cores, "
             f"{time.strftime('%Y-%m-%d %H:%M')}.", "",
             "| measure | counting on (each round) | counting off (each round) | on − off |",
             "|---|---|---|---|"]
    for measure in runs[True][0]:
        on, off = (_median_and_rounds([r[measure] for r in runs[c]]) for c in (True, False))
        lines.append(f"| {measure} | {on[1]} | {off[1]} | {on[0] - off[0]:+,.1f} |")
    lines.append("| counting helper alone, µs per cycle call (a call finishes up to "
                 f"{THREADS} jobs here) | {_median_and_rounds(helper)[1]} | | |")
    ops = [m[0] for m in machine if m[0] is not None]
    lines.append("| machine: Redis GET ops/s, redis-benchmark (reference ~65,000) | "
                 + (f"{statistics.median(ops):,.0f}" if ops else "not measured") + " | | |")
    lines.append("| machine: CPU ms of the fixed pure-Python workload (lower is faster) | "
                 f"{statistics.median(m[1] for m in machine):,.0f} | | |")
    publish(["", *lines])


if __name__ == "__main__":
    main()
