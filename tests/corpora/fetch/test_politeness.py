import math

import pytest

from corpora.fetch.politeness import HostPolicy


def test_concurrency_cap_per_host_and_independent_hosts():
    policy = HostPolicy(max_concurrent=2, rate=0)
    assert [policy.try_acquire("a", 0.0) for _ in range(3)] == [0.0, 0.0, math.inf]
    assert policy.try_acquire("b", 0.0) == 0.0  # another host is not held back by "a"
    policy.release("a")
    assert policy.try_acquire("a", 0.0) == 0.0
    assert policy.in_flight("a") == 2


def test_rate_limit_spaces_request_starts():
    policy = HostPolicy(max_concurrent=100, rate=4.0)
    starts = [policy.try_acquire("a", 0.0) for _ in range(4)]  # one second's worth starts at once
    assert starts == [0.0] * 4
    assert policy.try_acquire("a", 0.0) == pytest.approx(0.25)
    assert policy.try_acquire("a", 0.25) == 0.0
    assert policy.try_acquire("a", 0.25) == pytest.approx(0.25)


def test_pause_holds_a_host_until_its_time():
    policy = HostPolicy(max_concurrent=4, rate=0)
    policy.pause("a", until=5.0)
    assert policy.try_acquire("a", 1.0) == pytest.approx(4.0)
    assert policy.try_acquire("b", 1.0) == 0.0
    assert policy.try_acquire("a", 5.0) == 0.0


def test_rejects_nonsense_limits():
    with pytest.raises(ValueError):
        HostPolicy(max_concurrent=0)
    with pytest.raises(ValueError):
        HostPolicy(rate=-1)


def test_docstring_examples():
    import doctest

    from corpora.fetch import politeness

    assert doctest.testmod(politeness).failed == 0


def test_idle_hosts_are_forgotten_once_their_bucket_is_full_again():
    policy = HostPolicy(max_concurrent=2, rate=2.0)
    for host in ("a", "b"):
        assert policy.try_acquire(host, 0.0) == 0.0
        policy.release(host)
    policy.pause("c", until=10.0)
    policy.forget_idle(0.1)
    assert set(policy._hosts) == {"a", "b", "c"}  # buckets not yet refilled; c paused
    policy.forget_idle(1.0)
    assert set(policy._hosts) == {"c"}
    policy.forget_idle(10.0)
    assert policy._hosts == {}


def test_a_crawl_delay_spaces_starts_beyond_the_rate_and_outlives_forgetting():
    policy = HostPolicy(max_concurrent=4, rate=10.0)
    policy.space("a", 2.0)
    assert policy.try_acquire("a", 0.0) == 0.0
    policy.release("a")
    assert policy.try_acquire("a", 1.0) == pytest.approx(1.0)  # the rate alone would allow it
    policy.forget_idle(100.0)
    assert policy.try_acquire("a", 100.0) == 0.0
    assert policy.try_acquire("a", 100.5) == pytest.approx(1.5)
    assert policy.try_acquire("b", 100.5) == 0.0  # other hosts keep their own pace
