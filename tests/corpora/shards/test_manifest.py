from __future__ import annotations

import pytest

from corpora.config.settings import BuildSettings
from corpora.shards.manifest import build_manifest
from corpora.stats.funnel import FunnelError
from corpora.tokens.tokenizer import TokenizerInfo

TOKENIZER = TokenizerInfo("t.model", "0" * 64, 500, 1, 2, 0, 499, 4)
SETTINGS = BuildSettings("mmc4-pairs", ("in.jsonl",), "out", seq_len=32, tokens_per_image=4)


def shard(index: int, images: int, most: int) -> dict:
    return {
        "index": index,
        "path": f"mmc4-pairs-{index:06d}.tar",
        "samples": 2,
        "documents": 3,
        "images": images,
        "max_images_per_sample": most,
        "bytes": 100,
        "sha256": str(index) * 64,
    }


def test_the_manifest_lists_shards_in_order_with_their_totals():
    manifest = build_manifest(
        SETTINGS, TOKENIZER, [shard(1, 3, 2), shard(0, 1, 1)], 8, 6, {"http_404": 2}
    )
    assert manifest["shard_pattern"] == "mmc4-pairs-{000000..000001}.tar"
    assert [s["path"] for s in manifest["shards"]] == [
        "mmc4-pairs-000000.tar",
        "mmc4-pairs-000001.tar",
    ]
    assert manifest["totals"] == {
        "shards": 2,
        "samples": 4,
        "documents": 6,
        "images": 4,
        "bytes": 200,
    }
    assert manifest["max_images_per_sample"] == 2
    assert manifest["funnel"] == {
        "unit": "pair",
        "input": 8,
        "kept": 6,
        "dropped": {"http_404": 2},
    }
    assert (manifest["image_token_id"], manifest["tokens_per_image"]) == (499, 4)


def test_images_removed_from_kept_documents_are_listed_by_reason():
    manifest = build_manifest(
        SETTINGS,
        TOKENIZER,
        [shard(0, 1, 1)],
        6,
        6,
        {},
        images_removed={"over_max_images": 3, "clip_similarity_below_min": 1, "other": 0},
    )
    assert manifest["images_removed"] == {"clip_similarity_below_min": 1, "over_max_images": 3}
    assert "images_removed" not in build_manifest(SETTINGS, TOKENIZER, [], 0, 0, {})


def test_shards_with_a_gap_or_a_funnel_that_does_not_balance_are_refused():
    with pytest.raises(RuntimeError, match="not numbered"):
        build_manifest(SETTINGS, TOKENIZER, [shard(0, 1, 1), shard(2, 1, 1)], 1, 1, {})
    with pytest.raises(FunnelError):
        build_manifest(SETTINGS, TOKENIZER, [shard(0, 1, 1)], 9, 6, {"http_404": 2})
