"""The cipher of the secrets herald stores (docs/configuration.md#secrets_key): Fernet
(AES-128-CBC with HMAC-SHA256) under SECRETS_KEY's keys, newest first.

A value is sealed with the newest key and opened with any of them
(:class:`cryptography.fernet.MultiFernet`), so a new key can be put first while the
values sealed under the old one are re-sealed (``herald secrets rotate``). A sealed value
is stored as :data:`PREFIX` and the Fernet token: a value without it was stored in clear
before herald encrypted it, and reads as it is until the rotation or migration seals it.

Where the key comes from (:func:`current_box`): SECRETS_KEY; else, on the embedded
default only (no DATABASE_URL), a key herald generates once into ``.herald/secrets.key``
(mode 0600), beside the database file rather than in it. Anywhere else, with no key, no
secret can be stored (:class:`SecretsKeyMissing`): keeping the key in the database would
let a dump of it reveal every secret.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from herald.settings import EMBEDDED_DIR, Settings, fernet_keys, get_settings

if TYPE_CHECKING:
    from cryptography.fernet import Fernet, MultiFernet

#: What a sealed value starts with (a Fernet token follows).
PREFIX = "fernet:"
#: :data:`PREFIX` as bytes, for the binary columns.
PREFIX_BYTES = PREFIX.encode("ascii")
#: The embedded default's key file, inside its state directory.
KEY_FILE_NAME = "secrets.key"
#: Opened values each process keeps, so the webhook relay does not decrypt an endpoint's
#: secret again for every message it signs.
OPENED_CACHE_SIZE = 4096


class SecretsKeyMissing(RuntimeError):
    """A secret must be sealed or opened and no key is configured (SECRETS_KEY unset
    outside the embedded default)."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "SECRETS_KEY is not set: herald stores webhook signing secrets and SFTP "
            "passwords encrypted and needs a key for them (generate one with `python -c "
            "'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`; "
            "docs/configuration.md#secrets_key)" + (f"; {detail}" if detail else ""))


class SecretUnreadable(RuntimeError):
    """A sealed value that none of SECRETS_KEY's keys opens (the key that sealed it was
    removed from SECRETS_KEY, or the value was altered)."""


class Box:
    """Seals with the newest of its keys, opens with any of them."""

    def __init__(self, keys: list[bytes]) -> None:
        from cryptography.fernet import Fernet, MultiFernet

        if not keys:
            raise ValueError("a Box needs at least one key")
        self._newest: Fernet = Fernet(keys[0])
        self._all: MultiFernet = MultiFernet([Fernet(key) for key in keys])
        self._open_token = functools.lru_cache(maxsize=OPENED_CACHE_SIZE)(self._decrypt)

    def seal(self, value: str) -> str:
        """``value`` sealed with the newest key: :data:`PREFIX` and a Fernet token (a
        fresh random IV each time, so sealing twice never gives the same text)."""
        return PREFIX + self._all.encrypt(value.encode("utf-8")).decode("ascii")

    def seal_bytes(self, value: bytes) -> bytes:
        """``value`` sealed with the newest key: :data:`PREFIX_BYTES` and a Fernet token."""
        return PREFIX_BYTES + self._all.encrypt(value)

    def open(self, stored: str) -> str:
        """The clear value of a stored one: opened when sealed, as it is when stored in
        clear (before herald encrypted). :class:`SecretUnreadable` when no key opens it."""
        if not stored.startswith(PREFIX):
            return stored
        return self._open_token(stored[len(PREFIX):].encode("ascii")).decode("utf-8")

    def open_bytes(self, stored: bytes) -> bytes:
        """:meth:`open` for a binary column."""
        if not stored.startswith(PREFIX_BYTES):
            return stored
        return self._open_token(bytes(stored[len(PREFIX_BYTES):]))

    def is_current(self, stored: str | bytes) -> bool:
        """True when ``stored`` is sealed and the newest key opens it."""
        from cryptography.fernet import InvalidToken

        token = stored.encode("ascii") if isinstance(stored, str) else bytes(stored)
        if not token.startswith(PREFIX_BYTES):
            return False
        try:
            self._newest.decrypt(token[len(PREFIX_BYTES):])
        except InvalidToken:
            return False
        return True

    def _decrypt(self, token: bytes) -> bytes:
        from cryptography.fernet import InvalidToken

        try:
            return self._all.decrypt(token)
        except InvalidToken:
            raise SecretUnreadable(
                "a stored secret opens with none of SECRETS_KEY's keys: was the key that "
                "encrypted it removed? (docs/configuration.md#secrets_key)") from None


def is_sealed(stored: str | bytes) -> bool:
    """True when ``stored`` is a sealed value (else it was stored in clear)."""
    if isinstance(stored, str):
        return stored.startswith(PREFIX)
    return bytes(stored).startswith(PREFIX_BYTES)


def current_box(settings: Settings | None = None) -> Box | None:
    """The box of SECRETS_KEY's keys; on the embedded default without SECRETS_KEY, of the
    key in ``.herald/secrets.key`` (made on first use); else None: no key."""
    settings = settings or get_settings()
    if settings.secrets_key:
        return _box(settings.secrets_key)
    if settings.embedded_default:
        return _box(_embedded_key(EMBEDDED_DIR.resolve()))
    return None


def require_box(settings: Settings | None = None) -> Box:
    """:func:`current_box`, or :class:`SecretsKeyMissing` when there is no key."""
    box = current_box(settings)
    if box is None:
        raise SecretsKeyMissing()
    return box


@functools.lru_cache(maxsize=8)
def _box(secrets_key: str) -> Box:
    return Box(fernet_keys(secrets_key))


@functools.lru_cache(maxsize=8)
def _embedded_key(directory: Path) -> str:
    # read once per process and directory: a sealed value must not cost a file read
    return embedded_key(directory)


_key_file_lock = threading.Lock()


def embedded_key(directory: Path = EMBEDDED_DIR) -> str:
    """The embedded default's key, from ``directory/secrets.key``; generated (32 random
    bytes, URL-safe base64) and written with mode 0600 when the file does not exist yet.
    Processes starting side by side all get the same key: the file appears whole, by a
    hard link that only the first of them makes. ValueError naming the file when it holds
    no usable key."""
    path = directory / KEY_FILE_NAME
    with _key_file_lock:
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            draft = directory / f".{KEY_FILE_NAME}.{os.getpid()}.{threading.get_ident()}"
            descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                with os.fdopen(descriptor, "w") as file:
                    file.write(base64.urlsafe_b64encode(os.urandom(32)).decode("ascii") + "\n")
                    file.flush()
                    os.fsync(file.fileno())
                with contextlib.suppress(FileExistsError):  # another process made it first
                    os.link(draft, path)
            finally:
                draft.unlink(missing_ok=True)
    key = path.read_text(encoding="ascii").strip()
    try:
        fernet_keys(key)
    except ValueError:
        raise ValueError(f"{path} holds no usable key: delete it only if nothing was "
                         f"encrypted with it, or set SECRETS_KEY") from None
    return key


def forget_boxes() -> None:
    """Build the boxes afresh on next use (tests that change SECRETS_KEY)."""
    _box.cache_clear()
    _embedded_key.cache_clear()
