"""Provider callbacks as each provider would sign them, for the callback tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlencode

import pytest
from twilio.request_validator import RequestValidator

from herald import settings
from providers.base import hmac_sha256_signature
from providers.mock import MOCK_SIGNATURE_HEADER, signed_callback

TWILIO_TOKEN = "twilio-callback-token"
TAQNYAT_SECRET = "taqnyat-callback-secret"
ONESIGNAL_SECRET = "onesignal-callback-secret"

#: (path, body, headers) of one provider callback.
Callback = tuple[str, bytes, dict[str, str]]


def configure(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    """Set environment variables for this test and re-read the settings."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()


def provider_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configure the Twilio, Taqnyat and OneSignal callback secrets these helpers sign with."""
    configure(monkeypatch, TWILIO_AUTH_TOKEN=TWILIO_TOKEN,
              TAQNYAT_CALLBACK_SECRET=TAQNYAT_SECRET, ONESIGNAL_CALLBACK_SECRET=ONESIGNAL_SECRET)


def twilio_callback(sid: str = "SM" + "a" * 32, status: str = "delivered",
                    url: str = "http://testserver/v1/callbacks/twilio",
                    token: str = TWILIO_TOKEN) -> Callback:
    params = {"MessageSid": sid, "MessageStatus": status, "AccountSid": "AC" + "0" * 32,
              "To": "+966500000001", "ApiVersion": "2010-04-01"}
    # the real SDK's validator computes what Twilio would send
    signature = RequestValidator(token).compute_signature(url, params)
    return ("/v1/callbacks/twilio", urlencode(params).encode(),
            {"X-Twilio-Signature": signature,
             "Content-Type": "application/x-www-form-urlencoded"})


#: The signature header and the secret of each provider that signs with HMAC-SHA256.
HMAC_SIGNERS = {"mock": (MOCK_SIGNATURE_HEADER, "herald-mock-secret"),
                "taqnyat": ("X-Taqnyat-Signature", TAQNYAT_SECRET),
                "onesignal": ("X-OneSignal-Signature", ONESIGNAL_SECRET)}


def hmac_signed(provider: str, body: bytes, secret: str | None = None) -> dict[str, str]:
    """The headers that sign ``body`` as ``provider`` would (with its configured secret
    unless ``secret`` is given)."""
    header, configured = HMAC_SIGNERS[provider]
    return {header: hmac_sha256_signature(secret or configured, body)}


def taqnyat_callback(message_id: str = "1709120", status: str = "delivered",
                     secret: str = TAQNYAT_SECRET) -> Callback:
    body = json.dumps({"messageId": message_id, "status": status,
                       "recipient": "966500000001"}).encode()
    return "/v1/callbacks/taqnyat", body, hmac_signed("taqnyat", body, secret)


def onesignal_callback(message_id: str = "b98881cc-1e94-4366-bbd9-db8f3429292b",
                       kind: str = "message.sms.delivered",
                       secret: str = ONESIGNAL_SECRET) -> Callback:
    body = json.dumps({"event": {"id": "0b5d5c3e-8d7e-4a36-9d3e-5b8c9d6a7e10", "kind": kind},
                       "message": {"id": message_id}}).encode()
    return "/v1/callbacks/onesignal", body, hmac_signed("onesignal", body, secret)


def mock_callback(message_id: str = "mock-1", status: str = "delivered",
                  channel: str = "sms", secret: str = "herald-mock-secret") -> Callback:
    body, headers = signed_callback({"provider_message_id": message_id, "channel": channel},
                                    status, secret=secret)
    return "/v1/callbacks/mock", body, headers


CALLBACKS: dict[str, Callable[..., Callback]] = {
    "twilio": twilio_callback, "taqnyat": taqnyat_callback,
    "onesignal": onesignal_callback, "mock": mock_callback}
