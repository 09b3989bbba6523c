"""The ``--near-dup-clip-sim`` step inside a real Beam pipeline, on records
holding embeddings as the CLIP stage leaves them."""

from __future__ import annotations

import apache_beam as beam
import numpy as np

from corpora.dedup.embeddings import IMAGE_EMBEDDING, with_embeddings
from corpora.dedup.images import NEAR_DUPLICATE_IMAGE
from corpora.record import Document, ImageChunk, TextChunk
from pipelines.dedup_embeddings import ClipNearImages
from tests.pipelines.direct import direct_pipeline
from tests.pipelines.test_dedup_images import _collect


def _vectors(seed: int = 11, dim: int = 32):
    """Three unrelated directions ``a``, ``b``, ``c`` and a near copy of each (cosine > 0.99)."""
    rng = np.random.default_rng(seed)
    found = {}
    for name in "abc":
        centre = rng.standard_normal(dim)
        found[name] = centre
        found[name + "'"] = centre + 0.05 * rng.standard_normal(dim)
    return found


def test_near_copies_leave_the_smallest_id_stays_and_documents_lose_only_the_image(tmp_path):
    v = _vectors()

    def pair(id_, name):
        doc = Document(id_, "coyo", (ImageChunk(f"http://x/{id_}"), TextChunk(id_)))
        return with_embeddings(doc, {0: v[name]})

    def document(id_, names):
        chunks = tuple(c for n in names for c in (ImageChunk(f"http://x/{id_}/{n}"), TextChunk(n)))
        return with_embeddings(Document(id_, "mmc4", chunks), dict(enumerate(v[n] for n in names)))

    pairs = [pair("p3", "a'"), pair("p1", "a"), pair("p2", "b"), pair("p4", "c")]
    documents = [document("d2", ["b'", "c"]), document("d1", ["b", "a"])]
    pipeline = direct_pipeline(1)  # in process: the runner checks are the builds'
    # pairs drop the record; documents lose the image
    by_pairs = (
        pipeline
        | "Pairs" >> beam.Create([pairs[:2], pairs[2:]])
        | "ByPairs" >> ClipNearImages("clip_near", 0.98, True, output=None)
    )
    by_docs = (
        pipeline
        | "Documents" >> beam.Create([documents[:1], documents[1:]])
        | "ByDocs" >> ClipNearImages("clip_near_docs", 0.98, False, output=None)
    )
    seen = _collect(
        pipeline,
        {
            "kept": (by_pairs["docs"], by_docs["docs"])
            | "Kept" >> beam.Flatten()
            | beam.FlatMap(lambda batch: batch),
            "drops": (by_pairs["dropped"], by_docs["dropped"])
            | "Drops" >> beam.Flatten()
            | beam.Map(lambda d: (d.record_id, d.reason)),
            "report": by_pairs["report"],
        },
        str(tmp_path),
    )
    kept = {d.id: d for d in seen["kept"]}
    assert seen["drops"] == [("p3", NEAR_DUPLICATE_IMAGE)]  # a' is a's copy: p1 < p3 stays
    assert sorted(kept) == ["d1", "d2", "p1", "p2", "p4"]
    # b' (d2's first image) is b's copy (d1's first): d1 < d2, so d2 loses it, keeps its text
    assert [i.url for i in kept["d1"].images] == ["http://x/d1/b", "http://x/d1/a"]
    assert [i.url for i in kept["d2"].images] == ["http://x/d2/c"]
    assert [t.text for t in kept["d2"].texts] == ["b'", "c"]
    assert kept["d2"].meta["images_removed"] == {NEAR_DUPLICATE_IMAGE: 1}
    assert not any(IMAGE_EMBEDDING in i.meta for d in kept.values() for i in d.images)
    (report,) = seen["report"]
    assert report["removed"] == {NEAR_DUPLICATE_IMAGE: 1} and report["clusters"] == 1
    assert report["largest_clusters"][0]["kept"] == {"record_id": "p1", "position": 0}
