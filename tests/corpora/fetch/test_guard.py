from __future__ import annotations

import dataclasses

import pytest

from corpora.fetch import FetchSettings, address_allowed, address_is_public
from corpora.fetch.attempt import attempt
from corpora.fetch.connections import ConnectionPool, DnsCache
from tests.corpora.fetch.common import FAST, fetch_all, fetch_one


@pytest.mark.parametrize(
    "address, public",
    [
        ("93.184.216.34", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("192.168.0.1", False),
        ("172.16.5.4", False),
        ("169.254.169.254", False),  # the cloud metadata address
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),
        ("2606:4700::1111", True),
    ],
)
def test_address_safety(address, public):
    assert address_is_public(address) is public


def test_allow_networks_lets_through_only_their_addresses():
    settings = FetchSettings(allow_networks=("10.0.0.0/8", "fd00::/8"))
    assert address_allowed("10.200.0.1", settings) and address_allowed("fd00::5", settings)
    assert not address_allowed("192.168.0.1", settings)
    assert not address_allowed("169.254.169.254", settings)


def test_guard_on_means_the_server_receives_no_request(server):
    settings = dataclasses.replace(FAST, allow_networks=())
    urls = [server.url("/img/10x10/a.jpg"), server.url("/status/404")]
    outcomes = fetch_all(urls, settings)
    assert {o.reason for o in outcomes.values()} == {"blocked_address"}
    assert server.requests == [] and server.opened == 0


def test_hostname_resolving_to_loopback_is_refused(server):
    outcome = fetch_one(f"http://localhost:{server.port}/img/10x10/a.jpg", FetchSettings())
    assert outcome.reason == "blocked_address"
    assert server.requests == []


def test_a_redirect_to_a_refused_address_is_refused_before_connecting(server, other_loopback):
    hop = server.url("/redirect?to=" + other_loopback.url("/img/10x10/elsewhere.jpg"))
    metadata = server.url("/redirect?to=http://169.254.169.254/latest/meta-data/")
    outcomes = fetch_all([hop, metadata])
    assert [outcomes[hop].reason, outcomes[metadata].reason] == ["blocked_address"] * 2
    assert other_loopback.requests == []


def test_allow_private_urls_turns_the_guard_off(server):
    settings = dataclasses.replace(FAST, allow_networks=(), allow_private_urls=True)
    assert fetch_one(server.url("/img/10x10/a.jpg"), settings).ok


# Issue 16, defect 8: addresses that wrap loopback or private IPv4 passed the guard
# (Python's is_global called them public). Decisions only: nothing is sent.
@pytest.mark.parametrize(
    "address, why",
    [
        ("64:ff9b::7f00:1", "loopback 127.0.0.1 inside NAT64"),
        ("64:ff9b::a9fe:a9fe", "link_local 169.254.169.254 inside NAT64"),
        ("2002:a00:1::1", "private 10.0.0.1 inside 6to4"),
        ("::127.0.0.1", "loopback 127.0.0.1 inside IPv4-compatible"),
        ("::ffff:192.168.0.1", "private 192.168.0.1 inside IPv4-mapped"),
        ("fec0::1", "site_local"),
    ],
)
def test_addresses_wrapping_a_refused_ipv4_address_are_refused(address, why):
    assert not address_is_public(address)
    assert not address_allowed(address, FetchSettings())
    lookups = []

    def lookup(host, port):
        lookups.append(host)
        return [address]

    pool = ConnectionPool(1)
    result = attempt("http://images.example/a.jpg", FetchSettings(), pool, DnsCache(lookup=lookup))
    assert (result.reason, result.detail) == ("blocked_address", f"{why} ({address})")
    assert (
        lookups == ["images.example"] and pool.get(("http", "images.example", 80, address)) is None
    )


def test_allow_network_matches_the_ipv4_address_inside_a_wrapping():
    settings = FetchSettings(allow_networks=("10.0.0.0/8",))
    assert address_allowed("64:ff9b::a01:203", settings)
    assert not address_allowed("64:ff9b::c0a8:1", settings)
