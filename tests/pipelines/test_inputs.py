"""resolve_inputs: a build's inputs expanded and checked before anything runs."""

from __future__ import annotations

import dataclasses
import os

import pytest

from corpora.config.settings import corpus_settings
from corpora.sources.inputs import InputError
from pipelines.inputs import input_bytes, resolve_inputs
from tests import fixtures


def test_a_directory_becomes_the_corpus_s_patterns(tmp_path):
    fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines(), 0, 2)
    (tmp_path / "notes.txt").write_text("not matched by c4's patterns")
    resolved = resolve_inputs(corpus_settings("c4", (str(tmp_path),), "out"))
    assert resolved.inputs == tuple(
        os.path.join(str(tmp_path), pattern)
        for pattern in ("*.json.gz", "*.jsonl.gz", "*.json", "*.jsonl")
    )


def test_the_input_size_is_every_matched_file_s_size(tmp_path):
    first = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines(), 0, 2)
    second = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines()[:1], 1, 2)
    (tmp_path / "notes.txt").write_text("not matched by c4's patterns")
    resolved = resolve_inputs(corpus_settings("c4", (str(tmp_path),), "out"))
    assert input_bytes(resolved) == os.path.getsize(first) + os.path.getsize(second)


def test_files_and_globs_stay_as_given(tmp_path):
    path = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines(), 0, 2)
    glob = str(tmp_path / "c4-*.json.gz")
    assert resolve_inputs(corpus_settings("c4", (path, glob), "out")).inputs == (path, glob)


def test_an_input_that_matches_nothing_is_named(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(InputError) as refused:
        resolve_inputs(corpus_settings("mmc4", (missing,), "out"))
    assert str(refused.value) == f"input not found: {missing}"
    with pytest.raises(InputError, match=f"input not found: {tmp_path}"):
        resolve_inputs(corpus_settings("wit", (str(tmp_path),), "out"))  # no *.tsv(.gz) in it


def test_the_corpus_s_own_check_runs_on_every_file(tmp_path):
    good = fixtures.write_coyo_parquet(str(tmp_path / "a.parquet"), fixtures.coyo_rows())
    bad = fixtures.write_coyo_parquet(
        str(tmp_path / "b.parquet"), fixtures.coyo_rows(), drop_columns=("nsfw_score_gantman",)
    )
    assert resolve_inputs(corpus_settings("coyo", (good, bad), "out")).inputs == (good, bad)
    with pytest.raises(InputError) as refused:  # --max-nsfw reads both NSFW columns
        resolve_inputs(corpus_settings("coyo", (str(tmp_path),), "out", max_nsfw=0.5))
    assert str(refused.value).startswith(f"{bad}: missing column 'nsfw_score_gantman'")


def test_an_unreadable_failures_file_is_named(tmp_path):
    path = fixtures.write_c4_json_gz(str(tmp_path), fixtures.c4_lines(), 0, 2)
    junk = tmp_path / "failures.parquet"
    junk.write_bytes(b"not parquet")
    settings = corpus_settings("c4", (path,), "out")
    settings = settings.replace(fetch=dataclasses.replace(settings.fetch, retry_failures=str(junk)))
    with pytest.raises(InputError, match=f"cannot read failures file {junk}: "):
        resolve_inputs(settings)
