"""settings_from_flags: the build flags onto BuildSettings, from Python, no subprocess."""

from __future__ import annotations

import dataclasses
import os

import pytest

from corpora import stages
from corpora.config import flags
from corpora.config.bundled_sample import SAMPLE_IMAGES, SAMPLE_TOKENIZER
from corpora.config.flags import FlagError, settings_from_flags
from corpora.config.settings import DEFAULTS
from corpora.store.files import reachable
from corpora.store.settings import StoreSettings
from tests.clip_model import TINY_NAME, tiny_clip  # noqa: F401


def test_no_flags_gives_the_defaults(tmp_path):
    built = settings_from_flags("c4", inputs=("c4.json.gz",), output=str(tmp_path / "out"))
    assert built == DEFAULTS.replace(
        corpus="c4",
        inputs=("c4.json.gz",),
        output=str(tmp_path / "out"),
        fetch=dataclasses.replace(DEFAULTS.fetch, progress_interval=flags.PROGRESS_EVERY),
        store=StoreSettings(str(tmp_path / "out" / "image-store")),
        stage_options=stages.stage_options({}),  # every stage option's default (dedup's)
    )
    assert built.tokenizer == SAMPLE_TOKENIZER and built.clip is None


def test_the_image_store_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    given = {"inputs": ("docs.jsonl",), "output": "memory://b/out"}
    assert settings_from_flags("mmc4", **given).store.uri == "memory://b/out/image-store"
    # a bucket fsspec cannot open here: no default store, and a named one is refused
    unreachable = reachable("gs://b")
    in_gs = settings_from_flags("mmc4", inputs=("d.jsonl",), output="gs://b/out").store.uri
    assert in_gs == (None if unreachable else "gs://b/out/image-store")
    if unreachable:
        with pytest.raises(FlagError, match="--image-store gs://b/images: "):
            settings_from_flags("mmc4", **given, image_store="gs://b/images")
    assert settings_from_flags("mmc4", **given, no_image_store=True).store == StoreSettings()
    chosen = settings_from_flags(
        "mmc4",
        **given,
        image_store="shared",
        refetch_failures=True,
        images_from="download",
        images_absent="drop",
    ).store
    assert chosen == StoreSettings(
        str(tmp_path / "shared"), True, str(tmp_path / "download"), "drop"
    )
    for wrong, message in (
        ({"image_store": "s", "no_image_store": True}, "contradict each other"),
        ({"no_image_store": True, "refetch_failures": True}, "needs an image store"),
        ({"images_absent": "drop"}, "--images-absent needs --images-from"),
    ):
        with pytest.raises(FlagError, match=message):
            settings_from_flags("mmc4", **given, **wrong)


def test_output_defaults_to_corpora_out_and_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert settings_from_flags("c4", inputs=("x",)).output == str(tmp_path / "corpora-out" / "c4")
    assert settings_from_flags("c4", inputs=("x",), output="rel").output == str(tmp_path / "rel")
    assert settings_from_flags("c4", inputs=("x",), output="gs://b/c4").output == "gs://b/c4"


def test_build_fetch_and_corpus_flags_land_in_their_settings(tmp_path):
    built = settings_from_flags(
        "wit",
        inputs=("w.tsv.gz",),
        seq_len=512,
        tokens_per_image=8,
        pack=False,
        image_size=64,
        resize_mode="border",
        fetch_concurrency=7,
        max_image_bytes=1000,
        ignore_opt_out=True,
        tdmrep=True,
        contact="mailto:crawl@lab.example",
        allow_network=["10.0.0.0/8"],
        retry_failures="failures.parquet",
        retry_reason=["http_404"],
        progress_every=0,
        caption="best",
        languages="fr,en",
    )
    assert (built.seq_len, built.tokens_per_image, built.pack) == (512, 8, False)
    fetch = built.fetch
    assert (fetch.image_size, fetch.resize_mode, fetch.concurrency, fetch.max_bytes) == (
        64,
        "border",
        7,
        1000,
    )
    assert fetch.respect_opt_out is False and fetch.allow_networks == ("10.0.0.0/8",)
    assert fetch.tdmrep is True and fetch.user_agent.endswith("; +mailto:crawl@lab.example)")
    assert fetch.retry_failures == os.path.abspath("failures.parquet")
    assert fetch.retry_reasons == ("http_404",) and fetch.progress_interval == 0
    assert built.corpus_options == {
        "caption": "best",
        "languages": ["en", "fr"],
        "with_context": False,
    }


def test_smoke_sets_defaults_and_a_flag_given_wins():
    # issue 32, finding 5: --smoke came last and silently overrode the flags given
    built = settings_from_flags("c4", inputs=("x",), smoke=True)
    assert (built.seq_len, built.tokens_per_image, built.samples_per_shard) == (256, 16, 8)
    assert built.fetch.image_size == 64
    built = settings_from_flags("c4", inputs=("x",), seq_len=4096, image_size=512, smoke=True)
    assert (built.seq_len, built.tokens_per_image, built.samples_per_shard) == (4096, 16, 8)
    assert built.fetch.image_size == 512


def test_max_aspect_ratio_is_checked_on_images_and_on_coyo_rows():
    coyo = settings_from_flags("coyo", inputs=("x",), max_aspect_ratio=3.0)
    assert coyo.fetch.max_aspect_ratio == 3.0 and coyo.corpus_options["max_aspect_ratio"] == 3.0
    mmc4 = settings_from_flags("mmc4", inputs=("x",), max_aspect_ratio=3.0)
    assert mmc4.fetch.max_aspect_ratio == 3.0 and "max_aspect_ratio" not in mmc4.corpus_options


def test_min_clip_sim_without_clip_model_is_coyo_s_precomputed_threshold():
    coyo = settings_from_flags("coyo", inputs=("x",), min_clip_sim=0.5)
    assert coyo.corpus_options["min_clip_sim"] == 0.5 and coyo.clip is None
    with pytest.raises(FlagError) as refused:
        settings_from_flags("mmc4-pairs", inputs=("x",), min_clip_sim=0.5)
    assert str(refused.value) == (
        "--min-clip-sim needs --clip-model (without it, only coyo has precomputed scores)"
    )


@pytest.mark.slow
def test_min_clip_sim_with_clip_model_is_the_computed_score_threshold(tiny_clip):  # noqa: F811
    coyo = settings_from_flags(
        "coyo",
        inputs=("x",),
        clip_model=tiny_clip.config_path,
        clip_pretrained=tiny_clip.checkpoint,
        min_clip_sim=0.1,
        clip_batch_size=4,
        save_embeddings=True,
    )
    assert coyo.clip.min_sim == 0.1 and coyo.clip.batch_size == 4 and coyo.clip.save_embeddings
    assert coyo.clip.model_id == f"{TINY_NAME}/tiny.pt"
    assert coyo.corpus_options["min_clip_sim"] == 0.6  # the precomputed filter keeps its default
    line = flags.describe_clip(coyo)
    assert line.startswith(f"CLIP: {TINY_NAME}/tiny.pt, embedding dim 32, batch 4, device ")
    assert flags.describe_clip(settings_from_flags("coyo", inputs=("x",))) is None


@pytest.mark.parametrize(
    "corpus, given, message",
    [
        ("c4", {"min_sim": 0.3}, "--min-sim does not apply to c4 (only to mmc4, mmc4-reordered)"),
        ("coyo", {"caption": "alt"}, "--caption does not apply to coyo (only to wit)"),
        ("mmc4", {"min_sim": 1.5}, "--min-sim is a cosine similarity, -1..1; got 1.5"),
        ("wit", {"languages": ","}, "--languages names no language"),
        # issue 16, defect 9: junk and other cases were taken, and kept nothing
        (
            "wit",
            {"languages": "en,he,english"},
            "--languages: unknown WIT language codes: 'he' (WIT writes 'iw'), 'english'",
        ),
        ("wit", {"languages": "EN,xx"}, "--languages: unknown WIT language code: 'xx'"),
        (
            "mmc4-pairs",
            {"allow_local_files": ("/no/such/dir",)},
            "--allow-local-files /no/such/dir: not a directory",
        ),
        ("c4", {"max_line_bytes": 0}, "max_line_bytes must be at least 1, got 0"),
        ("mmc4", {"seq_len": 4}, "seq_len must be in 8..1048576, got 4"),
        ("c4", {"clip_pretrained": "openai"}, "--clip-pretrained needs --clip-model"),
        ("coyo", {"save_embeddings": True}, "--save-embeddings needs --clip-model"),
        (
            "c4",
            {"clip_model": "ViT-B-32", "clip_pretrained": "openai"},
            "--clip-model scores image-text pairs or documents "
            "(coyo, mmc4-pairs, wit, mmc4, mmc4-reordered), not c4",
        ),
        (
            "mmc4",
            {"clip_model": "ViT-B-32", "clip_pretrained": "openai", "clip_top_fraction": 0.5},
            "--clip-top-fraction applies to pair corpora (coyo, mmc4-pairs, wit), not to mmc4 "
            "documents (use --min-clip-sim to remove their low-scoring images)",
        ),
        (
            "wit",
            {"clip_model": "ViT-B-32"},
            "--clip-model needs --clip-pretrained (an open_clip tag such as openai, "
            "or a local checkpoint file)",
        ),
        (
            "wit",
            {"clip_model": "ViT-B-32", "clip_pretrained": "openai", "clip_top_fraction": 0},
            "--clip-top-fraction must be in (0, 1], got 0",
        ),
        ("c4", {"seq_lenght": 100}, "no such flag: seq_lenght (did you mean seq_len?)"),
        ("c5", {}, "unknown corpus 'c5'; one of: c4, coyo, mmc4, mmc4-pairs, mmc4-reordered, wit"),
    ],
)
def test_refusals_are_one_line_flag_errors(corpus, given, message):
    with pytest.raises(FlagError) as refused:
        settings_from_flags(corpus, **{"inputs": ("x",), **given})
    assert str(refused.value) == message


def test_tokenizer_is_checked(tmp_path):
    with pytest.raises(FlagError, match="tokenizer not found: "):
        settings_from_flags("c4", inputs=("x",), tokenizer=str(tmp_path / "none.model"))
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    with pytest.raises(FlagError, match="tokenizer is not a readable SentencePiece model: "):
        settings_from_flags("c4", inputs=("x",), tokenizer=str(junk))


def test_no_input_builds_the_bundled_sample_where_there_is_one(tmp_path, monkeypatch):
    # this user's cache, never a fixed folder under /tmp that others share (issue 32, finding 8)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = settings_from_flags("mmc4-reordered")
    (sample,) = built.inputs
    assert os.path.dirname(sample) == str(tmp_path / "cache" / "corpora" / "sample")
    assert os.path.basename(sample).startswith("mmc4-sample-")  # its text's digest (issue 31)
    assert os.path.getsize(built.inputs[0]) > 0
    # its images are local files: the sample build may read them, and only them
    assert built.fetch.allow_local_files == (SAMPLE_IMAGES,)
    assert settings_from_flags("mmc4-reordered", inputs=("x",)).fetch.allow_local_files == ()
    with pytest.raises(FlagError) as refused:
        settings_from_flags("wit")
    assert str(refused.value) == (
        "--input is required for wit (the bundled sample is for c4, mmc4, mmc4-pairs, "
        "mmc4-reordered)"
    )


def test_a_smoke_build_has_a_default_folder_of_its_own(tmp_path, monkeypatch):
    # issue 32, finding 4: `build --smoke` after the README's build was refused there
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert settings_from_flags("mmc4-pairs").output == str(tmp_path / "corpora-out" / "mmc4-pairs")
    smoke = settings_from_flags("mmc4-pairs", smoke=True).output
    assert smoke == str(tmp_path / "corpora-out" / "smoke" / "mmc4-pairs")
    assert (
        settings_from_flags("c4", smoke=True).inputs[0].endswith("c4-train.00000-of-00001.json.gz")
    )


def test_allow_local_files_are_absolute_with_links_resolved(tmp_path, monkeypatch):
    (tmp_path / "images").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "images")
    monkeypatch.chdir(tmp_path)
    built = settings_from_flags("mmc4-pairs", inputs=("x",), allow_local_files=("link",))
    assert built.fetch.allow_local_files == (str((tmp_path / "images").resolve()),)


# ---------------------------------------------------------------- special ids (issue 16, defect 4)


@pytest.mark.parametrize(
    "ids, message",
    [
        ({"image_token_id": 1}, "image token id 1 is the tokenizer's BOS id"),
        ({"image_token_id": 2}, "image token id 2 is the tokenizer's EOS id"),
        ({"image_token_id": 0}, "image token id 0 is the tokenizer's UNK id"),
        ({"image_token_id": 7}, "image token id 7 is a text id (vocabulary 0..999)"),
        ({"pad_id": 1}, "pad id 1 is the tokenizer's BOS id"),
        ({"pad_id": 1000}, "pad id 1000 is the image token id"),
        ({"pad_id": -1}, "pad id -1 is negative"),
        ({"image_token_id": 2**32}, "image token id 4294967296 does not fit in int32"),
    ],
)
def test_special_ids_that_would_corrupt_the_shards_are_refused(ids, message):
    with pytest.raises(FlagError) as caught:
        settings_from_flags("c4", inputs=("c4.json.gz",), **ids)
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_reserved_image_piece_inside_the_vocabulary_is_allowed_when_said():
    built = settings_from_flags(
        "c4", inputs=("c4.json.gz",), image_token_id=999, image_token_reserved=True
    )
    assert (built.image_token_id, built.image_token_reserved) == (999, True)
    with pytest.raises(FlagError, match="past the vocabulary"):
        settings_from_flags(
            "c4", inputs=("c4.json.gz",), image_token_id=1000, image_token_reserved=True
        )


def test_an_output_whose_store_cannot_be_opened_says_why_in_the_settings():
    # the manifest records settings.store whole: its "off" is the line the build prints
    from corpora.config.flags import store_settings

    off = store_settings("abfs://container/out", {})  # no adlfs here
    assert off.uri is None
    assert off.off.startswith("no image store in abfs://container/out: ") and "adlfs" in off.off
    assert store_settings("/out", {}).off is None
    assert store_settings("/out", {"no_image_store": True}).off is None  # asked for: nothing to say
