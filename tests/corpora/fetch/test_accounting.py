import pyarrow as pa
import pyarrow.parquet as pq

from corpora.fetch.accounting import failure_schema, failure_urls, first_failure, image_summary
from pipelines.storage import read_failure_urls


def test_image_summary_balances_and_drops_zero_counts():
    summary = image_summary({"ok": 3, "timeout": 2, "http_404": 0})
    assert summary == {
        "input": 5,
        "ok": 3,
        "failed": {"timeout": 2},
        "failures_file": "failures.parquet",
    }


def test_one_row_per_url_is_chosen_the_same_way_whatever_the_order():
    rows = [
        {"url": "u", "reason": "timeout", "status": None, "attempts": 1},
        {"url": "u", "reason": "http_5xx", "status": 503, "attempts": 3},
    ]
    assert first_failure(rows) == first_failure(rows[::-1]) == rows[1]


def test_read_failure_urls_filters_by_reason(tmp_path):
    path = str(tmp_path / "failures.parquet")
    pq.write_table(
        pa.Table.from_pylist(
            [
                {"url": "a", "reason": "timeout", "status": None, "attempts": 1},
                {"url": "b", "reason": "http_404", "status": 404, "attempts": 1},
            ],
            schema=failure_schema(),
        ),
        path,
    )
    assert read_failure_urls(path) == {"a", "b"}
    assert read_failure_urls(path, ["timeout"]) == {"a"}
    with open(path, "rb") as stream:
        assert failure_urls(stream, ["http_404", "too_large"]) == {"b"}


def test_a_failures_file_from_before_a_rename_matches_either_name(tmp_path):
    path = str(tmp_path / "failures.parquet")
    rows = [
        {"url": "old", "reason": "too_small", "status": 200, "attempts": 1},
        {"url": "new", "reason": "image_too_small", "status": 200, "attempts": 1},
        {"url": "other", "reason": "timeout", "status": None, "attempts": 3},
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=failure_schema()), path)
    for name in ("too_small", "image_too_small"):
        with open(path, "rb") as stream:
            assert failure_urls(stream, [name]) == {"old", "new"}


def test_docstring_examples():
    import doctest

    from corpora.fetch import accounting

    assert doctest.testmod(accounting).failed == 0
