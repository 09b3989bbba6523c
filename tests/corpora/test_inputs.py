import gzip
import io
import zipfile

import pytest

from corpora.inputs import InputError, iter_lines


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
