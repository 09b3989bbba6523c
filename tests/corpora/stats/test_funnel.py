import pytest

from corpora.stats.funnel import FunnelError, make_funnel


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


def test_the_renamed_reasons_table_in_the_docs_is_the_codes():
    import os
    import re

    from corpora.stats.funnel import RENAMED_REASONS
    from tests.helpers import REPO

    with open(os.path.join(REPO, "docs", "shard-format.md"), encoding="utf-8") as handle:
        section = handle.read().split("### Renamed reasons", 1)[1]
    rows = re.findall(r"^\| `([a-z_]+)` \| `([a-z_]+)` \|", section, re.MULTILINE)
    assert dict(rows) == RENAMED_REASONS


def test_old_reason_names_map_to_the_current_ones():
    from corpora.fetch import REASONS
    from corpora.stats.funnel import RENAMED_REASONS, current_reason

    assert set(RENAMED_REASONS).isdisjoint(REASONS)  # an old name is no current fetch reason
    assert current_reason("below_min_sim") == current_reason("clip_sim_below_min")
    assert current_reason("below_min_sim_missing_score") == (
        "clip_similarity_below_min_missing_score"
    )
