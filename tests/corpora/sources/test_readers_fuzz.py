"""Fuzz the source readers with hostile input (issue 16, acceptance): random
bytes and random JSON values in the shape of each upstream format
(strategies in ``tests/fuzz_inputs.py``).

Two properties: no exception escapes a reader but the typed input error
(``InputError``, naming the file), and the funnel balances (one Document or
Drop per record read). A third holds for what a reader lets through: every
Document is sane (text that is UTF-8, finite scores, metadata that JSON can
write). The tests under "what issue 16 fixed" were strict xfails before the
fix, each with an explicit example that failed on every run; the constants
name what each one found.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from corpora.record import Document, Drop, ImageChunk, TextChunk
from corpora.sources import c4, coyo
from corpora.sources.inputs import InputError, iter_lines
from corpora.sources.mmc4 import reader as mmc4
from corpora.sources.wit import reader as wit
from tests import fuzz_inputs as fuzz

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- the properties


def _read_all(read, data: bytes, path: str) -> list:
    """Everything ``read`` yields for ``data``, or ``[]`` when it raised the
    typed input error, which must name the file on one line."""
    try:
        return list(read(io.BytesIO(data), path))
    except InputError as exc:
        message = str(exc)
        assert path in message and "\n" not in message, message
        return []


def _finite(value) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _text(value) -> bool:
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def assert_sane(record) -> None:
    """What a stage after the reader relies on, for a record that was kept."""
    if isinstance(record, Drop):
        assert _text(record.reason) and _text(record.record_id), record
        return
    if isinstance(record, mmc4.Mmc4Document):
        assert _text(record.url) and all(_text(t) for t in record.text_list), record
        for image in record.images:
            assert _text(image.raw_url), image
            assert image.matched_sim is None or math.isfinite(image.matched_sim), image
            assert image.image_name is None or _text(image.image_name), image
        for row in record.similarity_matrix or ():
            assert all(math.isfinite(v) for v in row), record.similarity_matrix
        json.dumps(dataclasses.asdict(record), allow_nan=False)
        return
    assert isinstance(record, Document), record
    assert _text(record.id) and (record.source_url is None or _text(record.source_url))
    for chunk in record.chunks:
        if isinstance(chunk, TextChunk):
            assert _text(chunk.text), chunk
        else:
            assert isinstance(chunk, ImageChunk) and _text(chunk.url), chunk
            assert all(isinstance(s, float) and math.isfinite(s) for s in chunk.scores.values())
    json.dumps(record.meta, allow_nan=False)  # bytes, NaN and Infinity cannot be written


def _balanced(outputs: list, records: int) -> None:
    assert all(isinstance(o, (Document, Drop, mmc4.Mmc4Document)) for o in outputs), outputs
    assert len(outputs) == records, (len(outputs), records)


# ---------------------------------------------------------------- readers


def read_c4(stream, path):
    return c4.read(stream, path)


def read_mmc4(stream, path):
    """How a build reads MMC4: lines, each parsed."""
    for number, raw in iter_lines(stream, path):
        yield mmc4.parse_line(raw, path, number)


def read_mmc4_reassigned(stream, path):
    """…and with ``--reassign``, each document's images reassigned from its similarities."""
    for parsed in read_mmc4(stream, path):
        yield parsed if isinstance(parsed, Drop) else mmc4.reassign(parsed)


def read_wit(stream, path):
    return wit.read(stream, path, caption="best", with_context=True)


def read_coyo(stream, path):
    return coyo.read(stream, path, batch_rows=4)


JSON_READERS = {
    "c4": (read_c4, fuzz.c4_records(), "c4-train.00000-of-01024.json"),
    "mmc4": (read_mmc4, fuzz.mmc4_documents(), "docs_shard_0_v2.jsonl"),
    "mmc4-reassigned": (read_mmc4_reassigned, fuzz.mmc4_documents(), "docs_shard_0_v2.jsonl"),
}


# ---------------------------------------------------------------- what holds today


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
@FUZZ
@given(data=st.data())
def test_json_lines_readers_raise_nothing_and_balance(reader, data):
    read, records, path = JSON_READERS[reader]
    content, count = data.draw(fuzz.json_lines_file(records, hostile=False))
    if data.draw(st.booleans()):
        content, path = fuzz.gzipped(content), path + ".gz"
    _balanced(_read_all(read, content, path), count)


@pytest.mark.parametrize("reader", sorted(JSON_READERS))
@FUZZ
@given(content=st.binary(max_size=300))
def test_json_lines_readers_take_random_bytes(reader, content):
    read, _, path = JSON_READERS[reader]
    outputs = _read_all(read, content, path)
    _balanced(outputs, sum(1 for line in content.split(b"\n") if line.strip()))


@FUZZ
@given(fuzz.wit_file())
def test_wit_reader_raises_nothing_balances_and_keeps_only_sane_rows(file):
    content, count = file
    outputs = _read_all(read_wit, content, "wit_v1.train.all-00000-of-00010.tsv")
    _balanced(outputs, count)
    for output in outputs:
        assert_sane(output)
    gz = fuzz.gzipped(content)
    unzipped = _read_all(read_wit, gz, "wit_v1.train.all-00000-of-00010.tsv.gz")
    assert [getattr(o, "reason", "kept") for o in unzipped] == [
        getattr(o, "reason", "kept") for o in outputs
    ]


@FUZZ
@given(content=st.binary(max_size=300), header=st.booleans())
def test_wit_reader_takes_random_bytes(content, header):
    if header:
        content = "\t".join(wit.COLUMNS).encode() + b"\n" + content
    outputs = _read_all(read_wit, content, "wit_v1.train.all-00000-of-00010.tsv")
    assert all(isinstance(o, (Document, Drop)) for o in outputs)


@FUZZ
@given(fuzz.coyo_tables(wrong_types=False))
def test_coyo_reader_raises_nothing_and_balances_on_upstream_types(table):
    content = fuzz.parquet_bytes(table)
    _balanced(_read_all(read_coyo, content, "part-00000.snappy.parquet"), table.num_rows)


@FUZZ
@given(content=st.binary(max_size=300), magic=st.booleans())
def test_coyo_reader_takes_random_bytes(content, magic):
    if magic:
        content = b"PAR1" + content + b"PAR1"
    outputs = _read_all(read_coyo, content, "part-00000.snappy.parquet")
    assert all(isinstance(o, (Document, Drop)) for o in outputs)


@pytest.mark.parametrize("suffix", [".gz", ".zip"])
@FUZZ
@given(data=st.data())
def test_truncated_archives_and_wrong_member_counts_are_input_errors(suffix, data):
    good = fuzz.gzipped(b'{"text": "x", "url": "https://a.example/"}\n' * 30)
    if suffix == ".gz":
        content = good[: data.draw(st.integers(1, len(good) - 1))]
    else:
        members = data.draw(st.sampled_from([{}, {"a.jsonl": b"{}\n", "b.jsonl": b"{}\n"}]))
        content = fuzz.zipped(members)
    path = "docs" + (".jsonl.gz" if suffix == ".gz" else ".zip")
    with pytest.raises(InputError) as caught:
        list(read_mmc4(io.BytesIO(content), path))
    assert path in str(caught.value)


# ---------------------------------------------------------------- what issue 16 fixed


# Found by this fuzz besides issue 16: a 5000-digit number (ValueError) or deep nesting
# (RecursionError) escaped json_object; a JSON \\ud800 escape in a url raised
# UnicodeEncodeError (stable_id), and in text reached the tokenizer. With defect 2,
# they made the two tests below fail.
def _everything_hostile(read, file, path) -> None:
    content, count = file
    outputs = _read_all(read, content, path)
    _balanced(outputs, count)
    for output in outputs:
        assert_sane(output)


@FUZZ
@given(fuzz.json_lines_file(fuzz.c4_records()))
@example((fuzz.HOSTILE_JSON["huge_integer"] + b"\n", 1))
def test_c4_reader_on_everything_hostile(file):
    _everything_hostile(read_c4, file, "c4-train.00000-of-01024.json")


@FUZZ
@given(fuzz.json_lines_file(fuzz.mmc4_documents()))
@example(
    (
        b'{"url": "https://a.example/", "text_list": ["a"], "image_info":'
        b' [{"matched_sim": Infinity}]}\n',
        1,
    )
)
def test_mmc4_reader_on_everything_hostile(file):
    _everything_hostile(read_mmc4, file, "docs_shard_0_v2.jsonl")
    _everything_hostile(read_mmc4_reassigned, file, "docs_shard_0_v2.jsonl")


# Found by this fuzz: a line json.loads raises on other than a decode error.
@pytest.mark.parametrize("reader", sorted(JSON_READERS))
@pytest.mark.parametrize("line", sorted(fuzz.HOSTILE_JSON))
def test_a_json_line_that_python_cannot_load_is_a_drop(reader, line):
    read, _, path = JSON_READERS[reader]
    (output,) = _read_all(read, fuzz.HOSTILE_JSON[line] + b"\n", path)
    assert isinstance(output, Drop) and output.reason == "bad_json"


# Found by this fuzz: a \\ud800 escape in text passed the reader.
def test_a_lone_surrogate_escape_in_text_is_dropped():
    line = b'{"text": "a \\ud800 b", "url": "https://a.example/"}\n'
    (output,) = _read_all(read_c4, line, "c4-train.00000-of-01024.json")
    assert_sane(output)


# Issue 16, defect 2: a non-finite matched_sim failed the build.
@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_non_finite_matched_sim_is_a_bad_value(value):
    line = (
        b'{"url": "https://a.example/", "text_list": ["a."], "image_info": [{"raw_url":'
        b' "https://a.example/1.jpg", "matched_text_index": 0, "matched_sim": ' + value + b"}]}"
    )
    (output,) = _read_all(read_mmc4, line + b"\n", "docs.jsonl")
    assert isinstance(output, Drop) and output.reason == "bad_value", output


# Issue 16, defect 9: a BOM on the first line dropped that record as bad_json.
def test_a_bom_on_the_first_line_is_stripped():
    line = b'{"text": "Hi there.", "url": "https://a.example/"}\n'
    (output,) = _read_all(read_c4, fuzz.BOM + line, "c4-train.00000-of-01024.json")
    assert isinstance(output, Document), output


# Issue 16, defect 6: corrupt deflate data escaped as zlib.error, naming no file.
@pytest.mark.parametrize("suffix", [".gz", ".zip"])
@FUZZ
@given(data=st.data())
@example(data=None)
def test_broken_archives_are_input_errors_naming_the_file(suffix, data):
    if data is None:  # gzip's header, then bytes that are no deflate stream: fails today
        content = fuzz.gzipped(b"{}\n")[:10] + b"\xff" * 16
        if suffix == ".zip":
            good = fuzz.zipped({"docs.jsonl": b'{"text": "x"}\n' * 50})
            start = good.index(b"docs.jsonl") + len(b"docs.jsonl")
            content = good[:start] + b"\xff" * 4 + good[start + 4 :]
    else:
        content = data.draw(fuzz.broken_containers(suffix))
    path = "docs" + (".jsonl.gz" if suffix == ".gz" else ".zip")
    try:
        list(read_mmc4(io.BytesIO(content), path))
    except InputError as exc:
        assert path in str(exc)


# Issue 16, defect 2: wrong-typed and non-finite COYO values passed the reader.
@FUZZ
@given(fuzz.coyo_rows())
@example({"id": 7, "url": b"https://a.example/1.jpg", "text": b"a", "watermark_score": b"x"})
def test_coyo_rows_of_any_type_are_documents_or_drops(row):
    output = coyo.parse_row(row, "part-00000.snappy.parquet:1")
    assert_sane(output)


@FUZZ
@given(fuzz.coyo_tables(wrong_types=False))
@example(
    __import__("pyarrow").table(
        {
            "id": [1],
            "url": ["https://a.example/1.jpg"],
            "text": ["a"],
            "watermark_score": [math.inf],
        }
    )
)
def test_coyo_reader_lets_no_non_finite_score_through(table):
    content = fuzz.parquet_bytes(table)
    outputs = _read_all(read_coyo, content, "part-00000.snappy.parquet")
    _balanced(outputs, table.num_rows)
    for output in outputs:
        assert_sane(output)


# Issue 16, defect 2: a column of the wrong type was no input error (bytes in text crashed
# the build at the end).
@FUZZ
@given(fuzz.coyo_tables(wrong_types=True))
@example(
    __import__("pyarrow").table({"id": ["7"], "url": ["https://a.example/1.jpg"], "text": [5]})
)
def test_coyo_reader_refuses_a_column_of_the_wrong_type_naming_it(table):
    import pyarrow as pa

    path = "part-00000.snappy.parquet"
    content = fuzz.parquet_bytes(table)
    wrong = [
        name
        for name in table.column_names
        if not _upstream_compatible(table.schema.field(name).type, coyo.SCHEMA[name], pa)
    ]
    try:
        outputs = list(read_coyo(io.BytesIO(content), path))
    except InputError as exc:
        assert wrong and path in str(exc) and any(repr(n) in str(exc) for n in wrong), exc
        return
    assert not wrong, f"columns of the wrong type read without an error: {wrong}"
    _balanced(outputs, table.num_rows)
    for output in outputs:
        assert_sane(output)


def _upstream_compatible(arrow_type, upstream: str, pa) -> bool:
    if upstream in ("int64", "int32"):
        return pa.types.is_integer(arrow_type)
    if upstream == "float":
        return pa.types.is_floating(arrow_type)
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
