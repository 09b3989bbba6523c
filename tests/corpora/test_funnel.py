import pytest

from corpora.funnel import FunnelError, make_funnel


def test_funnel_balances_and_lists_reasons_sorted():
    funnel = make_funnel("pair", 10, 6, {"http_404": 3, "bad_json": 1, "timeout": 0})
    assert funnel == {
        "unit": "pair",
        "input": 10,
        "kept": 6,
        "dropped": {"bad_json": 1, "http_404": 3},
    }


def test_a_funnel_that_does_not_balance_is_an_error():
    with pytest.raises(FunnelError, match="input 10 != kept 6 \\+ dropped 3"):
        make_funnel("pair", 10, 6, {"http_404": 3})
