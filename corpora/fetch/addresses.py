"""Which IP addresses an image fetch may connect to.

URL lists come from the open web, so a host name in one may resolve to an
address inside the builder's own network: loopback, a private range, the cloud
metadata service at 169.254.169.254. The fetch refuses those before it
connects (and then connects to the very address it checked), with the reason
``blocked_address``. :func:`refusal` is that decision: ``None`` for an address
on the public internet, else a few words saying why not, for the detail.

IPv6 can carry an IPv4 address inside it, and a translator or tunnel on the
path delivers the connection to that IPv4 address. Python's ``is_global``
judges only the IPv6 wrapper and counts most of these forms as public, so each
form is decoded here and the IPv4 address inside is judged instead:

=====================  =====================  ==========================================
form                   prefix                 where the IPv4 address sits
=====================  =====================  ==========================================
IPv4-mapped            ``::ffff:0:0/96``      the last 32 bits
IPv4-compatible        ``::/96``              the last 32 bits (deprecated, RFC 4291)
IPv4-translated        ``::ffff:0:0:0/96``    the last 32 bits (SIIT, RFC 2765)
NAT64                  ``64:ff9b::/96``       the last 32 bits (RFC 6052)
NAT64, local use       ``64:ff9b:1::/48``     wherever RFC 6052 puts it for a /48 to /96
                                              prefix: every reading is judged
6to4                   ``2002::/16``          bits 16-47 (RFC 3056)
Teredo                 ``2001::/32``          server bits 32-63; client the last 32 bits,
                                              inverted (RFC 4380)
=====================  =====================  ==========================================

An address is refused when any IPv4 address it may carry is refused, so an
IPv4 address the guard refuses is refused in every wrapping. Outside these
forms only global unicast space (``2000::/3``, less its special blocks) is
public; that also refuses the deprecated site-local ``fec0::/10``. The tables
are this module's own rather than the interpreter's, so a decision does not
change with the Python version.

>>> refusal("93.184.216.34") is None
True
>>> [refusal(a) for a in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "fec0::1")]
['loopback', 'private', 'link_local', 'loopback', 'site_local']
>>> refusal("64:ff9b::7f00:1")
'loopback 127.0.0.1 inside NAT64'
>>> refusal("2002:a01:203::1")
'private 10.1.2.3 inside 6to4'
>>> refusal("64:ff9b::5db8:d822") is None  # 93.184.216.34 through a NAT64 gateway
True
>>> refusal("10.1.2.3", allow_networks=("10.0.0.0/8",)) is None  # an internal mirror
True
"""

from __future__ import annotations

import functools
import ipaddress
from typing import Iterable

REASON = "blocked_address"  # the fetch reason of every refusal

IPv4 = ipaddress.IPv4Address
IPv6 = ipaddress.IPv6Address


def _table(*rows: tuple[str, str]) -> tuple[tuple[ipaddress._BaseNetwork, str], ...]:
    return tuple((ipaddress.ip_network(network), name) for network, name in rows)


# IANA's special-purpose IPv4 registry, the blocks that are not globally
# reachable, plus multicast and the rest of 240/4.
_IPV4_REFUSED = _table(
    ("0.0.0.0/8", "this_network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared"),  # carrier-grade NAT
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link_local"),  # the cloud metadata service lives here
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "ietf_protocol"),
    ("192.0.2.0/24", "documentation"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)

_IPV6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_IPV6_REFUSED = _table(
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("100::/64", "discard"),
    ("2001::/23", "ietf_protocol"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "unique_local"),
    ("fe80::/10", "link_local"),
    ("fec0::/10", "site_local"),
    ("ff00::/8", "multicast"),
)

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def rfc6052_ipv4(address: IPv6, prefix_length: int) -> IPv4:
    """The IPv4 address that RFC 6052 embeds after a ``prefix_length`` prefix
    (32, 40, 48, 56, 64 or 96); bits 64-71 (the "u" octet) are never part of it.

    RFC 6052's own examples, all carrying 192.0.2.33:

    >>> [str(rfc6052_ipv4(IPv6(a), n)) for a, n in [("2001:db8:c000:221::", 32),
    ...     ("2001:db8:1c0:2:21::", 40), ("2001:db8:122:c000:2:2100::", 48),
    ...     ("2001:db8:122:3c0:0:221::", 56), ("2001:db8:122:344:c0:2:2100:0", 64),
    ...     ("2001:db8:122:344::192.0.2.33", 96)]]
    ['192.0.2.33', '192.0.2.33', '192.0.2.33', '192.0.2.33', '192.0.2.33', '192.0.2.33']
    """
    bits = int(address)
    if prefix_length == 96:
        return IPv4(bits & 0xFFFFFFFF)
    if prefix_length not in (32, 40, 48, 56, 64):
        raise ValueError(f"RFC 6052 has no prefix length {prefix_length}")
    without_u = ((bits >> 64) << 56) | (bits & ((1 << 56) - 1))  # 120 bits, the u octet cut out
    return IPv4((without_u >> (120 - prefix_length - 32)) & 0xFFFFFFFF)


def embedded_ipv4(address: IPv6) -> tuple[tuple[str, IPv4], ...]:
    """The IPv4 addresses an IPv6 address may deliver a connection to, each
    with the name of its form; empty for an address that wraps none.

    >>> teredo = IPv6("2001:0:4136:e378:8000:63bf:3fff:fdd2")
    >>> [(form, str(ip)) for form, ip in embedded_ipv4(teredo)]
    [('Teredo server', '65.54.227.120'), ('Teredo client', '192.0.2.45')]
    """
    if address in _MAPPED:
        return (("IPv4-mapped", IPv4(int(address) & 0xFFFFFFFF)),)
    if address in _TRANSLATED:
        return (("IPv4-translated", IPv4(int(address) & 0xFFFFFFFF)),)
    if address in _COMPATIBLE:
        return (("IPv4-compatible", IPv4(int(address) & 0xFFFFFFFF)),)
    if address in _NAT64:
        return (("NAT64", rfc6052_ipv4(address, 96)),)
    if address in _NAT64_LOCAL:  # the operator's prefix length is unknown: read every one
        return tuple(("local NAT64", rfc6052_ipv4(address, n)) for n in (48, 56, 64, 96))
    if address in _SIX_TO_FOUR:
        return (("6to4", address.sixtofour),)
    if address in _TEREDO:
        server, client = address.teredo
        return (("Teredo server", server), ("Teredo client", client))
    return ()


def _lookup(address, table) -> str | None:
    for network, name in table:
        if address in network:
            return name
    return None


def _ipv6_refusal(address: IPv6) -> str | None:
    if address in _COMPATIBLE and int(address) <= 1:  # :: and ::1 are not IPv4-compatible
        return _lookup(address, _IPV6_REFUSED)
    wrapped = embedded_ipv4(address)
    for form, inner in wrapped:
        why = _lookup(inner, _IPV4_REFUSED)
        if why:
            return f"{why} {inner} inside {form}"
    if wrapped:
        return None
    if address not in _IPV6_GLOBAL_UNICAST:
        return _lookup(address, _IPV6_REFUSED) or "reserved"
    return _lookup(address, _IPV6_REFUSED)


@functools.lru_cache(maxsize=64)  # a fetch asks with the same few networks for every URL
def _networks(allow_networks: tuple[str, ...]) -> tuple[ipaddress._BaseNetwork, ...]:
    return tuple(ipaddress.ip_network(n, strict=False) for n in allow_networks)


def refusal(
    address: str, *, allow_private: bool = False, allow_networks: Iterable[str] = ()
) -> str | None:
    """``None`` when a fetch may connect to ``address``, else why it may not.

    ``allow_private`` lets every address through (a build over an internal
    network); ``allow_networks`` lets through the addresses inside those CIDRs;
    an IPv6 address that wraps IPv4 addresses passes only where every one
    of them is inside them or not refused (a Teredo address whose server is
    allowed still names its client). A zone
    (``fe80::1%eth0``) is ignored. Raises ``ValueError`` for text that is not
    an IP address.

    >>> refusal("::ffff:10.1.2.3", allow_networks=("10.0.0.0/8",)) is None
    True
    >>> refusal("2001:0:a00:1::80ff:fffe", allow_networks=("10.0.0.0/8",))  # Teredo
    'loopback 127.0.0.1 inside Teredo client'
    >>> refusal("2001:db8::1"), refusal("ff02::1"), refusal("::127.0.0.1")
    ('documentation', 'multicast', 'loopback 127.0.0.1 inside IPv4-compatible')
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if allow_private:
        return None
    networks = _networks(tuple(allow_networks))
    if networks:
        wrapped = embedded_ipv4(ip) if ip.version == 6 and int(ip) > 1 else ()
        if not wrapped and any(ip in network for network in networks):
            return None
        if wrapped:  # every address it wraps must be allowed, or not refused
            for form, inner in wrapped:
                why = _lookup(inner, _IPV4_REFUSED)
                if why and not any(inner in network for network in networks):
                    return f"{why} {inner} inside {form}"
            return None
    if ip.version == 4:
        return _lookup(ip, _IPV4_REFUSED)
    return _ipv6_refusal(ip)
