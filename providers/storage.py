"""Where generated documents (supplier order PDFs) are kept, behind one small interface.

A :class:`Storage` takes a key (``purchase-orders/<order id>/<dispatch id>.pdf``), the
bytes and their content type, and returns the URL the document can be read back at.
:class:`LocalStorage` — the default — writes under SUPPLIER_PDF_DIR; the URL is the file's
``file://`` URL, or the key under SUPPLIER_PDF_BASE_URL when a web server publishes that
directory. Storing the same key again replaces the document (a retried dispatch renders
it again), and a reader never sees a half-written file.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from herald.settings import Settings, get_settings

#: A key: slash-separated segments of letters, digits, ``.``, ``_`` and ``-``, none of
#: them ``.`` or ``..``, so a key can never leave the storage's root.
_KEY = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)*")
KEY_MAX_CHARS = 512


class Storage(Protocol):
    """A place documents are written to and read back from by URL."""

    def store(self, key: str, data: bytes, content_type: str) -> str:
        """Keep ``data`` under ``key`` (replacing what was there) and return its URL."""
        ...


def check_key(key: str) -> str:
    """``key`` when it is a safe relative key (``purchase-orders/o-1/d-1.pdf``); a
    ValueError naming the problem otherwise."""
    if not key or len(key) > KEY_MAX_CHARS:
        raise ValueError(f"storage key must be 1 to {KEY_MAX_CHARS} characters")
    if not _KEY.fullmatch(key):
        raise ValueError(f"storage key {key!r} must be slash-separated segments of letters, "
                         "digits, '.', '_' and '-', each starting with a letter, digit, "
                         "'_' or '-'")
    return key


class LocalStorage:
    """Documents as files under one directory (created on first use)."""

    def __init__(self, root: str | Path, public_base_url: str = "") -> None:
        self.root = Path(root).resolve()
        self.public_base_url = public_base_url.rstrip("/")

    def store(self, key: str, data: bytes, content_type: str) -> str:
        """Write ``data`` to ``<root>/<key>`` atomically and return its URL; the content
        type is implied by the key's extension for whoever serves the directory."""
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # write beside the target and rename over it: a reader sees the old file or the
        # whole new one, never a prefix
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return self.url_of(key)

    def path_of(self, key: str) -> Path:
        """The file that holds ``key``: always inside the root."""
        path = self.root / check_key(key)
        # a second guard, on the resolved path: a symlink inside the root, or a future
        # change to the key rule, must still never write outside it
        if not path.resolve().is_relative_to(self.root):
            raise ValueError(f"storage key {key!r} leads outside {self.root}")
        return path

    def url_of(self, key: str) -> str:
        """The URL ``key`` is read back at."""
        if self.public_base_url:
            return f"{self.public_base_url}/{quote(check_key(key))}"
        return self.path_of(key).as_uri()


def storage_from_settings(settings: Settings | None = None) -> Storage:
    """The storage the settings configure: SUPPLIER_PDF_DIR, published under
    SUPPLIER_PDF_BASE_URL when that is set."""
    settings = settings or get_settings()
    return LocalStorage(settings.supplier_pdf_dir, settings.supplier_pdf_base_url)
