"""The per-corpus builders of corpora/settings.py (issue 3's corpora)."""

import json

import pytest

from corpora import catalog, settings


def test_defaults_follow_the_papers():
    assert settings.coyo((), "out").corpus_options == {
        "min_clip_sim": 0.6,
        "max_nsfw": None,
        "min_size": 0,
        "max_aspect_ratio": None,
        "top_fraction": None,
    }  # VILA COYO-25M
    assert settings.mmc4((), "out").corpus_options == {
        "reassign": False,
        "min_sim": None,
        "max_images": 6,
        "preset": None,
        "keep_imageless": False,
    }  # VILA
    assert settings.mmc4_reordered((), "out").corpus == "mmc4-reordered"
    assert settings.wit((), "out").corpus_options == {
        "caption": "reference",
        "languages": None,
        "with_context": False,
    }
    assert settings.c4((), "out").corpus_options == {}


def test_options_are_recorded_in_the_manifest_settings():
    built = settings.wit(
        ("a.tsv.gz",), "out", caption="best", languages=("en", "de", "en"), with_context=True
    )
    recorded = json.loads(json.dumps(built.as_manifest()))
    assert recorded["corpus_options"] == {
        "caption": "best",
        "languages": ["de", "en"],
        "with_context": True,
    }
    assert (
        settings.mmc4((), "out", max_images=0).corpus_options["max_images"] is None
    )  # 0: no limit
    assert settings.coyo((), "out", min_clip_sim=0).corpus_options["min_clip_sim"] is None  # 0: off


@pytest.mark.parametrize(
    "builder, options, message",
    [
        (settings.coyo, {"min_clip_sim": 2.5}, "--min-clip-sim"),
        (settings.coyo, {"max_nsfw": 1.5}, "--max-nsfw"),
        (settings.coyo, {"max_aspect_ratio": 0.5}, "--max-aspect-ratio"),
        (settings.mmc4, {"preset": "extra"}, "--preset"),
        (settings.mmc4_reordered, {"max_images": -1}, "--max-images"),
        (settings.wit, {"caption": "title"}, "--caption"),
    ],
)
def test_bad_options_raise(builder, options, message):
    with pytest.raises(ValueError, match=message):
        builder((), "out", **options)


def test_every_corpus_has_a_builder_and_its_options():
    assert (
        set(catalog.CORPORA)
        == set(settings.BUILDERS)
        == set(settings.CORPUS_OPTIONS)
        == {"coyo", "mmc4", "mmc4-pairs", "mmc4-reordered", "c4", "wit"}
    )
    for name, options in settings.CORPUS_OPTIONS.items():
        built = settings.BUILDERS[name]((), "out")
        assert built.corpus == name and set(built.corpus_options) == set(options)
