"""How long a herald process takes to be ready, beside ``import dramatiq`` and plain
Dramatiq's own worker on the same machine.

``python -m bench.startup [--repeat R] [--baseline DIR] [--no-web]``. Uses ``$DATABASE_URL`` /
``$REDIS_URL`` or starts private servers (as :mod:`bench.e2e` does) and migrates the
database. Each of ``--repeat`` rounds (default 5) measures the machine
(``bench.machine``), then every arm once, the arms' order alternating from round to
round so that the machine's drift falls on each alike (one untimed run of each arm comes
first: a tree's first start writes its bytecode):

- ``python -c pass`` and ``python -c 'import dramatiq'``: exec → exit;
- plain Dramatiq's CLI (``python -m dramatiq`` on a module of one actor, one process,
  one thread, on the same Redis): exec → its ``Worker process is ready`` line;
- ``herald worker notification-email`` and ``herald worker`` (every queue): exec → the
  ``worker started`` log line;
- ``herald web``: exec → the first ``/healthz`` that answers 200 (left out with
  ``--no-web``: each of its runs takes seconds, the workers' a second).

Each run is timed on the wall clock and in CPU (user + system of the process and its
children, at the moment it is ready): on these shared 2-core machines the wall clock
moves with the neighbours' load, the CPU much less.

``--baseline DIR`` adds herald's arms again with the code of DIR (a checkout from before,
``git archive <commit> | tar -x -C DIR``), each process run with ``PYTHONPATH=DIR``.
The medians are reported with every run and their ratio to ``import dramatiq``'s.
Appends to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench import machine, publish
from bench.e2e import REPO, _services, tree_cpu_s

#: How long one start may take before the run is given up.
START_TIMEOUT_S = 60.0
#: How often ``herald web``'s ``/healthz`` is asked while it starts.
POLL_S = 0.005
#: The log line of a herald worker that has started its queues.
HERALD_READY = "worker started"
#: The line each of plain Dramatiq's worker processes logs once it consumes.
DRAMATIQ_READY = "Worker process is ready"
#: A Dramatiq application of one actor, on the Redis of ``REDIS_URL``.
DRAMATIQ_APP = '''\
import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["REDIS_URL"]))


@dramatiq.actor
def noop():
    pass
'''

#: An arm: what it measures, given its environment: seconds from exec to ready, on the
#: wall clock and in CPU.
Arm = Callable[[dict[str, str]], tuple[float, float]]


def _exit_time(*argv: str) -> Arm:
    """exec → exit of ``python argv…``."""
    def run(env: dict[str, str]) -> tuple[float, float]:
        cpu = _children_cpu_s()
        started = time.perf_counter()
        subprocess.run([sys.executable, *argv], env=env, check=True)
        return time.perf_counter() - started, _children_cpu_s() - cpu
    return run


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _line_time(argv: list[str], marker: str, cwd: Path) -> Arm:
    """exec → the first line of stderr containing ``marker`` (run in ``cwd``: ``python
    -m`` puts it first on the path); then SIGTERM to the process group, and a wait for it
    to end."""
    def run(env: dict[str, str]) -> tuple[float, float]:
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert process.stderr is not None
            seen = []
            for line in process.stderr:
                if marker in line:
                    return time.perf_counter() - started, tree_cpu_s(process.pid)
                seen.append(line)
                if time.perf_counter() - started > START_TIMEOUT_S:
                    break
            raise RuntimeError(f"{' '.join(argv)}: no {marker!r} line:\n{''.join(seen[-20:])}")
        finally:
            _stop(process)
    return run


def _healthz_time(tree: Path) -> Arm:
    """exec → the first 200 of ``herald web``'s ``/healthz`` (run in ``tree``)."""
    def run(env: dict[str, str]) -> tuple[float, float]:
        port = _free_port()
        argv = [sys.executable, "-m", "herald.cli", "web", "--host", "127.0.0.1", "--port",
                str(port)]
        started = time.perf_counter()
        process = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while time.perf_counter() - started < START_TIMEOUT_S:
                if process.poll() is not None:
                    raise RuntimeError(f"herald web exited {process.returncode}")
                if _healthz_ok(port):
                    return time.perf_counter() - started, tree_cpu_s(process.pid)
                time.sleep(POLL_S)
            raise RuntimeError("herald web: no 200 from /healthz")
        finally:
            _stop(process)
    return run


def _healthz_ok(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def _free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def _stop(process: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process's group (plain Dramatiq's workers are its children), then
    SIGKILL past 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    if process.stderr is not None:
        process.stderr.close()


def _herald_arms(tree: Path, label: str, *, web: bool = True) -> list[tuple[str, Arm, Path]]:
    """herald's arms, run with the code of ``tree`` (their working directory); ``herald
    web``'s only when ``web``."""
    herald = [sys.executable, "-m", "herald.cli"]
    suffix = f", {label}" if label else ""
    arms: list[tuple[str, Arm, Path]] = [
        (f"herald worker notification-email{suffix}",
         _line_time([*herald, "worker", "notification-email"], HERALD_READY, tree), tree),
        (f"herald worker (every queue){suffix}",
         _line_time([*herald, "worker"], HERALD_READY, tree), tree),
    ]
    if web:
        arms.append((f"herald web, to the first /healthz 200{suffix}", _healthz_time(tree),
                     tree))
    return arms


def _migrate(env: dict[str, str], tree: Path) -> None:
    subprocess.run([sys.executable, "-m", "herald.cli", "migrate"], cwd=tree, check=True,
                   env={**env, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--baseline", type=Path,
                        help="a source tree of herald from before: its arms too")
    parser.add_argument("--no-web", dest="web", action="store_false",
                        help="leave out herald web (the workers' arms only)")
    args = parser.parse_args()
    env, started = _services()
    os.environ.update(env)
    # a process that may not write its bytecode compiles herald's modules at every start,
    # as no deployed one does
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    base_env = {**environ, "WORKER_PORT": "0", "LOG_LEVEL": "INFO", "NO_COLOR": "1",
                "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock", "PUSH_PROVIDER": "mock",
                "QUEUE_PREFIX": f"startup{uuid.uuid4().hex[:6]}"}
    app_dir = Path(tempfile.mkdtemp(prefix="herald-bench-startup-"))
    (app_dir / "startup_app.py").write_text(DRAMATIQ_APP)
    arms: list[tuple[str, Arm, Path]] = [
        ("python -c pass", _exit_time("-c", "pass"), REPO),
        ("python -c 'import dramatiq'", _exit_time("-c", "import dramatiq"), REPO),
        ("plain Dramatiq CLI, 1 process × 1 thread, to its ready line",
         _line_time([sys.executable, "-m", "dramatiq", "startup_app", "--processes", "1",
                     "--threads", "1"], DRAMATIQ_READY, cwd=app_dir), app_dir),
        *_herald_arms(REPO, "", web=args.web),
    ]
    if args.baseline is not None:
        arms += _herald_arms(args.baseline.resolve(), f"before ({args.baseline.name})",
                             web=args.web)
    times: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in arms}
    speeds: list[dict[str, float | None]] = []
    try:
        for tree in {tree for _, _, tree in arms if tree != app_dir}:
            _migrate(base_env, tree)
        for _, arm, tree in arms:
            arm({**base_env, "PYTHONPATH": str(tree)})
        for round_ in range(args.repeat):
            speeds.append(machine.measure(os.environ["DATABASE_URL"], os.environ["REDIS_URL"]))
            order = arms if round_ % 2 == 0 else arms[::-1]
            for name, arm, tree in order:
                wall_s, cpu_s = arm({**base_env, "PYTHONPATH": str(tree)})
                times[name].append(wall_s)
                cpus[name].append(cpu_s)
    finally:
        for service in started:
            service.stop()
    median = statistics.median
    reference = "python -c 'import dramatiq'"
    wall_ref, cpu_ref = median(times[reference]), median(cpus[reference])
    lines = ["", f"Start-up ({time.strftime('%Y-%m-%d %H:%M')}, PostgreSQL + Redis, mock "
             f"providers; exec → ready in ms, median of {args.repeat} rounds, each run in "
             "brackets; × is the median's ratio to `import dramatiq`'s):", "",
             "| process | wall ms | × | CPU ms | × |", "|---|---|---|---|---|"]
    for name, values in times.items():
        each = ", ".join(f"{1000 * value:,.0f}" for value in values)
        spent = ", ".join(f"{1000 * value:,.0f}" for value in cpus[name])
        lines.append(f"| {name} | {1000 * median(values):,.0f} ({each}) | "
                     f"{median(values) / wall_ref:.1f} | {1000 * median(cpus[name]):,.0f} "
                     f"({spent}) | {median(cpus[name]) / cpu_ref:.1f} |")
    lines += machine.table(speeds)
    publish(lines)


if __name__ == "__main__":
    main()
