"""The S3 storage of supplier order PDFs against real HTTP servers speaking S3's API: moto's
S3-compatible server (as MinIO or Spaces would answer), and a small server that refuses
every request as an S3 service does (throttling, access denied)."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from herald.settings import Settings, SettingsError, load_settings
from providers.pdf import send_central_kitchen_order
from providers.storage import (
    S3_MAX_ATTEMPTS,
    LocalStorage,
    S3Storage,
    StorageUnavailableError,
    storage_from_settings,
)
from providers.suppliers import SupplierConfigError, is_permanent_failure
from tests.support.providers.smtp_relay import Relay, start_relay
from tests.support.purchasing.documents import SENDER, order
from tests.support.services import find_free_port

KEY = "purchase-orders/order-1/dispatch-1.pdf"
PDF = b"%PDF-1.7 a supplier order"
#: moto accepts any key pair; a real one is given so boto3 never looks for its own
ACCESS_KEY, SECRET_KEY = "herald-test-key", "herald-test-secret-never-shown"


@pytest.fixture(autouse=True)
def _in_tmp_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a storage choice gone wrong falls back to the local default, a relative directory:
    # it must land in the test's own directory
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """A moto S3 server on a free local port: its endpoint URL."""
    port = find_free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def bucket(s3_server: str) -> str:
    """A new empty bucket on the server (one per test: the server outlives the test)."""
    name = f"herald-pdfs-{uuid.uuid4().hex[:12]}"
    reader(s3_server).create_bucket(Bucket=name)
    return name


def reader(endpoint: str) -> Any:
    """A plain boto3 client, independent of herald, to read back what herald stored."""
    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


def s3_settings(endpoint: str, bucket: str, **fields: Any) -> Settings:
    values: dict[str, Any] = {
        "supplier_storage": "s3", "s3_bucket": bucket, "s3_endpoint_url": endpoint,
        "s3_access_key_id": ACCESS_KEY, "s3_secret_access_key": SECRET_KEY}
    values.update(fields)
    return Settings(**values)


def test_a_pdf_is_stored_with_its_content_type_and_read_back_through_a_presigned_url(
        s3_server: str, bucket: str) -> None:
    storage = storage_from_settings(s3_settings(s3_server, bucket, s3_url_ttl_s=3600))

    url = storage.store(KEY, PDF, "application/pdf")

    stored = reader(s3_server).get_object(Bucket=bucket, Key=KEY)
    assert stored["Body"].read() == PDF
    assert stored["ContentType"] == "application/pdf"
    assert url.startswith(f"{s3_server}/{bucket}/{KEY}?")
    assert "X-Amz-Expires=3600" in url
    fetched = httpx.get(url)
    assert fetched.status_code == 200
    assert fetched.content == PDF


def test_with_a_public_base_the_url_is_the_prefixed_key_under_it(
        s3_server: str, bucket: str) -> None:
    storage = storage_from_settings(s3_settings(
        s3_server, bucket, s3_prefix="/lucille/", s3_public_base_url="https://cdn.lucille.test/"))

    url = storage.store(KEY, PDF, "application/pdf")

    assert url == f"https://cdn.lucille.test/lucille/{KEY}"
    stored = reader(s3_server).get_object(Bucket=bucket, Key=f"lucille/{KEY}")
    assert stored["Body"].read() == PDF


def test_storing_the_same_key_again_replaces_the_document(s3_server: str, bucket: str) -> None:
    storage = storage_from_settings(s3_settings(s3_server, bucket))

    storage.store(KEY, b"%PDF-first", "application/pdf")
    storage.store(KEY, b"%PDF-second", "application/pdf")

    client = reader(s3_server)
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]] == [KEY]
    assert client.get_object(Bucket=bucket, Key=KEY)["Body"].read() == b"%PDF-second"


def test_a_missing_bucket_is_a_permanent_configuration_error(s3_server: str) -> None:
    storage = storage_from_settings(s3_settings(s3_server, "no-such-bucket-here"))

    with pytest.raises(SupplierConfigError, match="NoSuchBucket") as raised:
        storage.store(KEY, PDF, "application/pdf")

    assert is_permanent_failure(raised.value)
    assert SECRET_KEY not in str(raised.value)


def test_a_stopped_server_is_a_transient_error(bucket: str) -> None:
    port = find_free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    reader(endpoint).create_bucket(Bucket=bucket)
    storage = storage_from_settings(s3_settings(endpoint, bucket))
    server.stop()

    with pytest.raises(StorageUnavailableError, match=bucket) as raised:
        storage.store(KEY, PDF, "application/pdf")

    assert not is_permanent_failure(raised.value)


class Refusing(BaseHTTPRequestHandler):
    """Answers every request with the status and S3 error code the server was given."""

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server: RefusingServer = self.server  # type: ignore[assignment]
        server.requests += 1
        body = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{server.code}</Code>"
                f"<Message>refused by the test</Message></Error>").encode()
        self.send_response(server.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class RefusingServer(ThreadingHTTPServer):
    def __init__(self, status: int, code: str) -> None:
        super().__init__(("127.0.0.1", find_free_port()), Refusing)
        self.status, self.code, self.requests = status, code, 0


@pytest.fixture
def refusing(request: pytest.FixtureRequest) -> Iterator[RefusingServer]:
    server = RefusingServer(*request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.mark.parametrize(("refusing", "permanent"), [
    ((503, "SlowDown"), False),
    ((500, "InternalError"), False),
    ((403, "AccessDenied"), True),
    ((403, "InvalidAccessKeyId"), True),
    ((403, "SignatureDoesNotMatch"), True),
], indirect=["refusing"])
def test_refusals_are_classified_and_retried_only_a_few_times_inside(
        refusing: RefusingServer, permanent: bool) -> None:
    endpoint = f"http://127.0.0.1:{refusing.server_address[1]}"
    storage = storage_from_settings(s3_settings(endpoint, "lucille-pdfs"))

    with pytest.raises((SupplierConfigError, StorageUnavailableError),
                       match=refusing.code) as raised:
        storage.store(KEY, PDF, "application/pdf")

    assert is_permanent_failure(raised.value) is permanent
    assert isinstance(raised.value, SupplierConfigError) is permanent
    # the dispatch is what retries: botocore itself tries a bounded number of times
    assert 1 <= refusing.requests <= S3_MAX_ATTEMPTS


def test_the_settings_choose_the_storage(s3_server: str, tmp_path: Path) -> None:
    assert isinstance(storage_from_settings(Settings(supplier_pdf_dir=str(tmp_path))),
                      LocalStorage)
    chosen = storage_from_settings(s3_settings(s3_server, "lucille-pdfs"))
    assert isinstance(chosen, S3Storage)
    assert chosen.bucket == "lucille-pdfs"
    assert SECRET_KEY not in repr(chosen)


def test_s3_storage_without_a_bucket_stops_the_settings_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUPPLIER_STORAGE", "s3")
    monkeypatch.delenv("S3_BUCKET", raising=False)

    with pytest.raises(SettingsError, match="S3_BUCKET must be set when SUPPLIER_STORAGE=s3"):
        load_settings()

    monkeypatch.setenv("S3_BUCKET", "lucille-pdfs")
    assert load_settings().s3_bucket == "lucille-pdfs"


@pytest.mark.parametrize(("variable", "value"), [
    ("SUPPLIER_STORAGE", "ftp"), ("S3_ENDPOINT_URL", "minio.local:9000"),
    ("S3_PUBLIC_BASE_URL", "cdn.lucille.test"), ("S3_URL_TTL_S", "604801"),
])
def test_an_invalid_s3_setting_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    monkeypatch.setenv("S3_BUCKET", "lucille-pdfs")
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError, match=variable):
        load_settings()


def test_the_secret_key_is_not_in_the_settings_repr() -> None:
    settings = Settings(s3_secret_access_key=SECRET_KEY)

    assert SECRET_KEY not in repr(settings)
    assert settings.s3_secret_access_key == SECRET_KEY


def test_an_invalid_prefix_is_a_configuration_error(s3_server: str) -> None:
    with pytest.raises(SupplierConfigError, match="S3_PREFIX"):
        storage_from_settings(s3_settings(s3_server, "lucille-pdfs", s3_prefix="../other"))


def test_without_boto3_the_s3_storage_is_a_clear_permanent_error(
        monkeypatch: pytest.MonkeyPatch, s3_server: str) -> None:
    # as on an install without the s3 extra: importing boto3 fails
    monkeypatch.setitem(sys.modules, "boto3", None)

    with pytest.raises(SupplierConfigError, match=r"herald\[s3\]") as raised:
        storage_from_settings(s3_settings(s3_server, "lucille-pdfs"))

    assert is_permanent_failure(raised.value)


@pytest.fixture
def relay() -> Iterator[tuple[Relay, int]]:
    server, controller = start_relay()
    yield server, controller.port
    controller.stop()


def test_the_central_kitchen_pdf_is_stored_in_the_bucket_and_attached(
        s3_server: str, bucket: str, relay: tuple[Relay, int]) -> None:
    server, smtp_port = relay
    settings = s3_settings(s3_server, bucket, s3_prefix="po",
                           smtp_host="127.0.0.1", smtp_port=smtp_port, smtp_starttls=False,
                           email_from=SENDER)

    sent = send_central_kitchen_order(order(), to="orders@central-kitchen.test",
                                      supplier_name="Central Kitchen", settings=settings)

    assert sent.audit["pdfKey"] == KEY
    stored = reader(s3_server).get_object(Bucket=bucket, Key=f"po/{KEY}")
    data = stored["Body"].read()
    assert data.startswith(b"%PDF-")
    assert stored["ContentType"] == "application/pdf"
    assert sent.audit["pdfBytes"] == len(data)
    assert sent.audit["pdfUrl"].startswith(f"{s3_server}/{bucket}/po/{KEY}?")
    assert httpx.get(sent.audit["pdfUrl"]).content == data
    [received] = server.received
    [attachment] = list(received.message.iter_attachments())
    assert attachment.get_content() == data
