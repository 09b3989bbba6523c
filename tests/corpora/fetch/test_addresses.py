"""The address guard's decisions (no packet is sent: only decisions are checked)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.fetch.addresses import REASON, embedded_ipv4, refusal, rfc6052_ipv4

NO_DEADLINE = settings(deadline=None)  # decisions only: no wall-clock bound

IPv4 = ipaddress.IPv4Address
IPv6 = ipaddress.IPv6Address

# What today's guard (corpora/fetch.py, Python's is_global) already decides: kept as is.
TODAY = {
    "93.184.216.34": True,
    "8.8.8.8": True,
    "2606:4700:4700::1111": True,
    "127.0.0.1": False,
    "10.1.2.3": False,
    "172.16.5.4": False,
    "192.168.1.1": False,
    "169.254.169.254": False,
    "100.64.0.1": False,
    "0.0.0.0": False,
    "224.0.0.1": False,
    "255.255.255.255": False,
    "::1": False,
    "::": False,
    "fe80::1": False,
    "fc00::1": False,
    "fd12:3456::1": False,
    "ff02::1": False,
    "::ffff:127.0.0.1": False,
    "::ffff:10.0.0.1": False,
    "::ffff:8.8.8.8": True,
    "2001:db8::1": False,
}

# Issue 16, defect 8: each of these counted as public.
WRAPPED_PRIVATE = {
    "64:ff9b::7f00:1": "loopback 127.0.0.1 inside NAT64",
    "64:ff9b::a9fe:a9fe": "link_local 169.254.169.254 inside NAT64",
    "64:ff9b::192.168.0.1": "private 192.168.0.1 inside NAT64",
    "2002:7f00:1::1": "loopback 127.0.0.1 inside 6to4",
    "2002:a00:1::": "private 10.0.0.1 inside 6to4",
    "::127.0.0.1": "loopback 127.0.0.1 inside IPv4-compatible",
    "::10.0.0.1": "private 10.0.0.1 inside IPv4-compatible",
    "::ffff:0:7f00:1": "loopback 127.0.0.1 inside IPv4-translated",
    "fec0::1": "site_local",
    "fec0:1234::abcd": "site_local",
}


@pytest.mark.parametrize("address, allowed", sorted(TODAY.items()))
def test_todays_decisions_are_kept(address, allowed):
    assert (refusal(address) is None) is allowed


@pytest.mark.parametrize("address, why", sorted(WRAPPED_PRIVATE.items()))
def test_addresses_that_wrap_a_private_ipv4_or_are_site_local_are_refused(address, why):
    assert refusal(address) == why


def test_public_ipv4_through_a_translator_is_allowed():
    public = "93.184.216.34"
    for address in ("64:ff9b::5db8:d822", "2002:5db8:d822::1", "::ffff:93.184.216.34"):
        assert refusal(address) is None, address
    assert str(embedded_ipv4(IPv6("2002:5db8:d822::1"))[0][1]) == public


def test_teredo_server_and_inverted_client_are_both_judged():
    # RFC 4380's example: server 65.54.227.120, client 192.0.2.45 (a documentation address)
    example = "2001:0:4136:e378:8000:63bf:3fff:fdd2"
    assert [(form, str(ip)) for form, ip in embedded_ipv4(IPv6(example))] == [
        ("Teredo server", "65.54.227.120"),
        ("Teredo client", "192.0.2.45"),
    ]
    assert refusal(example) == "documentation 192.0.2.45 inside Teredo client"
    assert refusal(_teredo(IPv4("65.54.227.120"), IPv4("127.0.0.1"))).startswith("loopback")
    assert refusal(_teredo(IPv4("10.0.0.1"), IPv4("8.8.8.8"))).startswith("private 10.0.0.1")
    assert refusal(_teredo(IPv4("65.54.227.120"), IPv4("8.8.8.8"))) is None


def test_local_use_nat64_is_read_at_every_prefix_length():
    loopback = IPv4("127.0.0.1")
    for length in (48, 56, 64, 96):
        address = _local_nat64(loopback, length, operator_bits=0, suffix=0)
        assert rfc6052_ipv4(address, length) == loopback
        assert refusal(str(address)).endswith("inside local NAT64")
    # the /96 reading alone is public, but the /48 reading of the same bits is 0.0.0.0
    assert refusal("64:ff9b:1::808:808") == "this_network 0.0.0.0 inside local NAT64"


def test_allowances():
    assert refusal("10.1.2.3", allow_private=True) is None
    assert refusal("64:ff9b::7f00:1", allow_private=True) is None
    assert refusal("10.1.2.3", allow_networks=("10.0.0.0/8",)) is None
    assert refusal("10.1.2.3", allow_networks=("192.168.0.0/16",)) == "private"
    # the IPv4 inside is matched too: an internal mirror reached through NAT64 or mapped
    assert refusal("64:ff9b::a01:203", allow_networks=("10.0.0.0/8",)) is None
    assert refusal("::ffff:10.1.2.3", allow_networks=("10.0.0.0/8",)) is None
    assert refusal("fd00::5", allow_networks=("fd00::/8",)) is None


def test_an_allowed_network_does_not_let_through_an_address_wrapped_beside_it():
    """Issue 30, defect 15: a Teredo address whose server is in the allowed
    network and whose client is 127.0.0.1 is refused for its client; every
    wrapped address must pass."""
    teredo = "2001:0:a00:1::80ff:fffe"  # server 10.0.0.1, client 127.0.0.1
    assert refusal(teredo, allow_networks=("10.0.0.0/8",)) == (
        "loopback 127.0.0.1 inside Teredo client"
    )
    assert refusal(teredo, allow_networks=("10.0.0.0/8", "127.0.0.0/8")) is None
    public_client = "2001:0:a00:1::f7f7:f7f7"  # client 8.8.8.8
    assert refusal(public_client, allow_networks=("10.0.0.0/8",)) is None


def test_zone_is_ignored_and_junk_is_a_value_error():
    assert refusal("fe80::1%eth0") == "link_local"
    with pytest.raises(ValueError):
        refusal("not-an-address")
    assert REASON == "blocked_address"


# ---------------------------------------------------------------- properties


def _teredo(server: IPv4, client: IPv4, flags: int = 0, port: int = 0) -> str:
    bits = (0x20010000 << 96) | (int(server) << 64) | (flags << 48) | ((port ^ 0xFFFF) << 32)
    return str(IPv6(bits | (int(client) ^ 0xFFFFFFFF)))


def _local_nat64(ipv4: IPv4, length: int, operator_bits: int, suffix: int) -> IPv6:
    """``ipv4`` embedded after a ``length``-bit prefix inside 64:ff9b:1::/48 (RFC 6052)."""
    prefix = int(IPv6("64:ff9b:1::")) >> 80  # the /48's 48 bits
    if length == 96:
        top = (prefix << 48) | (operator_bits & ((1 << 48) - 1))
        return IPv6((top << 32) | int(ipv4))
    extra = length - 48
    stream = (prefix << extra) | (operator_bits & ((1 << extra) - 1))
    stream = (stream << 32) | int(ipv4)
    rest = 120 - length - 32
    stream = (stream << rest) | (suffix & ((1 << rest) - 1))
    return IPv6(((stream >> 56) << 64) | (stream & ((1 << 56) - 1)))  # u octet stays 0


def _wrappings(ipv4: IPv4, data) -> list[str]:
    """Every IPv6 form of ``ipv4``, the free bits drawn by hypothesis."""
    bits = int(ipv4)
    any16 = st.integers(0, 0xFFFF)
    public_v4 = st.sampled_from([IPv4("8.8.8.8"), IPv4("93.184.216.34"), IPv4("65.54.227.120")])
    subnet_and_host = data.draw(st.integers(0, (1 << 80) - 1))
    forms = [
        str(IPv6((0xFFFF << 32) | bits)),  # mapped
        str(IPv6((0xFFFF << 48) | bits)),  # translated
        str(IPv6((0x0064FF9B << 96) | bits)),  # NAT64
        str(IPv6((0x2002 << 112) | (bits << 80) | subnet_and_host)),  # 6to4
        _teredo(data.draw(public_v4), ipv4, data.draw(any16), data.draw(any16)),
        _teredo(ipv4, data.draw(public_v4), data.draw(any16), data.draw(any16)),
    ]
    if bits > 1:  # ::0.0.0.0 and ::0.0.0.1 are the unspecified and loopback addresses
        forms.append(str(IPv6(bits)))  # compatible
    for length in (48, 56, 64, 96):
        operator_bits = data.draw(st.integers(0, (1 << 48) - 1))
        suffix = data.draw(st.integers(0, (1 << 56) - 1))
        forms.append(str(_local_nat64(ipv4, length, operator_bits, suffix)))
    return forms


ipv4s = st.one_of(
    st.integers(0, (1 << 32) - 1),
    st.sampled_from([0x7F000001, 0x0A000001, 0xA9FEA9FE, 0xC0A80001, 0xAC100001, 0x64400001]),
).map(IPv4)


@NO_DEADLINE
@given(ipv4s, st.data())
def test_an_ipv4_that_is_refused_is_refused_in_every_wrapped_form(ipv4, data):
    if refusal(str(ipv4)) is None:
        return
    for address in _wrappings(ipv4, data):
        assert refusal(address) is not None, (str(ipv4), address)


@NO_DEADLINE
@given(ipv4s)
def test_a_public_ipv4_is_allowed_through_the_translation_forms(ipv4):
    if refusal(str(ipv4)) is not None:
        return
    bits = int(ipv4)
    for address in (
        IPv6((0xFFFF << 32) | bits),
        IPv6((0x0064FF9B << 96) | bits),
        IPv6((0x2002 << 112) | (bits << 80) | 1),
    ):
        assert refusal(str(address)) is None, str(address)


@NO_DEADLINE
@given(ipv4s)
def test_ipv4_at_least_as_strict_as_pythons_is_global(ipv4):
    if not ipv4.is_global or ipv4.is_multicast:
        assert refusal(str(ipv4)) is not None


_SPECIAL_V6 = [
    ipaddress.ip_network(n)
    for n in ("::/8", "100::/64", "2001::/23", "2001:db8::/32", "fc00::/7", "fe80::/10", "ff00::/8")
]
ipv6s = st.one_of(
    st.integers(0, (1 << 128) - 1),
    st.integers(int(IPv6("2000::")), int(IPv6("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))),
    st.tuples(st.sampled_from(_SPECIAL_V6), st.integers(0, (1 << 128) - 1)).map(
        lambda pair: int(pair[0].network_address) | (pair[1] & int(pair[0].hostmask))
    ),
).map(IPv6)


@NO_DEADLINE
@given(ipv6s)
def test_ipv6_outside_the_wrapped_forms_at_least_as_strict_as_pythons_is_global(ipv6):
    if embedded_ipv4(ipv6):
        return  # judged by the IPv4 inside (the property above)
    if not ipv6.is_global or ipv6.is_multicast:
        assert refusal(str(ipv6)) is not None, str(ipv6)
