"""Linux network namespaces of the test's own, each joined to this host by veth pairs on
private /30s (10.200.x.y), removed on exit (even when the test fails).

- :func:`foreign_host`: a client that is not on loopback (one namespace, one link).
- :func:`worker_hosts`: worker "hosts" for the partition tests (docs/failure-modes.md).
  Each runs ``herald`` processes in its own namespace and reaches the test's servers
  through a relay on its own link, so :meth:`WorkerHost.cut` (``ip link set … down``)
  takes one host off the network while it stays alive, and :meth:`WorkerHost.restore`
  brings it back with its connections and unfinished work. A second link, never cut,
  leads to the provider (the mocks' store), as a provider on the internet stays
  reachable from a host whose datacenter link failed.

The test servers listen on 127.0.0.1 only (tests/support/services.py); the relays (one
asyncio thread in the test process) listen on two addresses this host adds to its
loopback, one routed from every namespace over its link, the other over its uplink, and
forward to the servers. So the servers need no other address, every host reaches a
server at the same address (a supplier's SFTP server stored in a row works too,
:meth:`Network.reach`), and a cut link drops that host's packets as a failed link would:
no reset, the connections just stop answering.

Needs root and iproute2's ``ip``; :func:`unavailable` says why when they are missing, so a
test can skip with that reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


def unavailable() -> str | None:
    """Why a namespace cannot be made here (not root, no ``ip``), or None when it can."""
    if os.geteuid() != 0:
        return "making a network namespace needs root"
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    return None


#: The repository's root, importable from inside the namespace.
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def http_request(url: str, method: str = "GET", body: object = None,
                 token: str | None = None) -> tuple[int, object]:
    """One JSON request: its status (0 when nothing answered) and JSON body (``{}`` when
    the body is not JSON)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers,
                                                           method=method),
                                    timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError:
        return 0, {}
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, {}


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass(frozen=True)
class ForeignHost:
    """The namespace: its name, and this host's address as the namespace reaches it."""

    name: str
    host_address: str

    def request(self, url: str, method: str = "GET", body: object = None,
                token: str | None = None) -> tuple[int, object]:
        """:func:`http_request` sent from inside the namespace."""
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from tests.support.netns import http_request; "
                "print(json.dumps(http_request(*json.loads(sys.argv[2]))))")
        done = subprocess.run(["ip", "netns", "exec", self.name, sys.executable, "-c", code,
                               _REPO, json.dumps([url, method, body, token])],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        status, answer = json.loads(done.stdout)
        return int(status), answer


def _subnet() -> tuple[str, str]:
    """A random /30 inside 10.200.0.0/16: this host's address and the namespace's."""
    base = random.randrange(0, 256 * 64) * 4
    third, fourth = divmod(base, 256)
    return f"10.200.{third}.{fourth + 1}", f"10.200.{third}.{fourth + 2}"


def _tag() -> str:
    """A short name part unique to this process's namespaces and links (links' names are
    at most 15 characters)."""
    return f"{os.getpid() % 100_000}{random.randrange(1000)}"


@dataclass(frozen=True)
class _Link:
    """One veth pair: its end on this host (the one a cut takes down) and both addresses."""

    host_end: str
    host_address: str
    ns_address: str


@contextmanager
def _namespace(name: str) -> Iterator[None]:
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "set", "lo", "up")
        yield
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@contextmanager
def _link(namespace: str, host_end: str, ns_end: str) -> Iterator[_Link]:
    """A veth pair from this host into ``namespace`` on a /30 of its own, deleted on exit."""
    host_address, ns_address = _subnet()
    _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
    try:
        _ip("link", "set", ns_end, "netns", namespace)
        _ip("addr", "add", f"{host_address}/30", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("-n", namespace, "addr", "add", f"{ns_address}/30", "dev", ns_end)
        _ip("-n", namespace, "link", "set", ns_end, "up")
        yield _Link(host_end=host_end, host_address=host_address, ns_address=ns_address)
    finally:
        # deleting one end deletes its peer, wherever it lives
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)


@contextmanager
def foreign_host() -> Iterator[ForeignHost]:
    """A namespace whose one route leads to this host over a veth pair: this host is
    ``10.200.a.b+1``, the namespace ``10.200.a.b+2`` (a /30 nothing else uses)."""
    tag = _tag()
    name = f"herald-t{tag}"
    with _namespace(name), _link(name, f"hvh{tag}", f"hvn{tag}") as link:
        yield ForeignHost(name=name, host_address=link.host_address)


# --------------------------------------------------------------------------- relays


class Relays:
    """TCP relays on one asyncio loop (a thread of the test process): each listens on an
    address of this host and forwards every connection to a server on loopback."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netns-relays",
                                        daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread.start()

    def add(self, listen_host: str, target: tuple[str, int]) -> int:
        """Relay connections to ``listen_host`` (on a port chosen now) to ``target``;
        returns the port."""
        async def start() -> int:
            server = await asyncio.start_server(
                lambda reader, writer: self._connect(reader, writer, target), listen_host, 0)
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        return asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       target: tuple[str, int]) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, upstream_writer}
        await asyncio.gather(self._pipe(reader, upstream_writer),
                             self._pipe(upstream_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def close(self) -> None:
        """Stop listening, close every relayed connection, end the thread."""
        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.close()

        if self._loop.is_running():
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


def _relayed(url: str, relays: Relays, listen_host: str) -> str:
    """``url`` with its host and port replaced by a relay to them on ``listen_host``."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None and parts.port is not None, url
    port = relays.add(listen_host, (parts.hostname, parts.port))
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{listen_host}:{port}" if userinfo else f"{listen_host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


# --------------------------------------------------------------------------- worker hosts


@dataclass
class WorkerHost:
    """One worker "host": a namespace whose ``link`` leads to herald's servers (the one a
    partition cuts) and whose ``uplink`` leads to the provider; ``env`` the server URLs
    as the hosts reach them."""

    name: str
    link: _Link
    uplink: _Link
    env: dict[str, str]
    log_dir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn_herald(self, *args: str, label: str,
                     env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """``herald ARGS…`` inside the namespace, with the test's environment, this host's
        server URLs and ``env``, any free health port, INFO logging to ``log(label)``."""
        variables = {**os.environ, **self.env, "WORKER_PORT": "0", "LOG_LEVEL": "INFO",
                     "PYTHONUNBUFFERED": "1", **(env or {})}
        with self.log(label).open("ab") as out:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.name, sys.executable, "-m", "herald.cli", *args],
                cwd=_REPO, env=variables, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)
        self.processes.append(process)
        return process

    def log(self, label: str) -> Path:
        """Where the process ``label`` of this host writes its output."""
        return self.log_dir / f"{self.name}-{label}.log"

    def log_lines(self, label: str, text: str) -> int:
        """How many lines of process ``label``'s output contain ``text``."""
        path = self.log(label)
        if not path.exists():
            return 0
        return sum(text in line for line in path.read_text(errors="replace").splitlines())

    def cut(self) -> None:
        """Take the host off the network: its link to the servers goes down (packets are
        dropped, no connection is reset); the host and its processes go on."""
        _ip("link", "set", self.link.host_end, "down")

    def restore(self) -> None:
        """Bring the link back up: the host's connections resume where they stopped."""
        _ip("link", "set", self.link.host_end, "up")

    def stop(self) -> None:
        """Kill every process started on this host and reap it."""
        for process in self.processes:
            process.kill()
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


@dataclass(frozen=True)
class Network:
    """The worker hosts, and the two addresses of this host they reach: ``servers`` over
    each host's link (the one a cut takes down), ``provider`` over each one's uplink."""

    hosts: list[WorkerHost]
    servers: str
    provider: str
    relays: Relays

    def reach(self, address: tuple[str, int]) -> tuple[str, int]:
        """An address (on loopback) as every host reaches it over its link: a relay on
        :attr:`servers`, e.g. a supplier's SFTP server, cut off with the rest."""
        return self.servers, self.relays.add(self.servers, address)


@contextmanager
def _service_addresses() -> Iterator[tuple[str, str]]:
    """Two addresses of this host (a /32 each on its loopback, inside 10.201.0.0/16) for
    the relays every worker host reaches; removed on exit."""
    third, fourth = random.randrange(256), random.randrange(1, 253)
    addresses = (f"10.201.{third}.{fourth}", f"10.201.{third}.{fourth + 1}")
    added: list[str] = []
    try:
        for address in addresses:
            _ip("addr", "add", f"{address}/32", "dev", "lo", "label", f"lo:hp{os.getpid()}")
            added.append(address)
        yield addresses
    finally:
        for address in added:
            subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"],
                           capture_output=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_leftovers() -> None:
    """Remove what a test process killed before its clean-up (SIGKILL, a CI timeout) left:
    the worker hosts' namespaces (their processes killed, their links deleted) and the
    relays' addresses, each named after the process that made it."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            timeout=30).stdout
    for match in re.finditer(r"^herald-w(\d+)-(\w+)", listed, re.MULTILINE):
        if _alive(int(match[1])):
            continue
        pids = subprocess.run(["ip", "netns", "pids", match[0]], capture_output=True,
                              text=True, timeout=30).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        for end in ("hwl", "hwu"):
            subprocess.run(["ip", "link", "del", f"{end}{match[2]}"], capture_output=True,
                           timeout=30)
        subprocess.run(["ip", "netns", "del", match[0]], capture_output=True, timeout=30)
    addresses = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", "lo"],
                               capture_output=True, text=True, timeout=30).stdout
    for match in re.finditer(r"inet (\S+) .*lo:hp(\d+)", addresses):
        if not _alive(int(match[2])):
            subprocess.run(["ip", "addr", "del", match[1], "dev", "lo"], capture_output=True,
                           timeout=30)


@contextmanager
def worker_hosts(count: int, servers: Mapping[str, str], provider: Mapping[str, str],
                 log_dir: Path) -> Iterator[Network]:
    """``count`` worker hosts; each reaches the URLs of ``servers`` (variable → URL, on
    loopback) over its link and those of ``provider`` over its uplink, through relays on
    two addresses of this host (the same URLs for every host). On exit every process
    started on a host is killed, and the relays, links and namespaces are gone."""
    _remove_leftovers()
    tag = secrets.token_hex(3)
    with contextlib.ExitStack() as stack:
        servers_address, provider_address = stack.enter_context(_service_addresses())
        relays = Relays()
        stack.callback(relays.close)
        env = {var: _relayed(url, relays, servers_address) for var, url in servers.items()}
        env |= {var: _relayed(url, relays, provider_address)
                for var, url in provider.items()}
        hosts: list[WorkerHost] = []
        for number in range(count):
            name = f"herald-w{os.getpid()}-{tag}{number}"
            stack.enter_context(_namespace(name))
            link = stack.enter_context(_link(name, f"hwl{tag}{number}", f"nwl{tag}{number}"))
            uplink = stack.enter_context(_link(name, f"hwu{tag}{number}",
                                               f"nwu{tag}{number}"))
            _ip("-n", name, "route", "add", f"{servers_address}/32", "via", link.host_address)
            _ip("-n", name, "route", "add", f"{provider_address}/32", "via",
                uplink.host_address)
            host = WorkerHost(name=name, link=link, uplink=uplink, env=env, log_dir=log_dir)
            stack.callback(host.stop)  # before its links and namespace go
            hosts.append(host)
        yield Network(hosts=hosts, servers=servers_address, provider=provider_address,
                      relays=relays)
