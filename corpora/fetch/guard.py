"""The address guard: may the fetcher connect to this address?

A host that resolves to a loopback, private, link-local (the cloud metadata
address 169.254.169.254 among them), multicast or reserved address is refused
unless ``allow_private_urls`` is set, or the address is inside one of
``allow_networks``. The guard judges addresses, not names: the connection then
goes to the address that was judged (:mod:`corpora.fetch.connections`), so a
DNS answer that changes between the check and the connect cannot slip past it.
"""

from __future__ import annotations

import ipaddress

from corpora.fetch.settings import FetchSettings


def address_is_public(address: str) -> bool:
    """A global unicast address (an IPv4-mapped IPv6 address is judged as IPv4).

    >>> [address_is_public(a) for a in ("93.184.216.34", "::ffff:127.0.0.1", "224.0.0.1")]
    [True, False, False]
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def address_allowed(address: str, settings: FetchSettings) -> bool:
    """May we connect to ``address``?

    >>> s = FetchSettings()
    >>> addresses = ("93.184.216.34", "127.0.0.1", "169.254.169.254", "10.1.2.3", "::1")
    >>> [address_allowed(a, s) for a in addresses]
    [True, False, False, False, False]
    >>> address_allowed("10.1.2.3", FetchSettings(allow_networks=("10.0.0.0/8",)))
    True
    """
    if settings.allow_private_urls or address_is_public(address):
        return True
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    return any(ip in ipaddress.ip_network(n, strict=False) for n in settings.allow_networks)
