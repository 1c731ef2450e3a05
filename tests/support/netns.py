"""A client that is not on loopback: a Linux network namespace of the test's own, joined to
this host by a veth pair on a private /30 (10.200.x.y), removed on exit.

Needs root and iproute2's ``ip``; :func:`unavailable` says why when they are missing, so a
test can skip with that reason.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


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


@contextmanager
def foreign_host() -> Iterator[ForeignHost]:
    """A namespace whose one route leads to this host over a veth pair: this host is
    ``10.200.a.b+1``, the namespace ``10.200.a.b+2`` (a /30 nothing else uses)."""
    tag = f"{os.getpid() % 100_000}{random.randrange(100)}"
    name, host_end, ns_end = f"herald-t{tag}", f"hvh{tag}", f"hvn{tag}"
    base = random.randrange(0, 256 * 64) * 4  # a /30 inside 10.200.0.0/16
    third, fourth = divmod(base, 256)
    host_address, ns_address = f"10.200.{third}.{fourth + 1}", f"10.200.{third}.{fourth + 2}"
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        try:
            _ip("link", "set", ns_end, "netns", name)
            _ip("addr", "add", f"{host_address}/30", "dev", host_end)
            _ip("link", "set", host_end, "up")
            _ip("-n", name, "addr", "add", f"{ns_address}/30", "dev", ns_end)
            _ip("-n", name, "link", "set", ns_end, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            yield ForeignHost(name=name, host_address=host_address)
        finally:
            # deleting one end deletes its peer, wherever it lives
            subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=30)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
