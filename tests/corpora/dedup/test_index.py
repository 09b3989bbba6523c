from __future__ import annotations

import collections
import io

import pyarrow.parquet as pq
from hypothesis import given
from hypothesis import strategies as st

from corpora.dedup.index import (
    KINDS,
    SEEN_IN_BLEND,
    Seen,
    exclude_seen,
    index_rows,
    index_table,
    merged_table,
    overlap,
    read_index,
    write_index,
    write_index_table,
    write_merged_index,
)
from corpora.record import Document, Drop, ImageChunk, TextChunk


def _pair(rid, url, sha, text):
    return Document(rid, "coyo", (ImageChunk(url, sha256=sha), TextChunk(text)))


def test_index_is_sorted_distinct_and_the_same_bytes_for_any_order():
    docs = [_pair("a", "http://x/1", "s1", "One"), _pair("b", "http://x/1", "s1", "Two")]
    rows = list(index_rows(docs))
    one, two = io.BytesIO(), io.BytesIO()
    assert write_index(one, rows) == 4  # a sha256, a URL, two texts
    write_index(two, list(reversed(rows)))
    assert one.getvalue() == two.getvalue()
    one.seek(0)
    assert sorted(read_index(one)) == sorted(set(rows))


@given(st.lists(st.lists(st.tuples(st.sampled_from(KINDS), st.text(max_size=12)), max_size=8)))
def test_batches_merged_write_the_bytes_of_all_their_rows(batches):
    # a build merges one table per batch; the file is the one of all the rows at once
    merged, whole = io.BytesIO(), io.BytesIO()
    write_index_table(merged, merged_table(index_table(batch) for batch in batches))
    write_index(whole, [row for batch in batches for row in batch])
    assert merged.getvalue() == whole.getvalue()


@given(
    st.lists(st.lists(st.tuples(st.sampled_from(KINDS), st.text(max_size=6)), max_size=12)),
    st.integers(1, 9),
    st.integers(1, 7),
)
def test_merging_by_ranges_writes_the_bytes_of_the_whole_merge(batches, merge_rows, group_rows):
    # a large build's index is merged a range of rows at a time, and written a
    # row group at a time: the file is the one of all its rows merged at once
    tables = [index_table(batch) for batch in batches]
    by_ranges, whole = io.BytesIO(), io.BytesIO()
    counts = write_merged_index(by_ranges, tables, merge_rows, group_rows)
    table = merged_table(tables)
    pq.write_table(table, whole, compression="zstd", row_group_size=group_rows)
    assert by_ranges.getvalue() == whole.getvalue()
    assert counts == dict(sorted(collections.Counter(table.column("kind").to_pylist()).items()))


def test_a_large_index_is_the_bytes_of_the_default_writer():
    # above merge_rows the rows are cut into ranges; the file is still the one
    # write_index_table writes, so an index's bytes do not depend on how it was merged
    rows = [("text", f"{(i * 7919) % 10007:05d}") for i in range(10_007)]
    tables = [index_table(rows[i::5]) for i in range(5)] + [index_table(rows[:300])]
    by_ranges, whole = io.BytesIO(), io.BytesIO()
    assert write_merged_index(by_ranges, tables, merge_rows=1_000) == {"text": 10_007}
    write_index_table(whole, merged_table(tables))
    assert by_ranges.getvalue() == whole.getvalue()


def test_exclude_seen_drops_pairs_and_removes_images_from_documents():
    seen = Seen.from_rows(index_rows([_pair("a", "http://x/1", "s1", "Kept text")]))
    assert isinstance(exclude_seen(_pair("b", "http://y/9", "s1", "Other"), seen), Drop)  # bytes
    assert exclude_seen(_pair("c", "http://y/9", None, "KEPT  text!"), seen).detail == "text"
    fresh = _pair("d", "http://y/8", "s8", "New")
    assert exclude_seen(fresh, seen) is fresh
    doc = Document("e", "mmc4", (ImageChunk("http://x/1"), TextChunk("Only text left.")))
    left = exclude_seen(doc, seen, pairs=False)
    assert left.images == [] and left.meta["images_removed"] == {SEEN_IN_BLEND: 1}


def test_overlap_counts_each_kind():
    one = Seen.from_rows(index_rows([_pair("a", "u1", "s1", "t")]))
    two = Seen.from_rows(index_rows([_pair("b", "u2", "s1", "t")]))
    assert overlap(one, two) == {
        "image_sha256": 1,
        "image_source_sha256": 0,
        "image_url": 0,
        "text": 1,
    }
