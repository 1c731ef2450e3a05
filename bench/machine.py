"""How fast this machine is right now, beside the reference figures of this project's
machines.

The same code measures very differently from one hour to the next on these shared
2-core machines (end to end: from ~345 to ~650 deliveries/s), so every end-to-end run
also records the speeds it depends on: PostgreSQL single-row insert transactions/s and
Redis unpipelined ops/s (both have a reference figure, :data:`REFERENCE`), and the CPU time
of a fixed piece of pure Python (no reference figure; comparable between runs here).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
import uuid
from urllib.parse import urlsplit

#: Reference figures measured on this project's 2-core machines.
REFERENCE = {"postgres_inserts_per_s": 5_600, "redis_ops_per_s": 65_000}


def postgres_inserts_per_s(url: str, rows: int = 5_000) -> float:
    """Single-row INSERT transactions per second on one connection (autocommit)."""
    import psycopg

    # a table of its own (never one of the database's): logged, as the reference's were
    table = f"bench_machine_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"),
                         autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, value text)")
        try:
            started = time.perf_counter()
            for _ in range(rows):
                connection.execute(f"INSERT INTO {table} (value) VALUES (%s)", ("x",),
                                   prepare=True)
            return rows / (time.perf_counter() - started)
        finally:
            connection.execute(f"DROP TABLE {table}")


def redis_ops_per_s(url: str, requests: int = 100_000) -> float | None:
    """``redis-benchmark``'s GET rate (50 clients, no pipelining); None when the tool is
    missing or the server is not a plain TCP one."""
    parts = urlsplit(url)
    tool = shutil.which("redis-benchmark")
    if tool is None or parts.scheme != "redis" or not parts.port:
        return None
    command = [tool, "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port), "-t", "get",
               "-n", str(requests), "--csv"]
    if parts.password:
        command += ["-a", parts.password]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
    for line in out.splitlines():
        fields = [field.strip('"') for field in line.split(",")]
        if fields[0] == "GET":
            return float(fields[1])
    return None


def python_ms(rounds: int = 3) -> float:
    """CPU ms of a fixed pure-Python workload (JSON, dicts, strings), best of ``rounds``."""
    record = {"id": "0" * 36, "channel": "email", "data": {"plan": "10 GB", "days": 30},
              "attempts": 1, "tags": ["a", "b", "c"]}
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for n in range(20_000):
            text = json.dumps({**record, "n": n})
            parsed = json.loads(text)
            "-".join(str(value) for value in parsed.values()).upper()
        best = min(best, time.process_time() - started)
    return 1000 * best


#: What :func:`measure` records, as the results table names it.
LABELS = {
    "postgres_inserts_per_s": "PostgreSQL single-row insert transactions/s (reference "
                              f"~{REFERENCE['postgres_inserts_per_s']:,})",
    "redis_ops_per_s": f"Redis GET ops/s, redis-benchmark (reference "
                       f"~{REFERENCE['redis_ops_per_s']:,})",
    "python_ms": "CPU ms of the fixed pure-Python workload (lower is faster)",
}


def measure(database_url: str, redis_url: str) -> dict[str, float | None]:
    """The machine's speeds now (None: not measurable here)."""
    return {"postgres_inserts_per_s": postgres_inserts_per_s(database_url),
            "redis_ops_per_s": redis_ops_per_s(redis_url),
            "python_ms": python_ms()}


def table(rounds: list[dict[str, float | None]]) -> list[str]:
    """Markdown table rows: each speed's median over ``rounds``, each round in brackets."""
    rows = []
    for key, label in LABELS.items():
        values = [speeds[key] for speeds in rounds if speeds[key] is not None]
        if not values:
            rows.append(f"| machine: {label} | not measured |")
            continue
        each = ", ".join(f"{value:,.0f}" for value in values)
        rows.append(f"| machine: {label} | {statistics.median(values):,.0f} ({each}) |")
    return rows
