import codecs
import gzip
import io
import tracemalloc
import zipfile

import pytest

from corpora.sources.inputs import InputError, LongLine, iter_lines, json_object


def _lines(data: bytes, name: str):
    return list(iter_lines(io.BytesIO(data), name))


PLAIN = b'{"a": 1}\n\n{"a": 2}\r\n'


def test_plain_lines_are_numbered_and_blank_lines_skipped():
    assert _lines(PLAIN, "x.jsonl") == [(1, b'{"a": 1}'), (3, b'{"a": 2}')]


def test_gzip_is_decompressed_by_extension():
    assert _lines(gzip.compress(PLAIN), "x.jsonl.gz") == [(1, b'{"a": 1}'), (3, b'{"a": 2}')]


def test_zip_with_one_member_is_read_as_upstream_ships_it():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("docs_shard_0_v2.jsonl", PLAIN)
    assert _lines(buffer.getvalue(), "docs_shard_0_v2.jsonl.zip")[1] == (3, b'{"a": 2}')


def test_zip_with_two_members_is_an_input_error():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.jsonl", PLAIN)
        archive.writestr("b.jsonl", PLAIN)
    with pytest.raises(InputError, match="expected one member"):
        _lines(buffer.getvalue(), "x.jsonl.zip")


def test_a_file_that_is_not_a_zip_is_an_input_error():
    with pytest.raises(InputError, match="not a zip"):
        _lines(PLAIN, "x.jsonl.zip")


# Issue 16, defect 6: corrupt deflate data escaped as zlib.error, naming no file;
# a truncated .gz named the file but with a traceback (now one InputError line).
def test_corrupt_deflate_data_is_an_input_error_naming_the_file():
    corrupt = gzip.compress(PLAIN * 50)[:10] + b"\xff" * 16
    with pytest.raises(InputError, match=r"^docs\.jsonl\.gz: .*invalid") as caught:
        _lines(corrupt, "docs.jsonl.gz")
    assert "\n" not in str(caught.value)


def test_a_truncated_gzip_is_an_input_error_naming_the_file():
    whole = gzip.compress(PLAIN * 50)
    with pytest.raises(InputError, match=r"^docs\.jsonl\.gz: "):
        _lines(whole[: len(whole) // 2], "docs.jsonl.gz")


def test_a_zip_with_no_member_is_an_input_error():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w"):
        pass
    with pytest.raises(InputError, match=r"x\.jsonl\.zip: expected one member in the zip, found 0"):
        _lines(buffer.getvalue(), "x.jsonl.zip")


# Issue 16, defect 9: a BOM on the first line dropped that record as bad_json.
def test_a_byte_order_mark_before_the_first_line_is_removed():
    assert _lines(codecs.BOM_UTF8 + PLAIN, "x.jsonl")[0] == (1, b'{"a": 1}')
    assert _lines(gzip.compress(codecs.BOM_UTF8 + PLAIN), "x.jsonl.gz")[0] == (1, b'{"a": 1}')


def test_a_line_over_the_cap_is_skipped_and_the_next_lines_are_read():
    data = b'{"a": 1}\n' + b"x" * 100 + b"\r\n" + b"y" * 10 + b"\n" + b"z" * 11
    assert _lines_capped(data, 10) == [
        (1, b'{"a": 1}'),
        (2, LongLine(102, 10)),
        (3, b"y" * 10),  # exactly the cap: kept
        (4, LongLine(11, 10)),  # the last line, without a line ending
    ]
    drop = json_object(LongLine(102, 10), "x.jsonl:2")
    assert drop.reason == "line_too_long" and "102 bytes" in drop.detail


class _EndlessLine(io.RawIOBase):
    """``size`` bytes of one line, made as they are read (never held whole)."""

    def __init__(self, size: int):
        self._left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._left <= 0:
            return 0
        count = min(len(buffer), self._left)
        buffer[:count] = b"x" * count
        self._left -= count
        return count


# Issue 16, defect 9: a single 50 MB line took 930 MB of memory.
def test_a_huge_line_is_never_held_whole():
    size, cap = 64 << 20, 1 << 20
    tracemalloc.start()
    try:
        lines = list(iter_lines(_EndlessLine(size), "docs.jsonl", max_line_bytes=cap))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [(1, LongLine(size, cap))]
    assert peak < 8 * cap, f"peak {peak} bytes while skipping a {size}-byte line"


def _lines_capped(data: bytes, cap: int):
    return list(iter_lines(io.BytesIO(data), "x.jsonl", max_line_bytes=cap))


def test_runs_of_blank_lines_are_read_past_with_their_lines_counted():
    """Issue 30, defect 7: a gzip of blank lines was read one line at a time
    (194 CPU s for 256 KB); the lines are still numbered right after a run."""
    data = b'{"a": 1}\n' + b"\n" * 300_000 + b"\r\n \n" + b'{"b": 2}\n\n\n{"c": 3}'
    lines = list(iter_lines(io.BytesIO(data), "docs.jsonl"))
    assert lines == [(1, b'{"a": 1}'), (300_004, b'{"b": 2}'), (300_007, b'{"c": 3}')]
