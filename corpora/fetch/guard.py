"""The address guard: may the fetcher connect to this address?

A host that resolves to a loopback, private, link-local (the cloud metadata
address 169.254.169.254 among them), multicast or reserved address is refused
unless ``allow_private_urls`` is set, or the address is inside one of
``allow_networks``; an IPv6 address that wraps an IPv4 one (NAT64, 6to4,
Teredo, IPv4-compatible or mapped) is judged by the IPv4 address inside. The
decision is :func:`corpora.fetch.addresses.refusal`'s, whose tables do not change
with the Python version. The guard judges addresses, not names: the
connection then goes to the address that was judged
(:mod:`corpora.fetch.connections`), so a DNS answer that changes between the
check and the connect cannot slip past it.
"""

from __future__ import annotations

from corpora.fetch import addresses
from corpora.fetch.settings import FetchSettings


def refusal(address: str, settings: FetchSettings) -> str | None:
    """``None`` when the fetch may connect to ``address``, else why not (the
    detail of a ``blocked_address``).

    >>> s = FetchSettings()
    >>> [refusal(a, s) for a in ("93.184.216.34", "169.254.169.254", "64:ff9b::a01:203")]
    [None, 'link_local', 'private 10.1.2.3 inside NAT64']
    >>> refusal("10.1.2.3", FetchSettings(allow_networks=("10.0.0.0/8",))) is None
    True
    """
    return addresses.refusal(
        address, allow_private=settings.allow_private_urls, allow_networks=settings.allow_networks
    )


def address_is_public(address: str) -> bool:
    """A global unicast address, judged through any IPv4 address it wraps.

    >>> [address_is_public(a) for a in ("93.184.216.34", "::ffff:127.0.0.1", "2002:7f00:1::")]
    [True, False, False]
    """
    return addresses.refusal(address) is None


def address_allowed(address: str, settings: FetchSettings) -> bool:
    """May we connect to ``address``?

    >>> s = FetchSettings()
    >>> addresses = ("93.184.216.34", "127.0.0.1", "169.254.169.254", "10.1.2.3", "::1")
    >>> [address_allowed(a, s) for a in addresses]
    [True, False, False, False, False]
    >>> address_allowed("10.1.2.3", FetchSettings(allow_networks=("10.0.0.0/8",)))
    True
    """
    return refusal(address, settings) is None
