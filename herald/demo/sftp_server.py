"""A real SFTP server in this process (asyncssh): the Sysco side of ``herald demo``'s
purchasing phase, and of the supplier transports' tests.

``start_sftp_server(root, username, password)`` listens on 127.0.0.1 on a free port, with
password authentication, a freshly generated ed25519 host key and every client confined
(chrooted) to ``root``: a client's ``/outbound`` is ``root / "outbound"`` on disk, so a
test checks what was written by looking at the directory. The server runs on its own
event loop in a background thread; :meth:`SftpTestServer.stop` (or leaving its ``with``
block) closes the listener and every open connection, and then the port refuses. It is
meant for a demo and tests, never for production traffic: it accepts one account.

It counts SSH connections (``sessions_opened`` ever, ``sessions_open`` now) and the file
bytes it served (``bytes_read``), which lets a
test prove "one session per job, and none left open", and it can hold every file write
(``pause_writes``) to keep an upload in flight for as long as a test needs.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar, cast

import asyncssh

from providers.sftp import SftpSettings, openssh_key_line

__all__ = ["SftpTestServer", "start_sftp_server"]

_TIMEOUT_S = 10.0
T = TypeVar("T")


class SftpTestServer:
    """A running in-process SFTP server; see :func:`start_sftp_server`."""

    def __init__(self, root: Path, username: str, password: str,
                 host_key: asyncssh.SSHKey, host: str = "127.0.0.1") -> None:
        self.root = root
        self.username = username
        self.password = password
        self.host = host
        #: The port it listens on: set it before :meth:`start` to choose one (a server
        #: "coming back" on the port of one stopped), else the system picks a free one.
        self.port = 0
        self._host_key = host_key
        #: The server's public key as an OpenSSH line, as a client records it.
        self.host_key_line = openssh_key_line(host_key.convert_to_public())
        self._lock = threading.Lock()
        self._opened = 0
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._writes_waiting = 0
        self._bytes_read = 0
        self._loop = asyncio.new_event_loop()
        self._writes_allowed = asyncio.Event()
        self._writes_allowed.set()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="sftp-server")
        self._acceptor: asyncssh.SSHAcceptor | None = None

    # ---------------------------------------------------------------- what tests read

    @property
    def sessions_opened(self) -> int:
        """SSH connections accepted since the start (including refused logins)."""
        with self._lock:
            return self._opened

    @property
    def bytes_read(self) -> int:
        """File bytes sent to clients since the start (what reads took)."""
        with self._lock:
            return self._bytes_read

    @property
    def sessions_open(self) -> int:
        """SSH connections open right now."""
        with self._lock:
            return len(self._connections)

    @property
    def writes_waiting(self) -> int:
        """File writes held by :meth:`pause_writes`, waiting for :meth:`resume_writes`."""
        with self._lock:
            return self._writes_waiting

    def settings(self, *, outbound_dir: str = "/outbound", inbound_dir: str = "/inbound",
                 archive_dir: str = "/archive", host_key: str | None = None,
                 password: str | None = None) -> SftpSettings:
        """Settings a supplier would have to reach this server."""
        return SftpSettings(self.host, self.port, self.username,
                            self.password if password is None else password,
                            outbound_dir, inbound_dir, archive_dir, host_key)

    def pause_writes(self) -> None:
        """Hold every file write until :meth:`resume_writes` (an upload stays in flight)."""
        self._on_loop(self._set_writes(False))

    def resume_writes(self) -> None:
        """Let held and future writes through."""
        self._on_loop(self._set_writes(True))

    # ---------------------------------------------------------------- life cycle

    def start(self) -> SftpTestServer:
        """Listen; returns once the port accepts connections."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        self._acceptor = self._on_loop(self._listen())
        self.port = self._acceptor.get_port()
        return self

    def stop(self) -> None:
        """Close the listener and every open connection and end the thread (idempotent)."""
        if self._loop.is_closed():
            return
        try:
            self._on_loop(self._shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_TIMEOUT_S)
            self._loop.close()

    def __enter__(self) -> SftpTestServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- on the loop

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_TIMEOUT_S)

    async def _set_writes(self, allowed: bool) -> None:
        if allowed:
            self._writes_allowed.set()
        else:
            self._writes_allowed.clear()

    async def _listen(self) -> asyncssh.SSHAcceptor:
        return await asyncssh.listen(
            self.host, self.port, server_host_keys=[self._host_key],
            server_factory=lambda: _Server(self), sftp_factory=lambda chan: _Sftp(self, chan),
            allow_scp=False, reuse_address=True, config=None)

    async def _shutdown(self) -> None:
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.close()
        for connection in connections:
            await asyncio.wait_for(connection.wait_closed(), _TIMEOUT_S)
        self._writes_allowed.set()
        pending = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _connected(self, connection: asyncssh.SSHServerConnection) -> None:
        with self._lock:
            self._opened += 1
            self._connections.add(connection)

    def _disconnected(self, connection: asyncssh.SSHServerConnection) -> None:
        with self._lock:
            self._connections.discard(connection)

    async def _gate_write(self) -> None:
        if self._writes_allowed.is_set():
            return
        with self._lock:
            self._writes_waiting += 1
        try:
            await self._writes_allowed.wait()
        finally:
            with self._lock:
                self._writes_waiting -= 1


class _Server(asyncssh.SSHServer):
    """Password authentication against the one configured account; counts connections."""

    def __init__(self, owner: SftpTestServer) -> None:
        self._owner = owner
        self._connection: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._connection = conn
        self._owner._connected(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._connection is not None:
            self._owner._disconnected(self._connection)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        return (hmac.compare_digest(username, self._owner.username)
                and hmac.compare_digest(password, self._owner.password))


class _Sftp(asyncssh.SFTPServer):
    """The stock SFTP server chrooted to the root, with writes that can be held."""

    def __init__(self, owner: SftpTestServer, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        super().__init__(chan, chroot=str(owner.root).encode())
        self._owner = owner

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        await self._owner._gate_write()
        return cast(int, super().write(file_obj, offset, data))  # the stock server's is sync

    def read(self, file_obj: object, offset: int, size: int) -> bytes:
        data = cast(bytes, super().read(file_obj, offset, size))  # the stock server's is sync
        with self._owner._lock:
            self._owner._bytes_read += len(data)
        return data


def start_sftp_server(root: Path, username: str = "herald", password: str = "s3cret-pass", *,
                      host_key: asyncssh.SSHKey | None = None) -> SftpTestServer:
    """A started SFTP server confined to ``root`` (created if missing) with one account;
    ``host_key`` defaults to a new ed25519 key. Stop it with ``.stop()`` or a ``with``."""
    key = host_key or asyncssh.generate_private_key("ssh-ed25519")
    return SftpTestServer(root, username, password, key).start()
