import pytest

from corpora.record import Document, Drop, ImageChunk, TextChunk
from corpora.sources.filters import coyo_filter, mmc4_filter, wit_filter


def coyo_doc(b32=0.32, l14=0.3, width=600, height=400, nsfw=0.01, gantman=0.02):
    return Document(
        "coyo-1",
        "coyo",
        (ImageChunk("http://i/1.jpg"), TextChunk("alt")),
        source_url="http://i/1.jpg",
        meta={
            "clip_similarity_vitb32": b32,
            "clip_similarity_vitl14": l14,
            "width": width,
            "height": height,
            "nsfw_score_opennsfw2": nsfw,
            "nsfw_score_gantman": gantman,
        },
    )


@pytest.mark.parametrize(
    "doc, options, reason",
    [
        (coyo_doc(0.3, 0.29), {"min_clip_sim": 0.6}, "clip_similarity_below_min"),
        (coyo_doc(0.3, 0.3), {"min_clip_sim": 0.6}, None),  # the sum, at least the minimum
        (coyo_doc(None, 0.3), {"min_clip_sim": 0.6}, "missing_clip_similarity"),
        (coyo_doc(None, None), {}, None),  # no filter, no column needed
        (coyo_doc(gantman=0.7), {"max_nsfw": 0.5}, "nsfw_above_max"),
        (coyo_doc(nsfw=0.7), {"max_nsfw": 0.5}, "nsfw_above_max"),
        (coyo_doc(width=31), {"min_size": 32}, "image_too_small"),
        (coyo_doc(width=32, height=32), {"min_size": 32}, None),
        (coyo_doc(width=1000, height=200), {"max_aspect_ratio": 4}, "aspect_ratio_above_max"),
        (coyo_doc(width=200, height=800), {"max_aspect_ratio": 4}, None),
        (coyo_doc(width=None), {"min_size": 10}, "missing_size"),
    ],
)
def test_coyo_filter(doc, options, reason):
    result = coyo_filter(doc, options)
    if reason is None:
        assert result is doc
    else:
        assert isinstance(result, Drop) and result.reason == reason and result.record_id == "coyo-1"


def mmc4_doc(sims, sentences=5):
    chunks = []
    for i, sim in enumerate(sims):
        chunks += [
            ImageChunk(f"http://i/{i}.jpg", scores={"matched_sim": sim}, meta={"image_index": i}),
            TextChunk(f"s{i}."),
        ]
    return Document(
        "d",
        "mmc4",
        tuple(chunks),
        meta={"sentences": sentences, "images": len(sims), "matched_sims": list(sims)},
    )


def test_mmc4_min_sim_and_max_images_remove_images_in_reading_order():
    result = mmc4_filter(mmc4_doc([0.3, 0.2, 0.26, 0.4, 0.5]), {"min_sim": 0.24, "max_images": 2})
    assert [c.url for c in result.images] == ["http://i/0.jpg", "http://i/2.jpg"]
    assert [c.text for c in result.texts] == ["s0.", "s1.", "s2.", "s3.", "s4."]  # sentences stay
    assert result.meta["images_removed"] == {
        "clip_similarity_below_min": 1,
        "over_max_images": 2,
    }


def test_mmc4_document_left_without_images_is_dropped_unless_kept():
    doc = mmc4_doc([0.1, 0.2])
    assert mmc4_filter(doc, {"min_sim": 0.24}).reason == "no_images_after_filter"
    kept = mmc4_filter(doc, {"min_sim": 0.24, "keep_imageless": True})
    assert kept.images == [] and len(kept.texts) == 2


def test_mmc4_unfiltered_document_is_kept_unchanged():
    doc = mmc4_doc([0.3, 0.2])
    assert mmc4_filter(doc, {"min_sim": None, "max_images": None}) is doc


@pytest.mark.parametrize(
    "sims, sentences, reason",
    [
        ([0.3, 0.3], 4, None),
        ([0.3, 0.3], 3, "core_sentence_count"),
        ([0.3, 0.3], 41, "core_sentence_count"),
        ([0.3], 5, "core_image_count"),
        ([0.3] * 16, 20, "core_image_count"),
        ([0.3, 0.3, 0.3, 0.2], 5, None),  # exactly 75% above 0.25
        ([0.3, 0.3, 0.2, 0.25], 5, "core_low_similarity"),  # 0.25 is not above 0.25
    ],
)
def test_mmc4_core_preset(sims, sentences, reason):
    result = mmc4_filter(mmc4_doc(sims, sentences), {"preset": "core"})
    assert (result.reason if isinstance(result, Drop) else None) == reason


def test_wit_languages():
    doc = Document("wit-1", "wit", (), meta={"language": "de"})
    assert wit_filter(doc, {"languages": ["de", "en"]}) is doc
    assert wit_filter(doc, {"languages": None}) is doc
    assert wit_filter(doc, {"languages": ["en"]}).reason == "language_not_selected"
