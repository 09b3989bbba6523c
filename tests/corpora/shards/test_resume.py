from __future__ import annotations

import pytest

from corpora.config.settings import corpus_settings
from corpora.shards import resume
from corpora.tokens.tokenizer import Tokenizer


def test_fingerprint_holds_what_shapes_the_bytes_but_not_where_they_go(tokenizer_path):
    info = Tokenizer(tokenizer_path, 4).info
    local = corpus_settings(
        "mmc4-pairs",
        ("docs.jsonl",),
        "/data/out",
        tokenizer=tokenizer_path,
        seq_len=64,
        tokens_per_image=4,
    )
    bucket = local.replace(output="s3://bucket/out")
    assert resume.fingerprint(local, info) == resume.fingerprint(bucket, info)
    assert resume.fingerprint(local, info)["tokenizer_sha256"] == info.sha256
    assert resume.fingerprint(local, info) != resume.fingerprint(
        local.replace(samples_per_shard=7), info
    )


def test_changes_name_each_setting_that_differs():
    before = {
        "format": "corpora-shards/1",
        "settings": {"seq_len": 2048, "fetch": {"image_size": 336}},
    }
    after = {
        "format": "corpora-shards/1",
        "settings": {"seq_len": 1024, "fetch": {"image_size": 224}},
    }
    assert resume.changes(before, after) == [
        "settings.fetch.image_size: 336 -> 224",
        "settings.seq_len: 2048 -> 1024",
    ]
    assert resume.changes(before, before) == []


def test_check_same_build_refuses_other_settings_and_accepts_new_outputs():
    resume.check_same_build(None, {"settings": {"seq_len": 64}}, "out")
    resume.check_same_build({"settings": {"seq_len": 64}}, {"settings": {"seq_len": 64}}, "out")
    with pytest.raises(
        resume.SettingsChanged,
        match=r"^out holds a build with other settings "
        r"\(settings.seq_len: 64 -> 128\); re-run with --overwrite",
    ):
        resume.check_same_build(
            {"settings": {"seq_len": 64}}, {"settings": {"seq_len": 128}}, "out"
        )


def test_a_shard_is_complete_only_when_its_marker_matches_what_would_be_written():
    info = {"samples": 3, "bytes": 10240, "sha256": "ab" * 32, "documents": 5}
    assert resume.is_complete(dict(info), info)
    assert not resume.is_complete(None, info)
    assert not resume.is_complete({**info, "sha256": "cd" * 32}, info)
    assert not resume.is_complete({**info, "bytes": 10752}, info)
    assert resume.marker_name("coyo-000003.tar") == ".corpora/shards/coyo-000003.tar.json"
