"""Where generated documents (supplier order PDFs) are kept, behind one small interface.

A :class:`Storage` takes a key (``purchase-orders/<order id>/<dispatch id>.pdf``), the
bytes and their content type, and returns the URL the document can be read back at.
:class:`LocalStorage` — the default — writes under SUPPLIER_PDF_DIR; the URL is the file's
``file://`` URL, or the key under SUPPLIER_PDF_BASE_URL when a web server publishes that
directory. :class:`S3Storage` (SUPPLIER_STORAGE=s3) puts them in a bucket on AWS or any
S3-compatible service (MinIO, DigitalOcean Spaces, Ceph...); it needs the ``s3`` extra
(boto3). Storing the same key again replaces the document (a retried dispatch renders it
again), and a reader never sees a half-written file.

Failures of the S3 storage are classified like a transport's (providers.suppliers):
refused credentials, access denied or a missing bucket are a
:class:`~providers.suppliers.SupplierConfigError` (permanent); an unreachable endpoint, a
timeout, a 5xx or throttling is a :class:`StorageUnavailableError` (retried).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote

from herald.settings import S3_URL_TTL_MAX_S, Settings, get_settings
from providers.suppliers import SupplierConfigError

if TYPE_CHECKING:
    from botocore.client import BaseClient

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


#: Seconds to open a connection to the S3 endpoint, and to wait for its answer: with
#: :data:`S3_MAX_ATTEMPTS`, a store that cannot succeed gives up within about a minute.
S3_CONNECT_TIMEOUT_S = 10
S3_READ_TIMEOUT_S = 20
#: Attempts of one request inside botocore (the first included); past them the dispatch
#: itself is retried, with its own backoff.
S3_MAX_ATTEMPTS = 2
#: S3 error codes no retry can fix: the credentials, the permissions, the bucket or the
#: region are wrong. Any other refusal is retried (losing an order to an over-eager
#: "permanent" is worse than one more attempt).
S3_CONFIG_ERROR_CODES = frozenset({
    "AccessDenied", "AllAccessDisabled", "AccountProblem", "AuthorizationHeaderMalformed",
    "ExpiredToken", "InvalidAccessKeyId", "InvalidBucketName", "InvalidToken",
    "NoSuchBucket", "PermanentRedirect", "SignatureDoesNotMatch", "InvalidSecurity",
    "UnauthorizedAccess",
})


class StorageUnavailableError(Exception):
    """The storage could not be reached or answered with a passing failure (a timeout, a
    5xx, throttling): transient, the dispatch is retried."""

    permanent = False


class S3Storage:
    """Documents as objects in an S3 bucket, under an optional key prefix.

    ``endpoint_url`` empty means AWS; set it for any S3-compatible service (requests then
    use path-style addressing, which every such service understands). Empty keys mean
    boto3's own credential chain. The URL of a document is ``<public_base_url>/<prefix>
    <key>`` when a public base is given, else a presigned GET URL valid ``url_ttl_s``.
    """

    def __init__(self, bucket: str, *, endpoint_url: str = "", region: str = "us-east-1",
                 access_key_id: str = "", secret_access_key: str = "", prefix: str = "",
                 public_base_url: str = "", url_ttl_s: int = S3_URL_TTL_MAX_S) -> None:
        if not bucket.strip():
            raise SupplierConfigError("S3_BUCKET is empty")
        self.bucket = bucket.strip()
        self.prefix = _key_prefix(prefix)
        self.public_base_url = public_base_url.rstrip("/")
        self.url_ttl_s = url_ttl_s
        self.client = _s3_client(endpoint_url=endpoint_url, region=region,
                                 access_key_id=access_key_id,
                                 secret_access_key=secret_access_key)

    def __repr__(self) -> str:
        # never the client: its credentials stay out of logs and tracebacks
        return f"S3Storage(bucket={self.bucket!r}, prefix={self.prefix!r})"

    def store(self, key: str, data: bytes, content_type: str) -> str:
        """Put ``data`` at ``<prefix><key>`` with ``content_type`` (replacing what was
        there; S3 shows readers the old object or the whole new one) and return its URL.
        Raises SupplierConfigError or StorageUnavailableError as classified above."""
        object_key = self.object_key(key)
        with _classified(self.bucket, object_key):
            self.client.put_object(Bucket=self.bucket, Key=object_key, Body=data,
                                   ContentType=content_type)
        return self.url_of(key)

    def object_key(self, key: str) -> str:
        """The object's key in the bucket: the prefix, then the checked ``key``."""
        return self.prefix + check_key(key)

    def url_of(self, key: str) -> str:
        """The URL ``key`` is read back at: under the public base, or presigned."""
        object_key = self.object_key(key)
        if self.public_base_url:
            return f"{self.public_base_url}/{quote(object_key)}"
        with _classified(self.bucket, object_key):
            url: str = self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": object_key},
                ExpiresIn=self.url_ttl_s)
            return url


def _key_prefix(prefix: str) -> str:
    """``prefix`` as it starts object keys: ``po/`` for ``po``, ``/po/`` or ``po/``, empty
    for empty; SupplierConfigError when it is not a valid key (see :func:`check_key`)."""
    segments = prefix.strip().strip("/")
    if not segments:
        return ""
    try:
        return check_key(segments) + "/"
    except ValueError as error:
        raise SupplierConfigError(f"S3_PREFIX: {error}") from None


def _s3_client(*, endpoint_url: str, region: str, access_key_id: str,
               secret_access_key: str) -> BaseClient:
    """A boto3 S3 client with bounded timeouts and few retries; SupplierConfigError when
    boto3 is not installed."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise SupplierConfigError(
            "SUPPLIER_STORAGE=s3 needs boto3: install herald with the s3 extra "
            "(pip install 'herald[s3]')") from None
    config = Config(
        connect_timeout=S3_CONNECT_TIMEOUT_S, read_timeout=S3_READ_TIMEOUT_S,
        retries={"total_max_attempts": S3_MAX_ATTEMPTS, "mode": "standard"},
        signature_version="s3v4",
        s3={"addressing_style": "path" if endpoint_url else "auto"})
    credentials: dict[str, Any] = {}
    if access_key_id or secret_access_key:
        credentials = {"aws_access_key_id": access_key_id,
                       "aws_secret_access_key": secret_access_key}
    # a session of its own: boto3's default session is shared and not thread-safe
    session = boto3.session.Session()
    return session.client("s3", endpoint_url=endpoint_url or None, region_name=region,
                          config=config, **credentials)


@contextlib.contextmanager
def _classified(bucket: str, object_key: str) -> Iterator[None]:
    """Turn botocore's failures into SupplierConfigError (permanent) or
    StorageUnavailableError (transient); anything unknown is left transient."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    where = f"s3://{bucket}/{object_key}"
    try:
        yield
    except ClientError as error:
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        message = f"storing {where} was refused: {code or status} " \
                  f"({error.response.get('Error', {}).get('Message', '')})"
        if code in S3_CONFIG_ERROR_CODES or status in (401, 403):
            raise SupplierConfigError(message) from error
        raise StorageUnavailableError(message) from error
    except (NoCredentialsError, PartialCredentialsError) as error:
        raise SupplierConfigError(
            f"storing {where}: no usable S3 credentials (S3_ACCESS_KEY_ID / "
            f"S3_SECRET_ACCESS_KEY, or boto3's own chain): {error}") from error
    except BotoCoreError as error:  # unreachable endpoint, timeouts, a cut connection
        raise StorageUnavailableError(f"storing {where} failed: {error}") from error


def storage_from_settings(settings: Settings | None = None) -> Storage:
    """The storage the settings configure: with SUPPLIER_STORAGE=s3, the S3 bucket;
    otherwise SUPPLIER_PDF_DIR, published under SUPPLIER_PDF_BASE_URL when that is set."""
    settings = settings or get_settings()
    if settings.supplier_storage == "s3":
        return S3Storage(settings.s3_bucket, endpoint_url=settings.s3_endpoint_url,
                         region=settings.s3_region, access_key_id=settings.s3_access_key_id,
                         secret_access_key=settings.s3_secret_access_key,
                         prefix=settings.s3_prefix,
                         public_base_url=settings.s3_public_base_url,
                         url_ttl_s=settings.s3_url_ttl_s)
    return LocalStorage(settings.supplier_pdf_dir, settings.supplier_pdf_base_url)
