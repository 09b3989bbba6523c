"""Store keys and split names: stable, distinct, refused when two inputs would collide."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpora.store.keys import (
    StoreError,
    check_split_names,
    image_key,
    is_temp,
    part_name,
    split_dir,
    split_name,
    temp_name,
)


def test_key_is_the_documented_hash_of_the_url_as_given():
    url = "https://img.example.com/a b/ü.jpg?x=1"
    assert image_key(url) == hashlib.sha256(url.encode("utf-8")).hexdigest()[:32]
    # no normalisation: another spelling is another fetch, so another key
    assert image_key("https://img.example.com/a%20b/%C3%BC.jpg?x=1") != image_key(url)


def test_a_url_with_a_lone_surrogate_still_has_a_key():
    assert len(image_key("https://x.example/\ud800.jpg")) == 32


@given(st.text(min_size=1), st.text(min_size=1))
def test_different_urls_have_different_keys(a, b):
    assert (image_key(a) == image_key(b)) == (a == b)


def test_split_names_come_from_file_names():
    assert split_name("gs://b/coyo/part-00017.parquet") == "part-00017.parquet"
    assert split_name("/data/mmc4/docs_shard_1_v3.jsonl.zip") == "docs_shard_1_v3.jsonl.zip"
    assert split_name("s3://b/x/we?ird name.jsonl") == "we_ird_name.jsonl"
    with pytest.raises(StoreError, match="no file name"):
        split_name("..")


def test_two_inputs_with_one_file_name_are_refused_naming_both():
    assert check_split_names(["a/x.jsonl", "a/x.jsonl"]) == {"a/x.jsonl": "x.jsonl"}
    with pytest.raises(StoreError, match="a/x.jsonl and b/x.jsonl"):
        check_split_names(["a/x.jsonl", "b/y.jsonl", "b/x.jsonl"])


def test_a_split_directory_needs_a_split_name():
    assert split_dir("x.jsonl") == "splits/x.jsonl"
    with pytest.raises(StoreError, match="not a split name"):
        split_dir("../escape")


def test_temporary_names_are_fresh_and_never_committed_names():
    final = part_name("abc", 3) + ".tar"
    assert final == "part-abc-00003.tar"
    first, second = temp_name(final), temp_name(final)
    assert first != second and first.startswith(final)
    assert is_temp(first) and not is_temp(final)
