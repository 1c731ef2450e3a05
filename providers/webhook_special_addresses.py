"""The address ranges a webhook is never sent to: IANA's IPv4 and IPv6 Special-Purpose
Address Registries, written out row by row with their RFCs (docs/api.md#webhooks).

The request-forgery guard (:mod:`providers.webhook_target`) judges an address by this
table alone, never by the running Python's :mod:`ipaddress` flags (``is_private``,
``is_global``…), whose ranges changed between Python releases and let internal
addresses through on some of them.

Beyond IANA's special-purpose rows the table refuses IPv4 multicast (224.0.0.0/4), IPv6
multicast, the deprecated IPv6 site-local range, a few cloud metadata addresses (named so
that a refusal says what was asked for), and every IPv6 address outside the global
unicast space 2000::/3 (not allocated, so nothing a customer can host a receiver on).

Two IPv6 ranges carry an IPv4 address in their last 32 bits and are judged as that
IPv4 address: IPv4-mapped addresses (``::ffff:10.0.0.1`` is 10.0.0.1 to a dual-stack
socket) and the well-known NAT64 prefix (``64:ff9b::/96``: an IPv6-only network's way to
reach a public IPv4 host, which must keep working). 6to4 (2002::/16) is refused outright
rather than judged by the IPv4 address it embeds: it is deprecated (RFC 7526), no
receiver is reached that way today, and a 6to4 relay on herald's own network would turn
it into a path to that relay's neighbours. The local-use NAT64 prefix (64:ff9b:1::/48)
is refused too: where its IPv4 address sits depends on a local choice of prefix length.

When ranges overlap the most specific one names the refusal (192.0.0.8 is "IPv4 dummy
address", not "IETF Protocol Assignments").
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Literal

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: ``refuse``: never sent to. ``metadata``: a cloud metadata service (never sent to, and
#: the refusal names no setting). ``embedded_ipv4``: judged as the IPv4 address in the
#: last 32 bits.
Kind = Literal["refuse", "metadata", "embedded_ipv4"]


@dataclasses.dataclass(frozen=True)
class SpecialRange:
    """One row: the range, its name and where it is defined."""

    network: Network
    name: str
    rfc: str
    kind: Kind = "refuse"


def _row(cidr: str, name: str, rfc: str, kind: Kind = "refuse") -> SpecialRange:
    return SpecialRange(ipaddress.ip_network(cidr), name, rfc, kind)


#: IANA IPv4 Special-Purpose Address Registry, then multicast and metadata addresses.
IPV4_SPECIAL: tuple[SpecialRange, ...] = (
    _row("0.0.0.0/8", '"this network"', "RFC 791 §3.2"),
    _row("0.0.0.0/32", '"this host on this network"', "RFC 1122 §3.2.1.3"),
    _row("10.0.0.0/8", "private-use", "RFC 1918"),
    _row("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598"),
    _row("127.0.0.0/8", "loopback", "RFC 1122 §3.2.1.3"),
    _row("169.254.0.0/16", "link-local", "RFC 3927"),
    _row("172.16.0.0/12", "private-use", "RFC 1918"),
    _row("192.0.0.0/24", "IETF protocol assignments", "RFC 6890 §2.1"),
    _row("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"),
    _row("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    _row("192.0.0.9/32", "Port Control Protocol anycast", "RFC 7723"),
    _row("192.0.0.10/32", "TURN anycast", "RFC 8155"),
    _row("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880, RFC 7050 §2.2"),
    _row("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880, RFC 7050 §2.2"),
    _row("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    _row("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    _row("192.52.193.0/24", "automatic multicast tunneling", "RFC 7450"),
    _row("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    _row("192.168.0.0/16", "private-use", "RFC 1918"),
    _row("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    _row("198.18.0.0/15", "benchmarking", "RFC 2544"),
    _row("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    _row("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    _row("224.0.0.0/4", "multicast", "RFC 5771"),
    _row("240.0.0.0/4", "reserved", "RFC 1112 §4"),
    _row("255.255.255.255/32", "limited broadcast", "RFC 8190, RFC 919 §7"),
    # the metadata services' own addresses, inside rows above
    _row("169.254.169.254/32", "cloud metadata (AWS, GCP, Azure, OpenStack)",
         "the clouds' documentation", "metadata"),
    _row("192.0.0.192/32", "cloud metadata (Oracle Cloud)", "the cloud's documentation",
         "metadata"),
    _row("100.100.100.200/32", "cloud metadata (Alibaba Cloud)", "the cloud's documentation",
         "metadata"),
)

#: IANA IPv6 Special-Purpose Address Registry, then site-local, multicast, what lies
#: outside global unicast, and metadata addresses.
IPV6_SPECIAL: tuple[SpecialRange, ...] = (
    _row("::1/128", "loopback", "RFC 4291 §2.5.3"),
    _row("::/128", "unspecified", "RFC 4291 §2.5.2"),
    _row("::ffff:0:0/96", "IPv4-mapped", "RFC 4291 §2.5.5.2", "embedded_ipv4"),
    _row("64:ff9b::/96", "IPv4-IPv6 translation (NAT64)", "RFC 6052", "embedded_ipv4"),
    _row("64:ff9b:1::/48", "IPv4-IPv6 translation, local use", "RFC 8215"),
    _row("100::/64", "discard-only", "RFC 6666"),
    _row("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    _row("2001::/23", "IETF protocol assignments", "RFC 2928"),
    _row("2001::/32", "Teredo", "RFC 4380, RFC 8190"),
    _row("2001:1::1/128", "Port Control Protocol anycast", "RFC 7723"),
    _row("2001:1::2/128", "TURN anycast", "RFC 8155"),
    _row("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665"),
    _row("2001:2::/48", "benchmarking", "RFC 5180"),
    _row("2001:3::/32", "automatic multicast tunneling", "RFC 7450"),
    _row("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    _row("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    _row("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    _row("2001:30::/28", "drone remote ID entity tags", "RFC 9374"),
    _row("2001:db8::/32", "documentation", "RFC 3849"),
    _row("2002::/16", "6to4", "RFC 3056, deprecated by RFC 7526"),
    _row("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    _row("3fff::/20", "documentation", "RFC 9637"),
    _row("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602"),
    _row("fc00::/7", "unique-local", "RFC 4193"),
    _row("fe80::/10", "link-local", "RFC 4291 §2.5.6"),
    _row("fec0::/10", "deprecated site-local", "RFC 3879"),
    _row("ff00::/8", "multicast", "RFC 4291 §2.7"),
    # IPv6 outside global unicast 2000::/3 (IANA IPv6 Address Space): not allocated
    _row("::/3", "outside global unicast", "RFC 4291 §2.4"),
    _row("4000::/2", "outside global unicast", "RFC 4291 §2.4"),
    _row("8000::/1", "outside global unicast", "RFC 4291 §2.4"),
    _row("fd00:ec2::254/128", "cloud metadata (AWS)", "the cloud's documentation",
         "metadata"),
)


def special_range(address: IPAddress) -> SpecialRange | None:
    """The most specific row ``address`` falls in (None: in none, a public address).
    An address in an ``embedded_ipv4`` row is looked up as the IPv4 address it carries:
    its row when that one is special, else None."""
    rows = IPV4_SPECIAL if isinstance(address, ipaddress.IPv4Address) else IPV6_SPECIAL
    found: SpecialRange | None = None
    for row in rows:
        if address in row.network and (
                found is None or row.network.prefixlen > found.network.prefixlen):
            found = row
    if found is not None and found.kind == "embedded_ipv4":
        return special_range(ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF))
    return found
