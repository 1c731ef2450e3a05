"""The server-side request forgery guard (providers/webhook_target.py): which URLs a
webhook may be sent to, and the address a send then connects to (docs/api.md#webhooks).
Every row of the special-purpose table (providers/webhook_special_addresses.py) is
tested: an address inside it refused and, where its neighbour is an address someone
could host a receiver on, the first address outside it allowed."""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

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
    with pytest.raises(UnsafeTarget, match="resolves to"):
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


class Row(NamedTuple):
    """A range of the table, an address inside it and whether that one is refused (an
    IPv4-mapped or NAT64 address is judged as the IPv4 address it carries), and the
    first address outside it, allowed (None: its neighbour is special too, or no address
    anyone hosts a receiver on); ``metadata``: a cloud metadata address."""

    cidr: str
    inside: str
    outside: str | None = None
    refused: bool = True
    metadata: bool = False


#: The table as this test expects it, written out independently of the module's.
ROWS = [
    # IANA IPv4 Special-Purpose Address Registry
    Row("0.0.0.0/8", "0.1.2.3", "1.0.0.0"),
    Row("0.0.0.0/32", "0.0.0.0"),
    Row("10.0.0.0/8", "10.255.255.255", "11.0.0.0"),
    Row("100.64.0.0/10", "100.127.255.255", "100.128.0.0"),
    Row("127.0.0.0/8", "127.0.0.1", "128.0.0.0"),
    Row("169.254.0.0/16", "169.254.1.1", "169.255.0.0"),
    Row("172.16.0.0/12", "172.31.255.255", "172.32.0.0"),
    Row("192.0.0.0/24", "192.0.0.255", "192.0.1.0"),
    Row("192.0.0.0/29", "192.0.0.1"),
    Row("192.0.0.8/32", "192.0.0.8"),
    Row("192.0.0.9/32", "192.0.0.9"),
    Row("192.0.0.10/32", "192.0.0.10"),
    Row("192.0.0.170/32", "192.0.0.170"),
    Row("192.0.0.171/32", "192.0.0.171"),
    Row("192.0.2.0/24", "192.0.2.1", "192.0.3.0"),
    Row("192.31.196.0/24", "192.31.196.1", "192.31.197.0"),
    Row("192.52.193.0/24", "192.52.193.1", "192.52.194.0"),
    Row("192.88.99.0/24", "192.88.99.1", "192.88.100.0"),
    Row("192.168.0.0/16", "192.168.0.10", "192.169.0.0"),
    Row("192.175.48.0/24", "192.175.48.1", "192.175.49.0"),
    Row("198.18.0.0/15", "198.19.255.255", "198.20.0.0"),
    Row("198.51.100.0/24", "198.51.100.1", "198.51.101.0"),
    Row("203.0.113.0/24", "203.0.113.1", "203.0.114.0"),
    Row("240.0.0.0/4", "240.0.0.1"),
    Row("255.255.255.255/32", "255.255.255.255"),
    # IPv4 multicast; cloud metadata services
    Row("224.0.0.0/4", "239.255.255.255", "223.255.255.255"),
    Row("169.254.169.254/32", "169.254.169.254", metadata=True),
    Row("192.0.0.192/32", "192.0.0.192", metadata=True),
    Row("100.100.100.200/32", "100.100.100.200", metadata=True),
    # IANA IPv6 Special-Purpose Address Registry
    Row("::1/128", "::1"),
    Row("::/128", "::"),
    Row("::ffff:0:0/96", "::ffff:127.0.0.1"),
    Row("::ffff:0:0/96", "::ffff:192.0.0.192", metadata=True),
    Row("::ffff:0:0/96", "::ffff:8.8.8.8", refused=False),
    Row("64:ff9b::/96", "64:ff9b::10.0.0.1"),
    Row("64:ff9b::/96", "64:ff9b::169.254.169.254", metadata=True),
    Row("64:ff9b::/96", "64:ff9b::8.8.8.8", refused=False),
    Row("64:ff9b:1::/48", "64:ff9b:1::808:808"),
    Row("100::/64", "100::1"),
    Row("100:0:0:1::/64", "100:0:0:1::1"),
    Row("2001::/23", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::"),
    Row("2001::/32", "2001:0:4136:e378:8000:63bf:3fff:fdd2"),
    Row("2001:1::1/128", "2001:1::1"),
    Row("2001:1::2/128", "2001:1::2"),
    Row("2001:1::3/128", "2001:1::3"),
    Row("2001:2::/48", "2001:2::1"),
    Row("2001:3::/32", "2001:3::1"),
    Row("2001:4:112::/48", "2001:4:112::1"),
    Row("2001:10::/28", "2001:10::1"),
    Row("2001:20::/28", "2001:20::1"),
    Row("2001:30::/28", "2001:30::1"),
    Row("2001:db8::/32", "2001:db8::1", "2001:db9::"),
    Row("2002::/16", "2002:808:808::", "2003::"),
    Row("2620:4f:8000::/48", "2620:4f:8000::1", "2620:4f:8001::"),
    Row("3fff::/20", "3fff::1", "3fff:1000::"),
    Row("5f00::/16", "5f00::1"),
    Row("fc00::/7", "fd12:3456::1"),
    Row("fe80::/10", "fe80::1"),
    # deprecated site-local, multicast, outside global unicast 2000::/3; AWS metadata
    Row("fec0::/10", "fec0::1"),
    Row("ff00::/8", "ff02::1"),
    Row("::/3", "::7f00:1", "2000::"),
    Row("4000::/2", "4000::1"),
    Row("8000::/1", "8000::1"),
    Row("fd00:ec2::254/128", "fd00:ec2::254", metadata=True),
]


def url(address: str) -> str:
    return f"https://[{address}]/hook" if ":" in address else f"https://{address}/hook"


def row_id(row: Row) -> str:
    return f"{row.cidr} {row.inside}"


def test_the_table_is_tested_row_by_row() -> None:
    from providers.webhook_special_addresses import IPV4_SPECIAL, IPV6_SPECIAL
    table = {str(row.network) for row in (*IPV4_SPECIAL, *IPV6_SPECIAL)}
    assert table == {str(ipaddress.ip_network(row.cidr)) for row in ROWS}
    for row in ROWS:  # each sample lies where it says
        assert ipaddress.ip_address(row.inside) in ipaddress.ip_network(row.cidr)
        assert row.outside is None or (
            ipaddress.ip_address(row.outside) not in ipaddress.ip_network(row.cidr))


@pytest.mark.parametrize("row", [row for row in ROWS if row.refused], ids=row_id)
def test_an_address_in_each_special_range_is_refused(row: Row) -> None:
    with pytest.raises(UnsafeTarget, match="resolves to") as refused:
        check_target(url(row.inside), allow_http=False, allow_private=False)
    # a metadata address is refused without naming the way to it; the others say it
    if row.metadata:
        assert str(refused.value).endswith(", a cloud metadata address")
        assert "WEBHOOK" not in str(refused.value)
    else:
        assert "WEBHOOK_ALLOW_PRIVATE allows it" in str(refused.value)


@pytest.mark.parametrize("row", [row for row in ROWS if row.outside or not row.refused],
                         ids=row_id)
def test_the_first_address_outside_each_range_is_allowed(row: Row) -> None:
    allowed = row.inside if not row.refused else row.outside
    assert allowed is not None
    assert str(check_target(url(allowed), allow_http=False, allow_private=False).address) == (
        str(ipaddress.ip_address(allowed)))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.215.14", "151.101.1.69",
                                     "2606:4700::1", "2a00:1450:4001:82a::200e",
                                     "2001:4860:4860::8888"])
def test_public_addresses_pass(address: str) -> None:
    assert check_target(url(address), allow_http=False, allow_private=False)
