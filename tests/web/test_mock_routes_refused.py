"""With API_TOKEN set (a deployment) the mock provider's routes do not exist while
MOCK_CALLBACK_SECRET is the public default, even with the mock configured; ``herald
web`` says so at start (docs/configuration.md#providers)."""

from __future__ import annotations

import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from providers.mock import signed_callback
from tests.support.web_process import StartWeb, web_processes

DEFAULT_SECRET = "herald-mock-secret"


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    """The status of one POST to ``herald web`` on this machine (0: nothing answered)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers={"Content-Type": "application/json", **headers},
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


@pytest.fixture
def start_web(migrated_database: str, redis_url: str, tmp_path: Path) -> Iterator[StartWeb]:
    """``start_web(NAME=value, …)``: ``herald web`` with the mock as every channel's
    provider and those settings; its port and log. Stopped at the end of the test."""
    with web_processes(tmp_path, "127.0.0.1", {
            "DATABASE_URL": migrated_database, "REDIS_URL": redis_url, "BROKER": "redis",
            "QUEUE_PREFIX": f"mr{uuid.uuid4().hex[:8]}", "WEB_CONCURRENCY": "1",
            "LOG_LEVEL": "INFO", "EMAIL_PROVIDER": "mock", "SMS_PROVIDER": "mock",
            "PUSH_PROVIDER": "mock", "ESIM_PROVIDERS": "mock",
            "MOCK_CALLBACK_SECRET": ""}) as start:
        yield start


def mock_receipt(secret: str) -> tuple[bytes, dict[str, str]]:
    """A delivery receipt as the mock signs it with ``secret``."""
    return signed_callback({"provider_message_id": f"m-{uuid.uuid4().hex[:8]}",
                            "channel": "sms"}, "delivered", secret=secret)


def test_with_api_token_and_the_default_secret_the_mock_s_routes_do_not_exist(
        start_web: StartWeb) -> None:
    # Given herald web with API_TOKEN set, the mock configured, MOCK_CALLBACK_SECRET unset
    port, log = start_web(API_TOKEN="deployment-token")
    # When anyone posts a receipt signed with the public default secret, or a webhook
    body, headers = mock_receipt(DEFAULT_SECRET)
    callback = post(port, "/v1/callbacks/mock", body, headers)
    webhook = post(port, "/v1/store/webhooks/mock", b"{}", {})
    # Then neither route exists
    assert (callback, webhook) == (404, 404)
    # and the start said why, at WARNING
    warning = [line for line in log.read_text().splitlines()
               if "/v1/callbacks/mock" in line and "MOCK_CALLBACK_SECRET" in line]
    assert warning and "WARNING" in warning[0], log.read_text()[-2000:]


def test_with_a_secret_of_its_own_the_mock_s_callback_route_answers(
        start_web: StartWeb) -> None:
    # Given API_TOKEN set and MOCK_CALLBACK_SECRET a secret of this deployment
    port, log = start_web(API_TOKEN="deployment-token", MOCK_CALLBACK_SECRET="own-secret")
    # When a receipt signed with it comes, and one signed with the public default
    body, headers = mock_receipt("own-secret")
    forged_body, forged_headers = mock_receipt(DEFAULT_SECRET)
    # Then the first is taken and the second refused as badly signed
    assert post(port, "/v1/callbacks/mock", body, headers) == 202
    assert post(port, "/v1/callbacks/mock", forged_body, forged_headers) == 401
    # and the start warned of nothing about the mock
    assert "MOCK_CALLBACK_SECRET" not in log.read_text()
