import io
import math

import pyarrow.parquet as pq
import pytest

from corpora.record import Document, Drop
from corpora.sources import coyo
from corpora.sources.inputs import InputError
from tests import fixtures


@pytest.fixture
def parquet(tmp_path):
    return fixtures.write_coyo_parquet(
        str(tmp_path / "part-00000-17a6ab47-c000.snappy.parquet"),
        fixtures.coyo_rows(),
        row_group_size=4,
    )


def test_fixture_has_the_upstream_schema(parquet):
    schema = pq.ParquetFile(parquet).schema_arrow
    assert [(f.name, str(f.type)) for f in schema] == [
        ("id", "int64"),
        ("url", "string"),
        ("text", "string"),
        ("width", "int32"),
        ("height", "int32"),
        ("image_phash", "string"),
        ("text_length", "int32"),
        ("word_count", "int32"),
        ("num_tokens_bert", "int32"),
        ("num_tokens_gpt", "int32"),
        ("num_faces", "int32"),
        ("clip_similarity_vitb32", "float"),
        ("clip_similarity_vitl14", "float"),
        ("nsfw_score_opennsfw2", "float"),
        ("nsfw_score_gantman", "float"),
        ("watermark_score", "float"),
        ("aesthetic_score_laion_v2", "float"),
    ]
    assert pq.ParquetFile(parquet).metadata.num_row_groups == 5


def test_real_rows_become_image_alt_text_records(parquet):
    with open(parquet, "rb") as stream:
        results = list(coyo.read(stream, parquet, batch_rows=3))
    assert len(results) == 20  # one result per row, across row groups and batches
    real = fixtures.coyo_preview_rows()
    docs = [r for r in results if isinstance(r, Document)][:7]
    assert [d.id for d in docs] == [f"coyo-{row['id']}" for row in real]
    first = docs[0]
    assert first.chunks[0].url == real[0]["url"] and first.chunks[1].text == real[0]["text"]
    assert first.meta["width"] == 600 and first.meta["image_phash"] == "bac58374982e0fc7"
    assert first.meta["clip_similarity_vitb32"] == pytest.approx(0.319336, rel=1e-6)  # float32
    assert first.chunks[0].scores["aesthetic_score_laion_v2"] == pytest.approx(7.04812, rel=1e-6)
    assert first.meta["source"] == "part-00000-17a6ab47-c000.snappy.parquet:1"


def test_bad_rows_are_dropped_each_with_its_reason(parquet):
    with open(parquet, "rb") as stream:
        drops = [(r.reason, r.record_id) for r in coyo.read(stream, parquet) if isinstance(r, Drop)]
    assert drops == [
        ("missing_url", "coyo-9000000000007"),
        ("missing_url", "coyo-9000000000008"),
        ("missing_text", "coyo-9000000000009"),
        ("empty_text", "coyo-9000000000010"),
        ("not_utf8", "coyo-9000000000011"),
        ("missing_id", "part-00000-17a6ab47-c000.snappy.parquet:19"),
    ]


def test_missing_required_column_names_file_and_column(tmp_path):
    path = fixtures.write_coyo_parquet(
        str(tmp_path / "part-1.parquet"), fixtures.coyo_rows(), drop_columns=("text",)
    )
    with (
        open(path, "rb") as stream,
        pytest.raises(InputError, match=r"part-1.parquet: missing column 'text'"),
    ):
        coyo.check(stream, path)
    with open(path, "rb") as stream, pytest.raises(InputError, match="missing column 'text'"):
        list(coyo.read(stream, path))
    # only the columns that are there are read; a filter column is required only when asked for
    path = fixtures.write_coyo_parquet(
        str(tmp_path / "part-2.parquet"), fixtures.coyo_rows(), drop_columns=("width", "height")
    )
    with open(path, "rb") as stream:
        coyo.check(stream, path)
    with open(path, "rb") as stream, pytest.raises(InputError, match="missing column 'width'"):
        coyo.check(stream, path, ("id", "url", "text", "width", "height"))


def test_not_a_parquet_file():
    with pytest.raises(InputError, match="x.parquet: not a parquet file"):
        coyo.check(io.BytesIO(b"id,url,text\n"), "x.parquet")


# Issue 16, defect 2: a non-finite score failed the build after shards were written
# (Infinity; NaN passed as a missing score), and wrong-typed cells were coerced.
@pytest.mark.parametrize("score", [math.nan, math.inf, -math.inf])
def test_a_non_finite_score_drops_its_row_as_bad_value(tmp_path, score):
    rows = fixtures.coyo_rows()[:3]
    rows[1] = {**rows[1], "clip_similarity_vitl14": score}
    path = fixtures.write_coyo_parquet(str(tmp_path / "part-0.parquet"), rows)
    with open(path, "rb") as stream:
        outputs = list(coyo.read(stream, path))
    assert [getattr(o, "reason", "kept") for o in outputs] == ["kept", "bad_value", "kept"]
    assert outputs[1].detail.startswith("clip_similarity_vitl14 is ")


@pytest.mark.parametrize(
    "row, detail",
    [
        ({"id": "7", "url": b"https://a/1.jpg", "text": b"a"}, "id is a string, expected int64"),
        ({"id": 7, "url": b"https://a/1.jpg", "text": 5}, "text is an integer, expected string"),
        ({"id": 7, "url": b"https://a/1.jpg", "text": b"a", "width": 1.5}, "width is a number"),
        ({"id": 7, "url": b"https://a/1.jpg", "text": b"a", "watermark_score": b"x"}, "bytes"),
    ],
)
def test_a_value_of_the_wrong_type_is_a_bad_value_not_coerced(row, detail):
    drop = coyo.parse_row(row, "part-0.parquet:1")
    assert isinstance(drop, Drop) and drop.reason == "bad_value" and detail in drop.detail


# Issue 16, defect 2: a text column of integers crashed the build at its end
# ("bytes is not JSON serializable"); now the check before the build names it.
def test_a_column_of_the_wrong_type_is_named_before_the_build(tmp_path):
    import pyarrow as pa

    path = str(tmp_path / "part-3.parquet")
    pq.write_table(pa.table({"id": [7], "url": ["https://a/1.jpg"], "text": [5]}), path)
    message = r"part-3.parquet: column 'text' is int64, expected string \(COYO-700M's type\)"
    with open(path, "rb") as stream, pytest.raises(InputError, match=message):
        coyo.check(stream, path)
    with open(path, "rb") as stream, pytest.raises(InputError, match=message):
        list(coyo.read(stream, path))


# Issue 30, defects 4 and 16: parquet cells were read whole into Python with no cap


def _table(texts: list[str]):
    import pyarrow as pa

    count = len(texts)
    return pa.table(
        {
            "id": pa.array(range(1, count + 1), pa.int64()),
            "url": [f"https://img.example/{i}.jpg" for i in range(count)],
            "text": texts,
        }
    )


def test_a_cell_over_the_cap_drops_its_row_and_only_it(tmp_path):
    path = str(tmp_path / "part-0.parquet")
    pq.write_table(_table(["a photo", "x" * 5000, "a dog"]), path)
    with open(path, "rb") as stream:
        results = list(coyo.read(stream, path, max_line_bytes=1000))
    assert [type(r).__name__ for r in results] == ["Document", "Drop", "Document"]
    assert results[1].reason == "line_too_long"
    assert results[1].detail == "a value of 5000 bytes, over the 1000 cap"


def test_a_dictionary_encoded_text_becomes_strings_a_slice_at_a_time(tmp_path, monkeypatch):
    """One 64 KiB text repeated on 2,000 rows is 128 KiB on disk; read as it
    was, the batch held 128 MiB of Python bytes at once."""
    import tracemalloc

    path = str(tmp_path / "part-0.parquet")
    pq.write_table(_table(["w" * 65536] * 2000), path, use_dictionary=True)
    assert pq.ParquetFile(path).metadata.serialized_size < 1 << 20
    monkeypatch.setattr(coyo, "SLICE_BYTES", 4 << 20)
    tracemalloc.start()
    try:
        with open(path, "rb") as stream:
            kept = sum(1 for r in coyo.read(stream, path) if isinstance(r, Document))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kept == 2000
    assert peak < 16 << 20, peak


def test_a_column_twice_is_an_input_error_naming_it(tmp_path):
    import pyarrow as pa

    table = _table(["a photo"])
    table = pa.Table.from_arrays(
        [*table.columns, table.column("text")], [*table.schema.names, "text"]
    )
    path = str(tmp_path / "part-0.parquet")
    pq.write_table(table, path)
    with (
        open(path, "rb") as stream,
        pytest.raises(InputError, match="column 'text' appears 2 times"),
    ):
        list(coyo.read(stream, path))
