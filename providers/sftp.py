"""The SFTP adapter: a supplier's outbound drop and inbound poll (docs/suppliers.md#sftp).

:func:`sftp_session` opens one SSH connection with password authentication, hands out an
:class:`SftpSession` for the body of a ``with`` block and always closes the connection
when the block ends, whether it returned or raised. Every use (one dispatch, one poll of
one supplier) is one session: an SFTP server that limits its sessions per account never
sees two from one job, and none is left open behind a failed one.

The workers are threads with no event loop of their own, so each session runs asyncssh on
a private event loop that lives exactly as long as the session.

Failures are classified for the dispatch queue:

- authentication refused, a server that proves none of the recorded host keys, missing or
  invalid settings, permission denied on a path → :class:`SftpConfigError` (permanent: a person
  has to change something before any attempt can succeed);
- connection refused, reset or lost, a name that does not resolve, no answer within the
  connect or operation timeout, any other server error → :class:`SftpTransientError`
  (retried).

Host keys: with recorded keys (one or more OpenSSH public key lines, as ``ssh-keyscan``
prints them) the server must prove one of them, checked during the handshake, so nothing
is sent before it matched; only the recorded keys' algorithms are offered, so a server
holding several keys (ed25519, ECDSA, RSA) presents one that was recorded rather than
whichever it prefers. Without any the first key seen is accepted and handed to
``on_new_host_key`` once the login succeeded, for the caller to record and require from
then on (a caller that could not record it raises, which ends the session before its
body runs): trust on first use, which the API lets a supplier have only when it says
``trust_on_first_use: true`` (docs/suppliers.md#host-keys).

A reader may cap what it reads (``get(path, max_bytes=…)``): a larger file is refused as
:class:`SftpFileTooLarge` after a stat, never read.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import posixpath
import stat
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

import asyncssh

from herald.settings import get_settings
from providers.suppliers import SftpConfigError

__all__ = [
    "CONNECT_TIMEOUT_S",
    "SKIPPED_SUFFIXES",
    "SftpConfigError",
    "SftpFileTooLarge",
    "SftpHostKeyNotRecorded",
    "SftpSession",
    "SftpSettings",
    "SftpTransientError",
    "is_candidate",
    "openssh_key_line",
    "sftp_session",
]

#: Seconds to connect, exchange keys and log in.
CONNECT_TIMEOUT_S = 15.0
#: Seconds the polite close of a session may take before it is abandoned.
_CLOSE_TIMEOUT_S = 5.0
#: Names with these endings are files still being written; a reader leaves them alone.
SKIPPED_SUFFIXES = (".tmp", ".part")
#: The suffix an upload is written under before it is renamed into place.
_PART_SUFFIX = ".part"
_DIRECTORY_FIELDS = ("outbound_dir", "inbound_dir", "archive_dir")
#: asyncssh's ciphers with AES-GCM moved first (``^``: the rest of its defaults follow,
#: so a server without them still agrees on another). asyncssh computes ChaCha20-Poly1305,
#: its first choice, as several cipher objects made per packet in Python; AES-GCM is one
#: call into the AES-NI code per packet, and a third of an upload's CPU went to ChaCha
#: (docs/suppliers.md#sftp).
_CIPHER_PREFERENCE = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"

T = TypeVar("T")
log = logging.getLogger(__name__)


class SftpTransientError(Exception):
    """The SFTP server could not be reached or did not finish an operation; a later attempt
    may succeed (connection refused or lost, a timeout, a server-side failure)."""

    permanent = False


class SftpHostKeyNotRecorded(SftpTransientError):
    """Trust on first use lost a race: the key this session saw could not be recorded on
    the supplier (another session recorded a key first, or the supplier's settings changed
    meanwhile). The session stops before its body runs; the next attempt requires
    whatever key is recorded by then, so it succeeds only if the server proves that one."""

    def __init__(self, supplier_id: str) -> None:
        super().__init__(
            f"the SFTP host key this session saw was not recorded on supplier {supplier_id} "
            "(another session recorded one first, or its SFTP settings changed): stopped "
            "before anything was transferred; the next session requires the recorded key")


class SftpFileTooLarge(Exception):
    """A remote file is larger than its reader accepts; it was not read (or not past the
    cap). Retrying cannot help: the file is what it is."""

    permanent = True

    def __init__(self, path: str, size: int | None, max_bytes: int) -> None:
        # size None: the file grew past the cap while it was read
        what = f"{size} bytes" if size is not None else "larger"
        super().__init__(f"{path} is {what}, over the {max_bytes} bytes accepted")
        self.size = size
        self.max_bytes = max_bytes


# --------------------------------------------------------------------------- settings


@dataclasses.dataclass(frozen=True)
class SftpSettings:
    """Where and how to reach one supplier's SFTP server. Construction validates every
    field and raises :class:`SftpConfigError` naming each problem, so a bad configuration
    fails before any connection is attempted."""

    host: str
    port: int
    username: str
    password: str = dataclasses.field(repr=False)
    outbound_dir: str
    inbound_dir: str
    archive_dir: str
    #: The server's public keys, one OpenSSH line each (``ssh-ed25519 AAAA…``, host names
    #: in front allowed, as ``ssh-keyscan`` prints them), or None when no key has been
    #: recorded yet. The server must prove one of them.
    host_key: str | None = None
    #: The supplier's operator chose to accept the first key the server presents (the API
    #: refuses a Sysco supplier with neither this nor ``host_key``: docs/suppliers.md#host-keys).
    trust_on_first_use: bool = False

    def __post_init__(self) -> None:
        problems = _settings_problems(self)
        if problems:
            raise SftpConfigError("invalid SFTP settings: " + "; ".join(problems))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> SftpSettings:
        """Settings from a supplier's ``sftp`` object (``port`` defaults to 22); missing or
        unknown keys raise :class:`SftpConfigError`."""
        if not isinstance(data, Mapping):
            raise SftpConfigError("the supplier has no SFTP settings")
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise SftpConfigError(f"unknown SFTP settings: {', '.join(unknown)}")
        values = {"port": 22, "host_key": None, "trust_on_first_use": False, **data}
        missing = sorted(names - set(values))
        if missing:
            raise SftpConfigError(f"missing SFTP settings: {', '.join(missing)}")
        return cls(**values)


def _settings_problems(settings: SftpSettings) -> list[str]:
    """Every reason ``settings`` cannot work, in field order (empty when it can)."""
    problems = []
    if not _is_text(settings.host) or any(char.isspace() for char in settings.host):
        problems.append("host must be a host name or address")
    if (not isinstance(settings.port, int) or isinstance(settings.port, bool)
            or not 1 <= settings.port <= 65535):
        problems.append("port must be an integer from 1 to 65535")
    if not _is_text(settings.username):
        problems.append("username must be a non-empty string")
    if not _is_text(settings.password):
        problems.append("password must be a non-empty string")
    problems += [f"{name} must be a non-empty path" for name in _DIRECTORY_FIELDS
                 if not _is_text(getattr(settings, name))]
    if not isinstance(settings.trust_on_first_use, bool):
        problems.append("trust_on_first_use must be true or false")
    if settings.host_key is not None:
        try:
            _parse_host_keys(settings.host_key)
        except SftpConfigError as error:
            problems.append(str(error))
    return problems


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value.strip() != "" and "\0" not in value


_HOST_KEY_FORM = ("host_key must be one or more OpenSSH public key lines such as "
                  "'ssh-ed25519 AAAA…' (host names in front allowed, as ssh-keyscan "
                  "prints them)")


def _parse_host_keys(text: str) -> list[asyncssh.SSHKey]:
    """The public keys of ``text``: one OpenSSH key line each, blank lines and ``#``
    comment lines skipped (``ssh-keyscan``'s output as it is). SftpConfigError naming the
    first line that is not a key, or when there is no key at all."""
    if not isinstance(text, str):
        raise SftpConfigError(_HOST_KEY_FORM)
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key = _parse_key_line(line)
        if key is None:
            raise SftpConfigError(f"{_HOST_KEY_FORM}; line {number} is not one")
        keys.append(key)
    if not keys:
        raise SftpConfigError(_HOST_KEY_FORM)
    return keys


def _parse_key_line(line: str) -> asyncssh.SSHKey | None:
    """The key of one line ``[host names] algorithm base64 [comment]``, or None. The host
    names are not compared with the host connected to: ``ssh-keyscan`` writes whatever
    name or ``[address]:port`` it was given. A marked line (``@cert-authority``,
    ``@revoked``) is not a key."""
    fields = line.split()
    for start in (0, 1):  # without, then with host names in front
        if len(fields) < start + 2 or fields[0].startswith("@"):
            return None
        try:
            key = asyncssh.import_public_key(" ".join(fields[start:]))
        except (asyncssh.KeyImportError, ValueError):
            continue
        # the line's algorithm must be the key's own: nothing else (a PEM or RFC 4716
        # body that asyncssh also reads) passes as an OpenSSH line
        if key.algorithm.decode() == fields[start]:
            return key
    return None


def openssh_key_line(key: asyncssh.SSHKey) -> str:
    """``key`` as an OpenSSH public key line without a comment: the form recorded on a
    supplier and compared with what a server presents."""
    return f"{key.algorithm.decode()} {base64.b64encode(key.public_data).decode()}"


def is_candidate(name: str) -> bool:
    """True for a file name a reader should pick up: not hidden, and not a file still being
    written (``.tmp``, ``.part``)."""
    return not name.startswith(".") and not name.endswith(SKIPPED_SUFFIXES)


def _check_file_name(name: str) -> None:
    """Refuse a name that is not one plain file name a reader would pick up."""
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"not a plain file name: {name!r}")
    if not is_candidate(name):
        raise ValueError(f"{name!r} would be skipped by the reading side: a file name must "
                         f"not start with '.' nor end with {' or '.join(SKIPPED_SUFFIXES)}")


def _check_path(path: str, what: str) -> None:
    if not _is_text(path):
        raise ValueError(f"{what} must be a non-empty path, not {path!r}")


# --------------------------------------------------------------------------- errors


def _classify(error: Exception, what: str) -> Exception:
    """The error the dispatch job acts on for ``error``, raised while doing ``what``; errors that
    are not about the connection or the server (a bug) come back unchanged."""
    if isinstance(error, SftpConfigError | SftpTransientError):
        return error
    if isinstance(error, asyncssh.PermissionDenied):
        return SftpConfigError(f"{what}: authentication refused ({error.reason})")
    if isinstance(error, asyncssh.HostKeyNotVerifiable | asyncssh.KeyExchangeFailed):
        # A key exchange that fails on an otherwise reachable server is the host key (none
        # of the recorded keys' algorithms) or the algorithms: retrying cannot help.
        return SftpConfigError(f"{what}: the server's host key does not match any recorded "
                               f"one ({error.reason})")
    if isinstance(error, asyncssh.SFTPPermissionDenied):
        return SftpConfigError(f"{what}: permission denied ({error.reason})")
    if isinstance(error, asyncssh.SFTPError | asyncssh.DisconnectError):
        return SftpTransientError(f"{what}: {error.reason}")
    if isinstance(error, TimeoutError):
        return SftpTransientError(f"{what}: no answer in time")
    if isinstance(error, OSError | asyncssh.Error):
        return SftpTransientError(f"{what}: {error}")
    return error


# --------------------------------------------------------------------------- the session


class SftpSession:
    """One open SFTP session; obtained from :func:`sftp_session`, valid inside its block.

    Every method runs one or a few SFTP requests, each bounded by the operation timeout,
    and raises :class:`SftpConfigError` or :class:`SftpTransientError` on failure."""

    def __init__(self, settings: SftpSettings, operation_timeout: float) -> None:
        self._settings = settings
        self._timeout = operation_timeout
        self._loop: asyncio.AbstractEventLoop | None = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet_connection_errors)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._sftp: asyncssh.SFTPClient | None = None

    @property
    def host_key_line(self) -> str:
        """The key the server presented, as an OpenSSH public key line."""
        key = self._conn.get_server_host_key() if self._conn else None
        if key is None:
            raise RuntimeError("the SFTP session is not connected")
        return openssh_key_line(key)

    def put(self, directory: str, name: str, data: bytes) -> str:
        """Write ``data`` to ``directory/name`` and return that path. The bytes go to
        ``name.part`` first and are renamed into place, so a reader never sees half a file;
        a missing directory is created (with its parents); an existing file of that name
        is replaced."""
        _check_path(directory, "directory")
        _check_file_name(name)
        if not isinstance(data, bytes | bytearray):
            raise TypeError(f"data must be bytes, not {type(data).__name__}")
        path = posixpath.join(directory, name)
        part = path + _PART_SUFFIX
        # the directory is nearly always there: write first, and create it (then write
        # again) only when the write failed, rather than asking on every upload (a
        # makedirs is a stat and a mkdir per path component)
        if not self._call(f"upload of {part}", lambda: self._write(part, bytes(data),
                                                                   missing_ok=True)):
            self.ensure_dir(directory)
            self._call(f"upload of {part}", lambda: self._write(part, bytes(data)))
        self._call(f"rename of {part} to {name}", lambda: self._replace(part, path))
        return path

    def list_candidates(self, directory: str) -> list[str]:
        """The names of the regular files in ``directory`` a reader should pick up (see
        :func:`is_candidate`), sorted."""
        _check_path(directory, "directory")
        entries = self._call(f"listing of {directory}", lambda: self._client().readdir(directory))
        return sorted(entry.filename for entry in entries
                      if isinstance(entry.filename, str) and is_candidate(entry.filename)
                      and _is_regular_file(entry.attrs))

    def get(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """The whole content of the file at ``path``. With ``max_bytes``, a larger file is
        not read: its size is asked first (a stat) and :class:`SftpFileTooLarge` raised
        when it is over; a file that grew since is read no further than one byte past the
        cap, and refused the same way."""
        _check_path(path, "path")
        if max_bytes is None:
            return self._call(f"download of {path}", lambda: self._read(path))
        attrs = self._call(f"stat of {path}", lambda: self._client().stat(path))
        if attrs.size is not None and attrs.size > max_bytes:
            raise SftpFileTooLarge(path, attrs.size, max_bytes)
        data = self._call(f"download of {path}", lambda: self._read(path, max_bytes + 1))
        if len(data) > max_bytes:
            raise SftpFileTooLarge(path, None, max_bytes)
        return data

    def move(self, src: str, dst_dir: str) -> str:
        """Move the file ``src`` into ``dst_dir`` (created when missing) under the same
        name and return its new path. A file of that name already there is replaced: a
        supplier may drop the same file twice, and a move that failed on it would leave the
        file to be read again on every poll."""
        _check_path(src, "src")
        _check_path(dst_dir, "dst_dir")
        name = posixpath.basename(src.rstrip("/"))
        _check_file_name(name)
        dst = posixpath.join(dst_dir, name)
        self.ensure_dir(dst_dir)
        self._call(f"move of {src} to {dst_dir}", lambda: self._replace(src, dst))
        return dst

    def ensure_dir(self, path: str) -> None:
        """Create the directory ``path`` and its missing parents; an existing one is kept."""
        _check_path(path, "path")
        self._call(f"creation of {path}",
                   lambda: self._client().makedirs(path, exist_ok=True))

    # ---------------------------------------------------------------- internals

    def _client(self) -> asyncssh.SFTPClient:
        if self._sftp is None:
            raise RuntimeError("the SFTP session is closed")
        return self._sftp

    def _call(self, what: str, operation: Callable[[], Awaitable[T]],
              timeout: float | None = None) -> T:
        """Run ``operation`` on this session's loop within the timeout, errors classified."""
        if self._loop is None or self._loop.is_closed():
            raise RuntimeError("the SFTP session is closed")
        where = f"{what} on {self._settings.host}:{self._settings.port}"
        try:
            return self._loop.run_until_complete(self._bounded(operation(),
                                                               timeout or self._timeout))
        except Exception as error:
            raise _classify(error, where) from error

    async def _bounded(self, operation: Awaitable[T], timeout: float) -> T:
        """``operation``'s result, or TimeoutError after ``timeout`` seconds.

        Not ``asyncio.wait_for``: cancelling an SFTP request runs its clean-up (closing the
        remote file), which waits on the same server that stopped answering, so a cancelled
        operation could hang on. Instead the connection is aborted, which fails whatever is
        still pending at once and leaves the session unusable (later calls fail as lost)."""
        task = asyncio.ensure_future(operation)
        done, _ = await asyncio.wait({task}, timeout=timeout)
        if task not in done:
            task.add_done_callback(_consume_outcome)
            task.cancel()
            if self._conn is not None:
                self._conn.abort()
            raise TimeoutError
        return task.result()

    async def _write(self, path: str, data: bytes, *, missing_ok: bool = False) -> bool:
        """Write ``data`` to ``path``; with ``missing_ok``, False instead of the error when
        the server could not open it (its directory may be missing: any SFTP error,
        since servers differ in the code they give; a second try after the directory
        was made reports the real one)."""
        try:
            remote = await self._client().open(path, "wb")
        except asyncssh.SFTPError:
            if missing_ok:
                return False
            raise
        async with remote:
            await remote.write(data)
        return True

    async def _read(self, path: str, size: int = -1) -> bytes:
        async with self._client().open(path, "rb") as remote:
            return await remote.read(size)

    async def _replace(self, src: str, dst: str) -> None:
        # A plain SFTP rename refuses to replace an existing file; POSIX rename (an OpenSSH
        # extension most servers have) replaces it in one step.
        try:
            await self._client().posix_rename(src, dst)
        except asyncssh.SFTPOpUnsupported:
            await self._client().rename(src, dst)

    def _connect(self, trusted_keys: list[asyncssh.SSHKey] | None,
                 connect_timeout: float) -> None:
        settings = self._settings
        # (trusted keys, CA keys, revoked keys), used as they are for whatever host
        known_hosts: tuple[list[asyncssh.SSHKey], ...] | None = (
            (trusted_keys, [], []) if trusted_keys is not None else None)

        async def connect() -> None:
            try:
                self._conn = await asyncssh.connect(
                    settings.host, settings.port, username=settings.username,
                    password=settings.password, known_hosts=known_hosts,
                    # server_host_key_algs left unset: asyncssh then offers only the
                    # trusted keys' signature algorithms (every algorithm when none is
                    # recorded). A server holding several keys answers with the first
                    # algorithm of the client's list it has, so offering every algorithm
                    # made an OpenSSH server present its RSA key to a client that
                    # recorded its ed25519 one.
                    encryption_algs=_CIPHER_PREFERENCE,
                    # only the password: no keys, agent or ~/.ssh/config of the worker's
                    # user
                    client_keys=None, agent_path=None, config=None,
                    connect_timeout=connect_timeout)
            except (asyncssh.ConnectionLost, ConnectionResetError, BrokenPipeError):
                if trusted_keys is not None:
                    await self._refuse_unrecorded_host_key(trusted_keys, connect_timeout)
                raise
            self._sftp = await self._conn.start_sftp_client()

        self._call("connection", connect, timeout=connect_timeout + self._timeout)

    async def _refuse_unrecorded_host_key(self, trusted_keys: list[asyncssh.SSHKey],
                                          timeout: float) -> None:
        """After a connection offering only the recorded keys' algorithms was lost before
        it was established: SftpConfigError when the server holds none of the recorded
        keys; nothing when that cannot be told (the caller's error stands, transient).

        An OpenSSH server that has no key of an offered algorithm just closes the
        connection, and asyncssh's client does not check the algorithms agree before it
        goes on, so that looked like a network failure, retried to no end. One more key
        exchange, with no login (the password is never sent to it), offers the recorded
        algorithms first and then every other: a server that then presents a key that
        was not recorded holds none of them."""
        algorithms = dict.fromkeys(algorithm.decode() for key in trusted_keys
                                   for algorithm in key.sig_algorithms)
        settings = self._settings
        try:
            presented = await asyncio.wait_for(asyncssh.get_server_host_key(
                settings.host, settings.port, config=None,
                server_host_key_algs="^" + ",".join(algorithms)), timeout)
        except (asyncssh.Error, OSError, TimeoutError):
            return
        if presented is not None and presented not in trusted_keys:
            raise SftpConfigError(
                f"connection on {settings.host}:{settings.port}: the server's host key does "
                f"not match any recorded one (it holds none of them and presents "
                f"{presented.algorithm.decode()} {presented.get_fingerprint()})")

    def _close(self) -> None:
        """Close the connection and the loop; never raises."""
        loop, conn = self._loop, self._conn
        self._loop = self._conn = self._sftp = None
        if loop is None:
            return
        try:
            if conn is not None:
                conn.close()
                with contextlib.suppress(Exception):
                    loop.run_until_complete(asyncio.wait_for(conn.wait_closed(),
                                                             _CLOSE_TIMEOUT_S))
            # what a timeout abandoned ends once the connection is gone; let it finish
            pending = asyncio.all_tasks(loop)
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=_CLOSE_TIMEOUT_S))
                for task in pending:
                    _consume_outcome(task)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def _quiet_connection_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The session loop's handler of errors nobody awaited: after a timeout aborted the
    connection, asyncssh's own in-flight requests fail with the connection lost, which
    the caller was already told about; anything else is reported as usual."""
    if isinstance(context.get("exception"), asyncssh.Error | OSError):
        log.debug("after an aborted SFTP session: %s", context.get("message"))
        return
    loop.default_exception_handler(context)


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned task's failure as seen: it was already reported as a timeout."""
    if task.done() and not task.cancelled():
        task.exception()


def _is_regular_file(attrs: asyncssh.SFTPAttrs) -> bool:
    if attrs.type == asyncssh.FILEXFER_TYPE_REGULAR:
        return True
    if attrs.type == asyncssh.FILEXFER_TYPE_UNKNOWN and attrs.permissions is not None:
        return stat.S_ISREG(attrs.permissions)
    return False


@contextlib.contextmanager
def sftp_session(settings: SftpSettings, *, known_host_key: str | None = None,
                 on_new_host_key: Callable[[str], object] | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S,
                 operation_timeout: float | None = None) -> Iterator[SftpSession]:
    """One SFTP session to ``settings``'s server for the body of a ``with`` block, closed
    when the block ends however it ends.

    The server must prove one of the keys of ``known_host_key`` (one or more OpenSSH
    lines; default: ``settings.host_key``) or the connection fails with
    :class:`SftpConfigError` before the password or anything else is sent. With no key
    known, the key presented is accepted and, once the login succeeded, passed to
    ``on_new_host_key`` as an OpenSSH line before the body runs; when it raises (the key
    could not be recorded), the session is closed and the body never runs. Each
    operation may take
    ``operation_timeout`` seconds (default: the SFTP_OPERATION_TIMEOUT_S setting)."""
    if operation_timeout is None:
        operation_timeout = get_settings().sftp_operation_timeout_s
    recorded = known_host_key if known_host_key is not None else settings.host_key
    trusted_keys = _parse_host_keys(recorded) if recorded is not None else None
    session = SftpSession(settings, operation_timeout)
    try:
        session._connect(trusted_keys, connect_timeout)
        if trusted_keys is None and on_new_host_key is not None:
            on_new_host_key(session.host_key_line)
        yield session
    finally:
        session._close()
