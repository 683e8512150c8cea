"""Which IP addresses an outgoing fetch may reach: public ones, unless the owner allows more."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance metadata services hand out cloud credentials; they stay refused even with
# allow_private, and only an explicit allowed_hosts entry opens them.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, …
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.169.253",  # AWS DNS resolver
        "100.100.100.200",  # Alibaba Cloud
        "fd00:ec2::254",  # AWS IMDS over IPv6
    )
)

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    packed = ip.packed
    if ip in _NAT64 or (packed[:12] == bytes(12) and int(ip) > 1):
        # NAT64 and the deprecated IPv4-compatible form (::a.b.c.d) end in the IPv4 address.
        return ipaddress.IPv4Address(packed[12:])
    return None


def blocked_reason(ip: IPAddress) -> str | None:
    """Why a fetch must not connect to this address by default, or None if it is public."""
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata service address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_ipv4(ip)
        if inner is not None:
            reason = blocked_reason(inner)
            return f"an IPv6 form of {inner}, {reason}" if reason else None
        if ip.is_site_local:
            return "a site-local address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT:
        return "a carrier-grade NAT (shared) address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return "an unspecified address"
    if ip.is_private:
        return "a private network address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved, non-public address"
    return None


@dataclass(frozen=True)
class AddressPolicy:
    """The owner's exceptions: private addresses in general, or named hosts and networks."""

    allow_private: bool = False
    hosts: frozenset[str] = frozenset()
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_entries(cls, entries: Iterable[str], *, allow_private: bool = False) -> AddressPolicy:
        """Split `allowed_hosts` entries into host names and IP networks."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in entries:
            text = entry.strip().lower().rstrip(".")
            try:
                networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            except ValueError:
                hosts.add(text)
        return cls(allow_private=allow_private, hosts=frozenset(hosts), networks=tuple(networks))

    def host_allowed(self, host: str) -> bool:
        """True when the owner listed this host name: any address it resolves to is fine."""
        return host.lower().rstrip(".") in self.hosts

    def refusal(self, host: str, ip: IPAddress) -> str | None:
        """Why connecting to `ip` for `host` is refused, or None when it is allowed."""
        if self.host_allowed(host) or any(ip in net for net in self.networks):
            return None
        reason = blocked_reason(ip)
        if reason is None:
            return None
        if self.allow_private and ip not in METADATA_ADDRESSES:
            return None
        return f"{host} resolves to {ip}, {reason}" if host != str(ip) else f"{ip} is {reason}"


def parse_ip(host: str) -> IPAddress | None:
    """The address when `host` is an IP literal (brackets allowed), else None."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
