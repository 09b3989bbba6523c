"""What a build does with each answer of the store."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from corpora.fetch import REASONS
from corpora.fetch.settings import TRANSIENT
from corpora.store.outcomes import (
    RECHECKED,
    RETRYABLE,
    UNKNOWN,
    Failed,
    ImageRef,
    Stored,
    needs_fetch,
    resolve,
)

STORED = Stored("u", "k", ImageRef("a.tar", 512, 3, "ab"), 4, 4, "JPEG", 200)


def test_retryable_reasons_are_timeouts_connection_errors_5xx_429_and_no_robots_txt():
    assert RETRYABLE == {
        "timeout",
        "connection_error",
        "http_5xx",
        "http_429",
        "robots_unavailable",
    }
    assert TRANSIENT <= RETRYABLE  # what a build retries at once, a later build may too
    assert RETRYABLE <= set(REASONS) and RECHECKED <= set(REASONS)


def test_decisions_for_every_fetch_reason():
    reasons = list(REASONS) + ["http_404", "http_410", "http_403"]
    for reason in reasons:
        failed = Failed("u", reason)
        assert needs_fetch(failed) is False  # a plain resume never refetches a failure
        again = reason in RETRYABLE or reason in RECHECKED
        assert needs_fetch(failed, refetch_failures=True) is again, reason
    for reason in ("opted_out", "tdm_reserved", "http_404", "not_image"):
        assert needs_fetch(Failed("u", reason, 200), refetch_failures=True) is False
    assert needs_fetch(UNKNOWN) and needs_fetch(UNKNOWN, refetch_failures=True)
    assert not needs_fetch(STORED) and not needs_fetch(STORED, refetch_failures=True)


def test_a_success_wins_over_failures_before_and_after_it():
    rows = [(1.0, Failed("u", "timeout")), (2.0, STORED), (3.0, Failed("u", "http_5xx"))]
    assert resolve(rows) is STORED


def test_the_first_stored_copy_wins_so_references_stay_valid():
    later = Stored("u", "k", ImageRef("b.tar", 0, 3, "ab"), 4, 4, "JPEG")
    assert resolve([(5.0, later), (2.0, STORED)]) is STORED


def test_the_latest_failure_wins_when_nothing_was_stored():
    rows = [(3.0, Failed("u", "http_404", 404)), (1.0, Failed("u", "timeout"))]
    assert resolve(rows).reason == "http_404"


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5).map(float),
            st.sampled_from(["timeout", "http_404", "opted_out", "stored-a", "stored-b"]),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_resolve_does_not_depend_on_the_order_of_rows(spec):
    def outcome(kind):
        if kind.startswith("stored"):
            return Stored("u", "k", ImageRef(kind + ".tar", 0, 1, "x"), 1, 1, "PNG")
        return Failed("u", kind)

    rows = [(when, outcome(kind)) for when, kind in spec]
    results = {resolve(list(order)) for order in itertools.permutations(rows)}
    assert len(results) == 1
