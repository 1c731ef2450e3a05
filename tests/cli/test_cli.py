"""The ``herald`` command, run as a real process with its own working directory and env.

Given an environment, when ``herald …`` runs, then its exit code and output say what an
operator needs. In-process tests cover the formatting helpers the commands share.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import redis
from sqlmodel import Session, create_engine, select

from actors.queues import herald_queues
from herald.commands.tools import describe_spec, format_keep, format_span
from herald.embedded_redis import embedded_redis_running, stop_embedded_redis
from herald.queue import DAY, Keep, QueueSpec, Retention
from herald.settings import Settings
from herald.supervisor import exec_form, process_environments
from tests.support.waiting import wait_for

#: Variables that would point a subprocess at some other Redis, broker or database (a
#: command run in a test's directory gets that directory's SQLite file unless told; the
#: suite's shared PostgreSQL holds other tests' rows, which a demo's sweep would repair).
CONNECTION_VARIABLES = ("REDIS_URL", "REDIS_SENTINELS", "REDIS_SENTINEL_NAME", "BROKER",
                        "QUEUE_PREFIX", "DATABASE_URL", "RABBITMQ_URL")
#: Seconds a quick command may take (imports included).
QUICK_S = 60
#: Seconds a demo run may take: past its own deadlines (120 s to drain its jobs, 180 s to
#: settle its notifications), so a demo that fails says why.
DEMO_S = 360


def herald_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m herald.cli``."""
    script = Path(sys.executable).parent / "herald"
    return [str(script)] if script.exists() else [sys.executable, "-m", "herald.cli"]


def herald_env(**overrides: str) -> dict[str, str]:
    """This process's environment without connection variables, plus ``overrides``."""
    # COLUMNS too: a table written to the pipe is PIPE_WIDTH wide unless it is set
    env = {k: v for k, v in os.environ.items()
           if k not in CONNECTION_VARIABLES and k != "COLUMNS"}
    env.update({"PYTHONIOENCODING": "utf-8", "LOG_LEVEL": "WARNING", "NO_COLOR": "1"})
    env.update(overrides)
    return env


def run_herald(*args: str, cwd: Path, env: dict[str, str],
               timeout_s: float = QUICK_S) -> subprocess.CompletedProcess[str]:
    """Run ``herald args…`` to completion; output captured as text."""
    return subprocess.run([*herald_command(), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout_s, check=False)


def flat(output: str) -> str:
    """``output`` on one line, every run of whitespace one space: a sentence the terminal
    wrapped reads whole again."""
    return " ".join(output.split())


def table_rows(output: str) -> dict[str, list[str]]:
    """The rows of a rich table in ``output``: first cell → all cells."""
    rows = {}
    for line in output.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
            rows[cells[0]] = cells
    return rows


def embedded_answers(cwd: Path) -> bool:
    """True when an embedded Redis answers on ``cwd/.herald/redis.sock``."""
    return embedded_redis_running(cwd / ".herald")


@pytest.fixture
def demo_env(redis_url: str) -> dict[str, str]:
    """An environment on the test Redis with a key prefix of its own."""
    return herald_env(REDIS_URL=redis_url, BROKER="redis",
                      QUEUE_PREFIX=f"clitest{uuid.uuid4().hex[:10]}")


# -- herald queues --------------------------------------------------------------------
def test_queues_lists_every_registry_queue_with_its_values(tmp_path: Path) -> None:
    # Given an override of one registry value and no Redis running
    env = herald_env(DISPATCH_ATTEMPTS="4")
    expected = herald_queues(Settings(dispatch_attempts=4))

    # When the registry is listed
    result = run_herald("queues", cwd=tmp_path, env=env)

    # Then every queue appears with its concurrency and attempts, without live counts
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout)
    for spec in expected:
        assert spec.name in rows, f"{spec.name} missing from:\n{result.stdout}"
        cells = rows[spec.name]
        assert cells[1] == describe_spec(spec)["concurrency"], cells
        assert cells[3] == str(spec.attempts), cells
    assert rows["supplier-dispatch"][1:4] == ["4 (sysco 1)", "—", "4"]
    assert rows["notification-email"][2] == "30 / 60s"
    assert "live counts left out" in " ".join(result.stdout.split())
    assert not (tmp_path / ".herald" / "redis.sock").exists(), "queues must not start Redis"
    # and the demo's queue is not one of them: it exists only while `herald demo` runs
    assert "demo" not in rows, result.stdout


def test_invalid_variable_stops_the_command_naming_it(tmp_path: Path) -> None:
    result = run_herald("queues", cwd=tmp_path, env=herald_env(DISPATCH_ATTEMPTS="zero"))

    assert result.returncode != 0
    assert "DISPATCH_ATTEMPTS" in result.stderr
    assert "herald queues" not in result.stdout


def test_sweep_help_names_every_registered_sweep(tmp_path: Path) -> None:
    from actors.queues import registry
    from herald.commands.shared import load_actor_modules

    # Given the sweeps herald's modules declare
    load_actor_modules()
    sweeps = list(registry.sweeps())
    assert "handoffs" in sweeps

    # When a user asks `herald sweep --help`
    result = run_herald("sweep", "--help", cwd=tmp_path, env=herald_env())

    # Then it names each one, one to a line
    assert result.returncode == 0, result.stderr
    listed = {line.strip() for line in result.stdout.splitlines()}
    assert set(sweeps) <= listed, result.stdout


def test_every_subcommand_has_a_description_of_its_own() -> None:
    from herald.cli import build_parser

    # Given every subcommand of herald
    (commands,) = [action for action in build_parser()._actions
                   if isinstance(action, argparse._SubParsersAction)]

    # Then each one's own --help says what it does, beyond its one-line summary
    summaries = {choice.dest: choice.help for choice in commands._choices_actions}
    undescribed = [name for name, command in commands.choices.items()
                   if not command.description or command.description == summaries[name]]
    assert undescribed == []
    assert len(commands.choices) >= 10


def test_a_worker_with_no_queues_named_runs_the_table_but_never_the_demo_queue(
        tmp_path: Path, demo_env: dict[str, str]) -> None:
    # Given a demo job waiting in Redis (as a `herald demo` run would leave one)
    enqueue_demo_job = ("from herald.demo.jobs import DemoJob, crunch\n"
                        "from herald.queue import enqueue\n"
                        "from herald.queue_app import start_queue_app\n"
                        "start_queue_app()\n"
                        "print(enqueue(crunch, DemoJob(n=1), job_id='left-over').status)")
    added = subprocess.run([sys.executable, "-c", enqueue_demo_job], env=demo_env,
                           cwd=tmp_path, capture_output=True, text=True, timeout=QUICK_S)
    assert added.stdout.strip() == "added", added.stderr

    # When a production worker starts with no queues named
    env = {**demo_env, "LOG_LEVEL": "INFO", "LOG_FORMAT": "json", "WORKER_PORT": "0"}
    worker = subprocess.Popen([*herald_command(), "worker"], cwd=tmp_path, env=env,
                              stderr=subprocess.PIPE, text=True)
    try:
        started = None
        assert worker.stderr is not None
        for line in worker.stderr:
            record = json.loads(line) if line.startswith("{") else {}
            if record.get("msg") == "worker started":
                started = record
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=QUICK_S)

    # Then it consumes every queue of the table and not the demo's: the job still waits
    assert started is not None, "the worker never said it started"
    consumed = set(started["queues"].split(","))
    assert consumed == {spec.name for spec in herald_queues(Settings())}
    check = ("from herald.queue import Ledger, LedgerQueries, new_redis_client\n"
             "from herald.queue_app import queue_config\n"
             "from herald.settings import get_settings\n"
             "config = queue_config(get_settings())\n"
             "ledger = Ledger(new_redis_client(config), config.prefix)\n"
             "job = LedgerQueries(ledger).get('demo', 'left-over')\n"
             "print(job.state)")
    state = subprocess.run([sys.executable, "-c", check], env=demo_env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=QUICK_S)
    assert state.stdout.strip() == "waiting", state.stderr


def test_the_procfile_runs_every_queue_that_has_an_actor_and_no_other(tmp_path: Path) -> None:
    # Given the queues herald's actors run on (asked of a fresh process: no test's actors)
    ask = ("from herald.commands.shared import load_actor_modules\n"
           "from actors.queues import registry\n"
           "load_actor_modules()\n"
           "print(' '.join(sorted({a.queue for a in registry.actors().values()})))")
    answer = subprocess.run([sys.executable, "-c", ask], cwd=tmp_path, env=herald_env(),
                            capture_output=True, text=True, timeout=QUICK_S)
    with_actors = answer.stdout.split()
    assert with_actors, answer.stderr

    # When the Procfile's worker lines are read
    procfile = (Path(__file__).parents[2] / "Procfile").read_text().splitlines()
    run = [name for line in procfile if ": herald worker " in line
           for name in line.split(": herald worker ", 1)[1].split()]

    # Then each of those queues is on a line once, and no line runs a queue without one
    assert sorted(run) == with_actors


def test_a_second_worker_on_a_taken_port_says_so_in_one_line(
        tmp_path: Path, demo_env: dict[str, str]) -> None:
    # Given a port some other process (the first worker) is listening on
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]

        # When a worker is started with that WORKER_PORT
        result = run_herald("worker", "notification-email", cwd=tmp_path,
                            env={**demo_env, "WORKER_PORT": str(port)})

    # Then it stops at once with one line naming the port, the variable and the way out
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"port {port} (WORKER_PORT) is already in use" in lines[0]
    assert "WORKER_PORT=0 for any free port" in lines[0]


def test_worker_refuses_an_unknown_queue(tmp_path: Path) -> None:
    result = run_herald("worker", "no-such-queue", cwd=tmp_path, env=herald_env())

    assert result.returncode == 2
    assert "unknown queue 'no-such-queue'" in result.stderr
    # and it lists the queues there are, so the user need not guess
    assert all(spec.name in result.stderr for spec in herald_queues(Settings())), \
        result.stderr


def test_clean_refuses_an_unknown_queue(tmp_path: Path) -> None:
    result = run_herald("clean", "no-such-queue", cwd=tmp_path, env=herald_env())

    assert result.returncode == 2
    assert "unknown queue 'no-such-queue'" in result.stderr


def test_sweep_repairs_a_lost_handoff_and_refuses_an_unknown_sweep(
        tmp_path: Path, database_url: str, redis_url: str) -> None:
    from sqlmodel import Session, create_engine

    from models.notifications import Account, Delivery, Notification

    env = herald_env(DATABASE_URL=database_url, REDIS_URL=redis_url,
                     QUEUE_PREFIX=f"cli{uuid.uuid4().hex[:8]}")
    assert run_herald("migrate", cwd=tmp_path, env=env).returncode == 0
    # Given a delivery persisted but never handed to the queue (a crash in between)
    engine = create_engine(database_url)
    with Session(engine) as session:
        account = Account(email="lost@example.com")
        notification = Notification(account_id=account.id, type="account.welcome",
                                    occurrence=f"lost-{uuid.uuid4()}")
        delivery = Delivery(notification_id=notification.id, channel="email")
        for row in (account, notification, delivery):
            session.add(row)
            session.flush()
        delivery_id = delivery.id
        session.commit()
    # When an operator runs the sweep by hand
    result = run_herald("sweep", "handoffs", cwd=tmp_path, env=env)
    # Then it reports what it re-drove and the delivery carries a fresh handoff stamp
    assert result.returncode == 0, result.stderr
    assert re.search(r"^handoffs: [1-9]\d*$", result.stdout, re.MULTILINE), result.stdout
    with Session(engine) as session:
        assert session.get(Delivery, delivery_id).queued_at is not None
    engine.dispose()
    unknown = run_herald("sweep", "nope", cwd=tmp_path, env=env)
    assert unknown.returncode == 2
    assert ("unknown sweep 'nope' (registered: digests, handoffs, idempotency-keys, "
            "payments, store-recovery, supplier-outbox, supplier-stale-dispatches, "
            "webhook-messages)") in unknown.stderr


def test_clock_runs_until_sigterm(tmp_path: Path, demo_env: dict[str, str]) -> None:
    # Given a running clock process
    env = {**demo_env, "LOG_LEVEL": "INFO"}
    process = subprocess.Popen([*herald_command(), "clock"], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + QUICK_S
        lines = []
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            lines.append(line)
            if "clock started" in line or not line:
                break
        assert "clock started" in "".join(lines), "".join(lines)

        # When it gets SIGTERM
        process.send_signal(signal.SIGTERM)

        # Then it stops cleanly
        assert process.wait(timeout=QUICK_S) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# -- herald up ------------------------------------------------------------------------
#: What an ``herald up`` session of a user runs: the release, the web app, and a worker
#: whose queue has nothing to do with notifications (so the user's sends stay queued).
SESSION_PROCFILE = ("release: herald migrate\nweb: herald web\n"
                    "worker-sync: herald worker package-sync\n")


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclasses.dataclass
class UserSession:
    """What a user's ``herald up`` session left behind, and its output."""

    output: str
    #: The exit code of ``herald up`` itself.
    returncode: int
    #: The queued email and SMS deliveries: id → channel.
    queued: dict[str, str]
    receipt_id: str


def user_session(tmp_path: Path, env: dict[str, str]) -> UserSession:
    """Run ``herald up`` as a user would, use the API through it (events whose email and
    SMS no worker sends, a callback no delivery matches), then stop it with SIGTERM."""
    from providers.mock import signed_callback

    procfile = tmp_path / "Procfile"
    procfile.write_text(SESSION_PROCFILE)
    port = free_port()
    env = {**env, "PORT": str(port), "WORKER_PORT": "0"}
    # its own process group: a failed test kills herald up's children with it
    process = subprocess.Popen([*herald_command(), "up", "--procfile", str(procfile)],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            def answers() -> bool:
                assert process.poll() is None, "herald up ended before its web answered"
                try:
                    return client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    return False
            wait_for(answers, timeout=QUICK_S, every=0.2, what="herald up's web process")
            account = client.post("/v1/accounts", json={
                "email": "amal@example.com", "phone": "+966501234567", "locale": "ar"})
            assert account.status_code == 201, account.text
            account_id = account.json()["id"]
            queued = {}
            for occurrence in ("signup", "again"):
                event = client.post("/v1/events", json={
                    "type": "account.welcome", "account_id": account_id,
                    "occurrence": occurrence})
                assert event.status_code == 202, event.text
                queued.update({d["id"]: d["channel"] for d in event.json()["deliveries"]
                               if d["outcome"] == "queued"})
            body, headers = signed_callback(
                {"provider_message_id": "mock-from-a-manual-test", "channel": "email"})
            receipt = client.post("/v1/callbacks/mock", content=body, headers=headers)
            assert receipt.status_code == 202, receipt.text
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=QUICK_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the session
        process.wait()
    assert len(queued) == 4, queued  # email and SMS of two welcome events
    return UserSession(output=output, returncode=process.returncode, queued=queued,
                       receipt_id=receipt.json()["receipt_id"])


def test_up_stops_every_process_with_0_on_sigterm(tmp_path: Path,
                                                  demo_env: dict[str, str]) -> None:
    # Given a herald up session that served requests; When it gets SIGTERM (Ctrl-C)
    session = user_session(tmp_path, demo_env)

    # Then each process drained and ended with 0 — the web app as well as the others
    stopped = dict(re.findall(r"(\S+) stopped \(rc=(-?\d+)\)", session.output))
    assert stopped == {"release": "0", "web": "0", "worker-sync": "0"}, session.output
    assert "Traceback" not in session.output, session.output
    # And so did herald up itself: a stop asked for and carried out is a success
    assert session.returncode == 0, session.output


def embedded_servers(directory: Path) -> list[int]:
    """The pids of the redis-server processes whose working directory (their ``--dir``,
    the embedded default's ``.herald/``) lies under ``directory``."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            # redis-server retitles itself: "<path>/redis-server unixsocket:<socket>"
            program = (entry / "cmdline").read_bytes().replace(b"\0", b" ").split(b" ")[0]
            where = Path(os.readlink(entry / "cwd"))
        except OSError:  # not a process, or one that has just ended
            continue
        if program.endswith(b"/redis-server") and where.is_relative_to(directory):
            pids.append(int(entry.name))
    return pids


def no_embedded_server_left(directory: Path) -> None:
    """Wait until no embedded redis-server of ``directory`` runs (it saves, then exits)."""
    wait_for(lambda: not embedded_servers(directory), timeout=QUICK_S,
             what=f"the embedded redis-server under {directory} to exit")


@pytest.fixture
def leftover_redis_stopped(tmp_path: Path) -> object:
    """Stops whatever embedded Redis a test's ``herald up`` left in ``tmp_path`` (when it
    failed to, or was meant to) once the test has looked."""
    yield
    stop_embedded_redis(tmp_path / ".herald")


def start_up(tmp_path: Path, procfile: str) -> subprocess.Popen[str]:
    """``herald up`` on the embedded default (no Redis variable), in ``tmp_path``."""
    (tmp_path / "Procfile").write_text(procfile)
    return subprocess.Popen([*herald_command(), "up"], cwd=tmp_path,
                            env=herald_env(WORKER_PORT="0"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_up(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """SIGTERM ``herald up``; its exit code, stdout and stderr once it ended."""
    process.send_signal(signal.SIGTERM)
    output, errors = process.communicate(timeout=QUICK_S)
    return process.returncode, output, errors


@pytest.mark.usefixtures("leftover_redis_stopped")
def test_up_on_the_embedded_default_stops_the_redis_it_started(tmp_path: Path) -> None:
    # Given a herald up session on the embedded default that served requests
    # When it gets SIGTERM
    session = user_session(tmp_path, herald_env())

    # Then it ended as on any Redis: every process with 0, and herald up with 0
    stopped = dict(re.findall(r"(\S+) stopped \(rc=(-?\d+)\)", session.output))
    assert stopped == {"release": "0", "web": "0", "worker-sync": "0"}, session.output
    assert session.returncode == 0, session.output
    # And the embedded Redis it started is gone with it
    no_embedded_server_left(tmp_path)


@pytest.mark.usefixtures("leftover_redis_stopped")
def test_up_stopped_while_the_embedded_redis_starts_leaves_no_redis_running(
        tmp_path: Path) -> None:
    # Given herald up starting on the embedded default
    process = start_up(tmp_path,
                       "release: herald migrate\nworker-sync: herald worker package-sync\n")
    try:
        # When SIGTERM arrives the moment its embedded Redis appears, before any process
        socket_path = tmp_path / ".herald" / "redis.sock"
        wait_for(socket_path.exists, timeout=QUICK_S, every=0.005, what="the embedded Redis")
        returncode, output, errors = stop_up(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    # Then herald up ends as a stopped herald up does — 0 when the stop came before any
    # process ran, 143 when the release was stopped before it could drain (it did not
    # exit 0) — and no redis-server is left behind
    assert returncode in (0, 143), f"{output}\n{errors}"
    assert "Traceback" not in errors, errors
    no_embedded_server_left(tmp_path)


@pytest.mark.usefixtures("leftover_redis_stopped")
def test_up_leaves_running_an_embedded_redis_another_process_uses(tmp_path: Path) -> None:
    # Given herald up running on the embedded default, which it started
    process = start_up(tmp_path, "worker-sync: herald worker package-sync\n")
    other = None
    try:
        wait_for(lambda: embedded_answers(tmp_path), timeout=QUICK_S, what="the embedded Redis")
        # And another process on the same directory using that Redis (a demo in another
        # terminal, say: here this test's own connection)
        other = redis.Redis(unix_socket_path=str(tmp_path / ".herald" / "redis.sock"))
        assert other.set("mine", "still here")

        # When herald up gets SIGTERM
        returncode, output, errors = stop_up(process)

        # Then the other process still has its Redis and its data, and herald up ends as
        # usual, saying it left the Redis running
        assert other.get("mine") == b"still here"
        assert returncode in (0, 143), f"{output}\n{errors}"  # 143: stopped as it started
        assert "left the embedded Redis running" in errors, errors
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if other is not None:
            other.close()


@pytest.mark.usefixtures("leftover_redis_stopped")
def test_up_exits_0_on_sigint_when_every_process_did(tmp_path: Path) -> None:
    # Given herald up serving the web app on the embedded default
    port = free_port()
    (tmp_path / "Procfile").write_text("web: herald web\n")
    process = subprocess.Popen([*herald_command(), "up"], cwd=tmp_path,
                               env=herald_env(PORT=str(port)), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def answers() -> bool:
            assert process.poll() is None, "herald up ended before its web answered"
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            except httpx.TransportError:
                return False
        wait_for(answers, timeout=QUICK_S, every=0.2, what="herald up's web process")
        # When the user presses Ctrl-C (SIGINT)
        process.send_signal(signal.SIGINT)
        output, errors = process.communicate(timeout=QUICK_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    # Then the web app exited 0, and so did herald up (not 130)
    stopped = dict(re.findall(r"(\S+) stopped \(rc=(-?\d+)\)", output))
    assert stopped == {"web": "0"}, f"{output}\n{errors}"
    assert process.returncode == 0, f"{output}\n{errors}"
    no_embedded_server_left(tmp_path)


@pytest.mark.usefixtures("leftover_redis_stopped")
@pytest.mark.parametrize("command", [["clean"], ["retry", "package-sync"]])
def test_a_command_that_starts_the_embedded_redis_stops_it(tmp_path: Path,
                                                            command: list[str]) -> None:
    # Given the embedded default (no Redis variable) and no embedded Redis running
    assert not embedded_servers(tmp_path)

    # When a command that uses Redis runs and ends
    result = run_herald(*command, cwd=tmp_path, env=herald_env())

    # Then it did its work, and no redis-server of its .herald/ survives it
    assert result.returncode == 0, result.stderr
    wait_for(lambda: not embedded_servers(tmp_path), timeout=10,
             what=f"herald {command[0]}'s embedded redis-server to exit")


# -- herald demo ----------------------------------------------------------------------
def test_demo_runs_every_job_to_its_planned_end_twice(tmp_path: Path,
                                                      demo_env: dict[str, str]) -> None:
    for run in (1, 2):
        # When the demo runs (the second time on the queue the first one left behind)
        # (the job phase alone: the other phases have tests of their own)
        result = run_herald("demo", "--purchase-orders", "0", "--failover-events", "0",
                            "--digest-events", "0", "--events", "0", "--orders", "0",
                            "--jobs", "300", cwd=tmp_path, env=demo_env,
                            timeout_s=DEMO_S)

        # Then it exits 0 with the summary table: 300 jobs, 4 of them planned to fail
        assert result.returncode == 0, f"run {run}:\n{result.stdout}\n{result.stderr}"
        assert "jobs by queue × state" in result.stdout
        demo_row = table_rows(result.stdout)["demo"]
        assert demo_row[1:] == ["0", "0", "0", "0", "296", "4"], demo_row
        assert re.search(r"\d[\d,]* jobs/s", result.stdout)
        assert "every job ended as planned" in result.stdout

    # And the queues command, told of the demo's module, shows its queue's live counts
    queues = run_herald("queues", "--import", "herald.demo.jobs", cwd=tmp_path, env=demo_env)
    assert queues.returncode == 0, queues.stderr
    assert "live counts from Redis" in queues.stdout
    header = next(line for line in queues.stdout.splitlines() if "queue" in line
                  and "waiting" in line)
    columns = [cell.strip() for cell in re.split(r"[┃│]", header.strip().strip("┃"))]
    assert table_rows(queues.stdout)["demo"][columns.index("failed")] == "4"

    # And clean applies retention (nothing to prune within the demo's retention)
    clean = run_herald("clean", "--import", "herald.demo.jobs", "demo", cwd=tmp_path,
                       env=demo_env)
    assert clean.returncode == 0, clean.stderr
    assert "demo: removed 0" in clean.stdout

    # And retry runs the 4 failed jobs again: they wait for a worker, none is failed
    retry = run_herald("retry", "--import", "herald.demo.jobs", "demo", cwd=tmp_path,
                       env=demo_env)
    assert retry.returncode == 0, retry.stderr
    assert "demo: retried 4" in retry.stdout
    after = run_herald("queues", "--import", "herald.demo.jobs", cwd=tmp_path, env=demo_env)
    row = table_rows(after.stdout)["demo"]
    assert (row[columns.index("waiting")], row[columns.index("failed")]) == ("4", "0"), row


#: The widest line the demo writes (a terminal of 100 columns, or a pipe).
DEMO_WIDTH = 100


def assert_readable(output: str) -> None:
    """Every line fits :data:`DEMO_WIDTH` columns and nothing is a Python repr, and the
    purchasing phase names every supplier its table lists."""
    wide = [line for line in output.splitlines() if len(line) > DEMO_WIDTH]
    assert wide == [], "\n".join(wide)
    assert "{'" not in output and "Counter(" not in output, output
    phase = output[output.index("purchasing:"):]
    header = " ".join(phase[:phase.index("dispatches submitted")].split())
    for supplier in table_rows(output):
        if supplier.endswith("(demo)"):
            assert supplier.removesuffix(" (demo)") in header, (supplier, header)


def test_demo_on_the_embedded_default(tmp_path: Path) -> None:
    """What ``make demo`` runs: no environment, the embedded Redis (6.2) in ./.herald; then
    a second run on what the first left behind (its queue; its database it removes), with
    the phases whose re-runs add nothing here skipped (tests/demo runs each phase)."""
    second_run_phases = ("--events", "0", "--failover-events", "0", "--orders", "0",
                         "--digest-events", "0")
    for run, phases in (("first", ()), ("second", second_run_phases)):
        result = run_herald("demo", *phases, cwd=tmp_path, env=herald_env(), timeout_s=DEMO_S)

        assert result.returncode == 0, f"{run} run:\n{result.stdout}\n{result.stderr}"
        assert table_rows(result.stdout)["demo"][1:] == ["0", "0", "0", "0", "2958", "42"]
        # three purchase orders reached Sysco's SFTP server and the suppliers' mailboxes,
        # and the line Sysco's 855 back-ordered went to its alternate
        assert ("purchase orders: 3 completed · 850 files on the SFTP server: 3 · supplier "
                "emails: 7 (3 with a PDF) · 855 archived: yes · back-ordered line rerouted: "
                "yes") in flat(result.stdout), result.stdout
        # and the summary reads as sentences and tables that fit 100 columns
        assert_readable(result.stdout)
        # a consumer that blocked past its socket timeout (Redis 6.2 reads a tiny BLPOP
        # timeout as "forever") shows up as a connection error
        assert "connection error" not in result.stderr, result.stderr
        assert not embedded_answers(tmp_path), "the demo must stop the Redis it started"
    # and it left no database behind: its rows (its suppliers among them) lived in its
    # own, removed when it ended; the directory's herald.db was never made
    assert not (tmp_path / "herald.db").exists()
    assert not (tmp_path / ".herald" / "demo").exists()


def test_demo_events_0_skips_the_notification_phase(tmp_path: Path,
                                                   demo_env: dict[str, str]) -> None:
    result = run_herald("demo", "--purchase-orders", "0", "--failover-events", "0",
                        "--digest-events", "0",
                        "--jobs", "20", "--events", "0", "--orders", "0", cwd=tmp_path,
                        env=demo_env, timeout_s=DEMO_S)

    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    assert "every job ended as planned" in result.stdout
    # no notification or order phase: no deliveries or orders table, and not even a
    # database was made
    assert "deliveries by channel" not in result.stdout
    assert "orders by product" not in result.stdout
    assert "sends per stretch" not in result.stdout  # --failover-events 0: nor failover
    assert "digest and webhooks" not in result.stdout  # --digest-events 0: nor digests
    assert not (tmp_path / "herald.db").exists()


@pytest.mark.parametrize(("option", "value", "refusal"), [
    ("--events", "-1", "must be at least 0"),
    ("--jobs", "-1", "must be at least 0"),
    ("--jobs", "100001", "must be at most 100000"),
    ("--batch-size", "0", "must be at least 1"),
    ("--batch-size", "10001", "must be at most 10000"),
])
def test_demo_refuses_counts_out_of_range(tmp_path: Path, option: str, value: str,
                                          refusal: str) -> None:
    result = run_herald("demo", option, value, cwd=tmp_path, env=herald_env())

    assert result.returncode == 2
    assert f"argument {option}: {refusal}" in result.stderr
    assert not (tmp_path / ".herald").exists(), "a refused demo must start nothing"


#: Deliveries one demo run makes with ``--events 40 --batch-size 5``: the event mix
#: (welcome: email, SMS, in-app; receipt: email; eSIM: email, SMS; promo: email, SMS) is
#: 8 deliveries per 4 events, and each of the batch's 5 promo offers is 2 more.
DEMO_40_5_DELIVERIES = 40 // 4 * 8 + 5 * 2


def test_demo_after_a_user_session_counts_and_touches_only_its_own_rows(
        tmp_path: Path, demo_env: dict[str, str], redis_url: str) -> None:
    from herald.queue import Ledger, LedgerQueries
    from models.callbacks import CallbackReceipt
    from models.notifications import Delivery

    # Given what a user's herald up session leaves: email and SMS queued that no worker
    # sent (their jobs waiting in Redis), and a callback receipt no delivery matches
    session = user_session(tmp_path, demo_env)
    engine = create_engine(f"sqlite:///{tmp_path / 'herald.db'}")
    with Session(engine) as db:
        before = {row.id: row.queued_at for row in db.exec(
            select(Delivery).where(Delivery.id.in_(session.queued)))}
        receipt_queued_at = db.get(CallbackReceipt, session.receipt_id).queued_at
    user_prefix = demo_env["QUEUE_PREFIX"]

    for run in (1, 2):
        # When the demo runs (twice)
        result = run_herald("demo", "--purchase-orders", "0", "--failover-events", "0",
                            "--digest-events", "0", "--orders", "0",
                            "--jobs", "20", "--events", "40", "--batch-size", "5",
                            cwd=tmp_path, env=demo_env, timeout_s=DEMO_S)

        # Then it succeeds, and its summary counts its own rows only
        assert result.returncode == 0, f"run {run}:\n{result.stdout}\n{result.stderr}"
        rows = table_rows(result.stdout)
        assert "notification-email" not in rows, "the user's queues are not the demo's"
        table = [int(n) for channel in ("email", "sms", "in_app") for n in rows[channel][1:]]
        assert sum(table) == DEMO_40_5_DELIVERIES, result.stdout
        assert re.search(r"batch \w+: finished, 5 notifications", flat(result.stdout))
        accepted = re.search(r"provider accepted (\d+), deliveries sent or delivered (\d+)",
                             flat(result.stdout))
        posted = re.search(r"callbacks: (\d+) signed receipts posted", flat(result.stdout))
        assert accepted and posted and accepted[1] == accepted[2] == posted[1], result.stdout
        # and every phase of the notifications ran: every delivery final (callbacks made
        # the sent ones delivered), the lost jobs were repaired by the sweep
        for channel in ("email", "sms", "in_app"):
            assert rows[channel][1:4] == ["0", "0", "0"], channel  # queued, sending, sent
        repaired = re.search(r"re-created (\d+) lost jobs \((\d+) lost\)", flat(result.stdout))
        assert repaired and int(repaired[2]) > 0 and int(repaired[1]) >= int(repaired[2])
        assert "every delivery is final, every lost job was repaired" in flat(result.stdout)

    # And the user's deliveries are as the session left them: queued, never handed off
    # again, never sent, their jobs still waiting in the user's queues
    with Session(engine) as db:
        user_rows = db.exec(select(Delivery).where(Delivery.id.in_(session.queued))).all()
        assert {row.id: (row.outcome, row.attempts, row.queued_at) for row in user_rows} == {
            id_: ("queued", 0, queued_at) for id_, queued_at in before.items()}
        receipt = db.get(CallbackReceipt, session.receipt_id)
        assert (receipt.processed_at, receipt.queued_at) == (None, receipt_queued_at)
    engine.dispose()
    client = redis.Redis.from_url(redis_url)
    ledger = LedgerQueries(Ledger(client, user_prefix))
    channel_queue = {"email": "notification-email", "sms": "notification-sms"}
    for delivery_id, channel in session.queued.items():
        job = ledger.get(channel_queue[channel], delivery_id)
        assert job is not None and job.state == "waiting", (delivery_id, job)
    sent_for = {json.loads(raw)["idempotency_key"] for key in client.scan_iter("*:mock:sends")
                for raw in client.lrange(key, 0, -1)}
    assert sent_for.isdisjoint(session.queued)
    client.close()


# -- helpers the commands share -------------------------------------------------------
def test_spans_and_retention_read_like_the_spec() -> None:
    assert format_span(timedelta(seconds=60)) == "60s"
    assert format_span(7 * DAY) == "7d"
    assert format_span(timedelta(hours=1)) == "1h"
    assert format_span(timedelta(milliseconds=200)) == "200ms"
    assert format_keep(Keep(count=5000, age=7 * DAY)) == "7d or 5000"
    assert format_keep(Keep(remove=True)) == "removed"
    assert format_keep(Keep()) == "kept"


def test_describe_spec_columns() -> None:
    spec = QueueSpec(name="thumbnails", concurrency=2, rate_limit=(10, timedelta(seconds=60)),
                     backoff_base=timedelta(seconds=5),
                     retention=Retention(completed=Keep(count=500),
                                         failed=Keep(count=5000, age=7 * DAY)))
    described = describe_spec(spec)
    assert described["rate limit"] == "10 / 60s"
    assert described["backoff"] == "exp 5s"
    assert described["retention"] == "completed 500 · failed 7d or 5000"
    assert described["lock"] == "30s"
    assert describe_spec(QueueSpec(name="plain"))["rate limit"] == "—"
    assert describe_spec(QueueSpec(name="plain"))["concurrency"] == "1"
    grouped = QueueSpec(name="orders", concurrency=4, group_limits={"sysco": 1, "acme": 2},
                        default_group_limit=3)
    assert describe_spec(grouped)["concurrency"] == "4 (acme 2, sysco 1, others 3)"


def test_up_gives_each_worker_its_own_port() -> None:
    names = ["release", "web", "worker-a", "worker-b", "clock"]
    envs = process_environments(names, Settings(worker_port=4000, port=8100), base={})

    assert [envs[n].get("WORKER_PORT") for n in names] == [None, None, "4000", "4001", None]
    assert envs["web"]["PORT"] == "8100"
    assert envs["clock"]["PATH"].startswith(str(Path(sys.executable).parent))
    # WORKER_PORT=0 (any free port) stays 0 for every worker, never 1, 2 …
    any_port = process_environments(names, Settings(worker_port=0), base={})
    assert [any_port[n].get("WORKER_PORT") for n in names] == [None, None, "0", "0", None]


def test_up_execs_simple_commands_only() -> None:
    assert exec_form("herald worker payment") == "exec herald worker payment"
    assert exec_form("herald migrate && herald web") == "herald migrate && herald web"
