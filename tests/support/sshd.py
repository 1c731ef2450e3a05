"""A real OpenSSH server for the SFTP tests: Debian's ``sshd`` on a free port of 127.0.0.1
with its own ed25519, ECDSA and RSA host keys, serving ``internal-sftp`` to one local
user who logs in with a password.

The host keys are read back with ``ssh-keyscan``, so a test records them exactly as an
operator would copy them. Everything sshd logs (``LogLevel DEBUG1``) goes to a file the
test can read, to tell what a client got as far as (a password offered or not).

Creating the user and binding sshd need root (``make test`` runs as root in CI, and
installs openssh-server through ``tests/support/services.py``); :func:`require_root` is
the skip for other runs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from providers.sftp import SftpSettings
from tests.support.services import ensure_packages, find_free_port, make_tempdir

#: The host key types a stock OpenSSH server generates, in ``ssh-keygen -t`` spelling,
#: with the key algorithm ``ssh-keyscan`` prints for each.
KEY_TYPES: Mapping[str, str] = {"ed25519": "ssh-ed25519", "ecdsa": "ecdsa-sha2-nistp256",
                                "rsa": "ssh-rsa"}
_START_TIMEOUT_S = 20.0
#: Where sshd insists its privilege separation happens (Debian's service creates it).
_PRIVSEP_DIR = Path("/run/sshd")


def sshd_binary() -> str | None:
    """Debian's sshd, when installed."""
    return shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin")


def require_root() -> None:
    """Skip the calling test unless it runs as root (a local user is created, sshd run);
    as root, openssh-server is installed when missing."""
    if os.geteuid() != 0:
        pytest.skip("needs root: a real sshd is run with a local user created for it "
                    "(make test runs as root)")
    ensure_packages(["sshd"])


@dataclass(frozen=True)
class LocalUser:
    """A local account sshd authenticates by password; its home is the SFTP root."""

    name: str
    password: str = field(repr=False)
    home: Path


@contextlib.contextmanager
def local_user(home: Path) -> Iterator[LocalUser]:
    """A new local user (random name, random password, no login shell) whose home is
    ``home`` (created, owned by it); removed again when the block ends."""
    name = f"hsftp{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(18)
    subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home),
                    "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True)
    try:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n".encode(), check=True,
                       capture_output=True)
        home.mkdir(parents=True, exist_ok=True)
        entry = pwd.getpwnam(name)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        yield LocalUser(name, password, home)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


@dataclass
class Sshd:
    """A running sshd: where it listens, who may log in, its host keys as ``ssh-keyscan``
    printed them (key type → line, host names in front) and its log."""

    port: int
    user: LocalUser
    key_lines: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def keyscan(self) -> str:
        """Every host key, one ``ssh-keyscan`` line each, as it printed them."""
        return "".join(line + "\n" for line in self.key_lines.values())

    def settings(self, **overrides: Any) -> SftpSettings:
        """Settings that reach this server as its user, directories under its home."""
        values: dict[str, Any] = {
            "host": "127.0.0.1", "port": self.port, "username": self.user.name,
            "password": self.user.password,
            "outbound_dir": str(self.user.home / "outbound"),
            "inbound_dir": str(self.user.home / "inbound"),
            "archive_dir": str(self.user.home / "archive"), **overrides}
        return SftpSettings(**values)

    def log_size(self) -> int:
        """How far the log has grown: a mark to read what came after with :meth:`log`."""
        return self.log_path.stat().st_size

    def log(self, since: int = 0) -> str:
        """What sshd logged after the mark ``since``."""
        with self.log_path.open("rb") as log:
            log.seek(since)
            return log.read().decode(errors="replace")

    def close(self) -> None:
        """Stop sshd (its connection children end with it)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_sshd(workdir: Path, user: LocalUser,
               key_types: Sequence[str] = tuple(KEY_TYPES)) -> Sshd:
    """Generate ``key_types`` host keys in ``workdir`` and start sshd with them; returns
    once it answers with its SSH banner (fails with its log otherwise)."""
    binary = sshd_binary()
    if binary is None:
        raise RuntimeError("sshd is not installed (openssh-server; see require_root)")
    _PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    host_keys = []
    for key_type in key_types:
        path = workdir / f"ssh_host_{key_type}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", key_type, "-N", "", "-f", str(path)],
                       check=True, capture_output=True)
        host_keys.append(path)
    port = find_free_port()
    config = workdir / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1",
        *(f"HostKey {path}" for path in host_keys),
        f"PidFile {workdir / 'sshd.pid'}",
        "Subsystem sftp internal-sftp", "ForceCommand internal-sftp",
        f"AllowUsers {user.name}",
        "PasswordAuthentication yes", "PermitEmptyPasswords no",
        "KbdInteractiveAuthentication no", "PubkeyAuthentication no",
        "AuthorizedKeysFile none", "UsePAM no", "StrictModes no", "PermitRootLogin no",
        "AllowTcpForwarding no", "X11Forwarding no", "LogLevel DEBUG1", ""]))
    log_path = workdir / "sshd.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen([binary, "-D", "-e", "-f", str(config)],
                                   stdout=log, stderr=subprocess.STDOUT)
    server = Sshd(port, user, {}, log_path, process, workdir)
    try:
        _wait_for_banner(server)
        server.key_lines = _keyscan(port, key_types)
    except BaseException:
        server.close()
        raise
    return server


@contextlib.contextmanager
def running_sshd(key_types: Sequence[str] = tuple(KEY_TYPES)) -> Iterator[Sshd]:
    """A local user and an sshd for it, in a temporary directory; all gone afterwards."""
    workdir = make_tempdir("herald-sshd-")
    try:
        with local_user(workdir / "home") as user:
            server = start_sshd(workdir, user, key_types)
            try:
                yield server
            finally:
                server.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for_banner(server: Sshd) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"sshd exited with {server.process.returncode}:\n{server.log()}")
        with contextlib.suppress(OSError), \
                socket.create_connection(("127.0.0.1", server.port), timeout=2) as probe:
            if probe.recv(64).startswith(b"SSH-2.0-"):
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not answer in {_START_TIMEOUT_S} s:\n{server.log()}")


def _keyscan(port: int, key_types: Sequence[str]) -> dict[str, str]:
    """``ssh-keyscan``'s line for each of ``key_types``, by type."""
    scanned = subprocess.run(
        ["ssh-keyscan", "-p", str(port), "-t", ",".join(key_types), "127.0.0.1"],
        check=True, capture_output=True, text=True, timeout=_START_TIMEOUT_S).stdout
    lines = {}
    for line in scanned.splitlines():
        _host, algorithm, _key = line.split(maxsplit=2)
        [key_type] = [kind for kind, name in KEY_TYPES.items() if name == algorithm]
        lines[key_type] = line
    if sorted(lines) != sorted(key_types):
        raise RuntimeError(f"ssh-keyscan found {sorted(lines)}, not {sorted(key_types)}")
    return {key_type: lines[key_type] for key_type in key_types}
