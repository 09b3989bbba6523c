"""corpus_settings: a corpus's options from its spec, the rest from BuildSettings."""

import json

import pytest

from corpora.config import catalog
from corpora.config.settings import corpus_settings


def test_defaults_follow_the_papers():
    assert corpus_settings("coyo", (), "out").corpus_options == {
        "min_clip_sim": 0.6,
        "max_nsfw": None,
        "min_size": 0,
        "max_aspect_ratio": None,
        "top_fraction": None,
    }  # VILA COYO-25M
    assert corpus_settings("mmc4", (), "out").corpus_options == {
        "reassign": False,
        "min_sim": None,
        "max_images": 6,
        "preset": None,
        "keep_imageless": False,
    }  # VILA
    assert corpus_settings("mmc4-reordered", (), "out").corpus == "mmc4-reordered"
    assert corpus_settings("mmc4-pairs", (), "out").corpus_options == {"reassign": False}
    assert corpus_settings("wit", (), "out").corpus_options == {
        "caption": "reference",
        "languages": None,
        "with_context": False,
    }
    assert corpus_settings("c4", (), "out").corpus_options == {}


def test_options_are_recorded_in_the_manifest_settings():
    built = corpus_settings(
        "wit", ("a.tsv.gz",), "out", caption="best", languages=("en", "de", "en"), with_context=True
    )
    recorded = json.loads(json.dumps(built.as_manifest()))
    assert recorded["corpus_options"] == {
        "caption": "best",
        "languages": ["de", "en"],
        "with_context": True,
    }
    assert corpus_settings("wit", (), "out", languages="fr, en").corpus_options["languages"] == [
        "en",
        "fr",
    ]
    assert corpus_settings("mmc4", (), "out", max_images=0).corpus_options["max_images"] is None
    assert corpus_settings("coyo", (), "out", min_clip_sim=0).corpus_options["min_clip_sim"] is None


def test_options_and_fields_are_told_apart():
    built = corpus_settings("mmc4-pairs", ("x.jsonl",), "out", reassign=True, seq_len=1024)
    assert built.seq_len == 1024 and built.corpus_options == {"reassign": True}
    assert built.inputs == ("x.jsonl",) and built.output == "out"


@pytest.mark.parametrize(
    "corpus, options, message",
    [
        ("coyo", {"min_clip_sim": 2.5}, "--min-clip-sim is a sum of two cosine similarities"),
        ("coyo", {"max_nsfw": 1.5}, "--max-nsfw is a probability, 0..1; got 1.5"),
        ("coyo", {"max_aspect_ratio": 0.5}, "--max-aspect-ratio must be at least 1; got 0.5"),
        ("coyo", {"top_fraction": 0}, r"--top-fraction must be in \(0, 1\]; got 0"),
        ("mmc4", {"preset": "extra"}, "unknown --preset 'extra'; one of: core"),
        ("mmc4-reordered", {"max_images": -1}, "--max-images must be at least 0"),
        ("mmc4", {"min_sim": "high"}, "--min-sim takes a number, got 'high'"),
        ("wit", {"caption": "title"}, "unknown --caption 'title'; one of: reference, attribution"),
        ("wit", {"languages": " , "}, "--languages names no language"),
        ("c4", {"caption": "alt"}, "c4 has no option 'caption'"),
        ("mmc4", {"corpus_options": {}}, "give a corpus's or a stage's options by name"),
    ],
)
def test_bad_options_raise(corpus, options, message):
    with pytest.raises(ValueError, match=message):
        corpus_settings(corpus, (), "out", **options)


def test_every_corpus_builds_settings_with_exactly_its_options():
    assert set(catalog.CORPORA) == {"coyo", "mmc4", "mmc4-pairs", "mmc4-reordered", "c4", "wit"}
    for name, spec in catalog.CORPORA.items():
        built = corpus_settings(name, (), "out")
        assert built.corpus == name
        assert list(built.corpus_options) == [option.name for option in spec.options]
