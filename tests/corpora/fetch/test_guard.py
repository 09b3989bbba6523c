from __future__ import annotations

import dataclasses

import pytest

from corpora.fetch import FetchSettings, address_allowed, address_is_public
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
