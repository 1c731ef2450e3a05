"""The server-side request forgery guard (providers/webhook_target.py): which URLs a
webhook may be sent to, and the address a send then connects to (docs/api.md#webhooks)."""

from __future__ import annotations

import pytest

from providers.webhook_target import UnsafeTarget, check_target

REFUSED = {
    "loopback": "https://127.0.0.1/hook",
    "loopback by name": "https://localhost/hook",
    "IPv6 loopback": "https://[::1]/hook",
    "loopback mapped in IPv6": "https://[::ffff:127.0.0.1]/hook",
    "private": "https://10.1.2.3/hook",
    "private 192.168": "https://192.168.0.10:8443/hook",
    "link-local": "https://169.254.10.1/hook",
    "cloud metadata": "https://169.254.169.254/latest/meta-data/",
    "AWS IPv6 metadata": "https://[fd00:ec2::254]/hook",
    "IPv6 unique-local": "https://[fd12:3456::1]/hook",
    "IPv6 link-local": "https://[fe80::1]/hook",
    "multicast": "https://224.0.0.1/hook",
    "unspecified": "https://0.0.0.0/hook",
    "carrier-grade NAT": "https://100.64.0.1/hook",
}


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_an_internal_address_is_refused(url: str) -> None:
    with pytest.raises(UnsafeTarget, match="WEBHOOK_ALLOW_PRIVATE"):
        check_target(url, allow_http=False, allow_private=False)


@pytest.mark.parametrize("url", REFUSED.values(), ids=REFUSED.keys())
def test_allow_private_lets_an_internal_address_through(url: str) -> None:
    assert check_target(url, allow_http=False, allow_private=True).url == url


def test_a_public_address_passes_and_is_the_address_a_send_connects_to() -> None:
    target = check_target("https://93.184.215.14:8443/hooks?x=1", allow_http=False,
                          allow_private=False)
    assert (target.scheme, str(target.address), target.port) == ("https", "93.184.215.14",
                                                                 8443)


def test_plain_http_needs_the_setting() -> None:
    with pytest.raises(UnsafeTarget, match="WEBHOOK_ALLOW_HTTP"):
        check_target("http://93.184.215.14/hook", allow_http=False, allow_private=False)
    assert check_target("http://93.184.215.14/hook", allow_http=True,
                        allow_private=False).port == 80


@pytest.mark.parametrize("url", ["ftp://93.184.215.14/x", "file:///etc/passwd", "https://",
                                 "https://user:pw@93.184.215.14/", "https://[::1/x",
                                 "https://no-such-host.invalid/"])
def test_what_is_no_sendable_url_is_refused(url: str) -> None:
    with pytest.raises(UnsafeTarget):
        check_target(url, allow_http=True, allow_private=True)
