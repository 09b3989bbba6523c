"""Blends: where a source can point, the manifest cross-checks, the exact mix,
and the seed papers' ratios measured through the loader from 1 and 4 workers."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpora.dedup.index import INDEX, write_index
from trainer.blend import (
    BlendError,
    DataSpec,
    Mix,
    blend_overlaps,
    check_blend,
    resolve_source,
)
from trainer.loader import Loader, data_config
from trainer.stream import DataError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),  # 4 workers on 2 cores
]


@settings(max_examples=300, deadline=None)
@given(
    weights=st.lists(st.floats(0.1, 10), min_size=1, max_size=4),
    masses=st.lists(st.integers(0, 5), min_size=1, max_size=200),
)
def test_the_mix_never_lets_a_source_fall_more_than_one_sample_behind(weights, masses):
    mix = Mix(weights)
    for step, mass in enumerate(masses):
        mix.add(mix.pick(), mass)
        ratios = [d / w for d, w in zip(mix.delivered, weights)]
        assert max(ratios) - min(ratios) <= max(masses) / min(weights) + 1e-9


def test_a_source_is_a_build_a_manifest_or_shard_urls(builds):
    whole = resolve_source(builds.pairs, 2)
    assert whole.weight == 2.0 and len(whole.shards) == 20 and whole.holds_images
    assert resolve_source(os.path.join(builds.pairs, "manifest.json")).shards == whole.shards
    subset = resolve_source(os.path.join(builds.pairs, "mmc4-pairs-{000002..000004}.tar"))
    assert [s.url for s in subset.shards] == [s.url for s in whole.shards[2:5]]
    assert [s.sha256 for s in subset.shards] == [s.sha256 for s in whole.shards[2:5]]
    url = "file://" + os.path.join(builds.pairs, "mmc4-pairs-000007.tar")
    assert resolve_source(url).shards[0].samples == 3
    assert not resolve_source(builds.c4).holds_images


def test_blended_builds_that_kept_the_same_images_or_texts_are_named(builds, tmp_path):
    one, two, three = (tmp_path / name for name in ("one", "two", "three"))
    for build in (one, two, three):
        shutil.copytree(builds.pairs, build)
    with open(one / INDEX, "wb") as out:
        write_index(out, [("image_url", "http://x/1.jpg"), ("text", "t1"), ("text", "t2")])
    with open(two / INDEX, "wb") as out:
        write_index(out, [("image_url", "http://x/1.jpg"), ("text", "t2"), ("text", "t3")])
    with open(three / INDEX, "wb") as out:
        write_index(out, [("image_sha256", "s9")])
    sources = [resolve_source(str(build)) for build in (one, two, three)]
    assert blend_overlaps(sources) == [
        f"{one} and {two} overlap: 1 image_url, 1 text kept by both "
        "(build one with --exclude-seen the other)"
    ]
    (three / INDEX).unlink()  # a build made before the index: left out
    assert len(blend_overlaps(sources)) == 1


def test_unreadable_sources_name_what_is_wrong(builds, tmp_path):
    with pytest.raises(DataError, match="no manifest.json in"):
        resolve_source(str(tmp_path))
    with pytest.raises(DataError, match="mmc4-pairs-000099.tar is not a shard of the build"):
        resolve_source(os.path.join(builds.pairs, "mmc4-pairs-000099.tar"))
    other = tmp_path / "other"
    shutil.copytree(builds.pairs, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["format"] = "corpora-shards/2"
    (other / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="format 'corpora-shards/2', expected 'corpora-shards/1'"):
        resolve_source(str(other))
    with pytest.raises(BlendError, match="weight must be a positive number"):
        resolve_source(builds.pairs, 0)


def test_builds_with_images_must_agree_and_a_c4_build_blends_with_any(builds):
    pairs, c4 = resolve_source(builds.pairs), resolve_source(builds.c4)
    c4_manifest = c4.manifest
    assert (c4_manifest["tokens_per_image"], c4_manifest["image_size"]) == (576, 336)  # defaults
    spec = check_blend([c4, pairs], "examples")
    assert spec == DataSpec(
        seq_len=640,
        pad_id=0,
        image_token_id=pairs.manifest["image_token_id"],
        tokens_per_image=8,
        image_size=(32, 32),
        max_images=1,
        tokenizer_sha256=pairs.manifest["tokenizer"]["sha256"],
        vocab_size=pairs.manifest["vocab_size"],
    )
    interleaved = resolve_source(builds.interleaved)
    assert check_blend([pairs, interleaved, c4], "examples").max_images == 3
    text_only = check_blend([c4])
    assert (text_only.image_token_id, text_only.image_size, text_only.max_images) == (None, None, 0)


@pytest.mark.parametrize(
    "other, field",
    [("pairs_tpi16", "tokens_per_image: 8 vs 16"), ("pairs_other_tokenizer", "tokenizer sha256")],
)
def test_mismatched_builds_raise_one_line_naming_both_and_the_field(builds, other, field):
    with pytest.raises(BlendError) as raised:
        check_blend([resolve_source(builds.pairs), resolve_source(getattr(builds, other))])
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{builds.pairs} and {getattr(builds, other)} differ in {field}")


def test_weighting_by_images_needs_images(builds):
    with pytest.raises(BlendError, match="c4 holds no images: it cannot be weighted by images"):
        check_blend([resolve_source(builds.pairs), resolve_source(builds.c4)], "images")


def test_a_spec_refuses_a_model_with_other_settings(builds):
    spec = check_blend([resolve_source(builds.pairs)])
    spec.check_model(seq_len=640, tokens_per_image=8, image_token_id=spec.image_token_id)
    with pytest.raises(
        BlendError, match="vila has tokens_per_image 576, the blend's builds have 8"
    ):
        spec.check_model("vila", tokens_per_image=576)


def _measured(builds, sources, unit: str, workers: int, samples: int = 2000) -> dict:
    """Consume ``samples`` samples from the real Loader; its per-source counters."""
    batch_size = 20
    config = data_config(
        [(getattr(builds, name), weight) for name, weight in sources],
        weight_unit=unit,
        batch_size=batch_size,
        num_workers=workers,
        shuffle_buffer=8,
        image_size=16,
    )
    loader = Loader(config)
    for _ in zip(range(samples // batch_size), loader):
        pass
    counters = loader.counters
    assert counters["samples"] == samples
    return {name: counters["sources"][getattr(builds, name)] for name, _ in sources}


@pytest.mark.parametrize("workers", [1, 4])
def test_vila_recipe_one_to_one_by_images(builds, workers):
    got = _measured(builds, [("pairs", 1.0), ("interleaved", 1.0)], "images", workers)
    ratio = got["pairs"]["images"] / got["interleaved"]["images"]
    assert abs(ratio - 1.0) <= 0.03, got
    # one image a sample against three: by examples the mix is far from 1:1
    assert got["pairs"]["samples"] > 2.5 * got["interleaved"]["samples"]


@pytest.mark.parametrize("workers", [1, 4])
def test_simvlm_recipe_eight_to_one_by_examples(builds, workers):
    got = _measured(builds, [("pairs", 8.0), ("c4", 1.0)], "examples", workers)
    ratio = got["pairs"]["samples"] / got["c4"]["samples"]
    assert abs(ratio / 8.0 - 1.0) <= 0.03, got
    assert got["c4"]["images"] == 0


@pytest.mark.parametrize("workers", [1, 4])
def test_simvlm_recipe_eight_to_one_by_documents(builds, workers):
    """SimVLM's 8:1 counts examples, i.e. documents: a packed sample of pairs
    holds many more of them than a packed sample of C4 text."""
    got = _measured(builds, [("pairs_packed", 8.0), ("c4", 1.0)], "documents", workers, 300)
    assert got["pairs_packed"]["documents"] + got["c4"]["documents"] >= 2000
    ratio = got["pairs_packed"]["documents"] / got["c4"]["documents"]
    assert abs(ratio / 8.0 - 1.0) <= 0.03, got
    # the same builds 8:1 by samples are far from 8:1 by documents
    by_samples = _measured(builds, [("pairs_packed", 8.0), ("c4", 1.0)], "examples", workers, 300)
    ratio = by_samples["pairs_packed"]["documents"] / by_samples["c4"]["documents"]
    assert abs(ratio / 8.0 - 1.0) > 0.2, by_samples


def test_weighting_by_tokens(builds):
    got = _measured(builds, [("pairs", 1.0), ("c4", 3.0)], "tokens", 0, samples=600)
    ratio = got["c4"]["tokens"] / got["pairs"]["tokens"]
    assert abs(ratio / 3.0 - 1.0) <= 0.03, got
