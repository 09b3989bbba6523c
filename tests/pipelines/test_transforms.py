"""The core stages once inside a real Beam pipeline (DirectRunner via FnApiRunner)."""

import json

import apache_beam as beam
import pytest
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.testing.util import assert_that, equal_to

from corpora.config import catalog
from corpora.config.settings import corpus_settings, smoke
from corpora.tokens.tokenizer import Tokenizer
from pipelines import transforms as t
from tests.helpers import write_jsonl
from tests.pipelines.direct import direct_pipeline

pytestmark = pytest.mark.slow


def test_read_fetch_tokenize_in_beam(tmp_path, image_server, tokenizer_path):
    good = {
        "url": "http://p",
        "text_list": ["A cat.", "A dog."],
        "image_info": [
            {
                "raw_url": image_server.url("/img/40x40/cat.jpg"),
                "matched_text_index": 0,
                "matched_sim": 0.3,
            },
            {
                "raw_url": image_server.url("/status/404"),
                "matched_text_index": 1,
                "matched_sim": 0.3,
            },
        ],
    }
    source = write_jsonl(str(tmp_path / "docs.jsonl"), [good, "{broken", json.dumps({"url": "x"})])
    settings = smoke(corpus_settings("mmc4-pairs", (source,), str(tmp_path / "out")))
    settings = settings.replace(
        fetch=settings.fetch.__class__(image_size=16, allow_private_urls=True)
    )
    spec = catalog.get("mmc4-pairs")
    tokenizer = Tokenizer(tokenizer_path, settings.tokens_per_image)

    with direct_pipeline() as p:
        read = (
            p
            | beam.Create([source])
            | fileio.MatchAll()
            | fileio.ReadMatches(compression=CompressionTypes.UNCOMPRESSED)
            | beam.ParDo(t.ReadSource(spec, settings)).with_outputs(t.DROPPED, t.INPUT, main="docs")
        )
        fetched = read.docs | beam.ParDo(t.FetchImages(spec, settings.fetch)).with_outputs(
            t.DROPPED, main="docs"
        )
        tokens = fetched.docs | beam.ParDo(t.Tokenize(tokenizer)) | beam.FlatMap(lambda b: b)
        assert_that(read.input | "SumIn" >> beam.CombineGlobally(sum), equal_to([4]), label="input")
        assert_that(
            read.dropped | "R1" >> beam.Map(lambda d: d.reason),
            equal_to(["bad_json", "missing_text_list"]),
            label="read drops",
        )
        assert_that(
            fetched.dropped | "R2" >> beam.Map(lambda d: d.reason),
            equal_to(["http_404"]),
            label="fetch drops",
        )
        assert_that(
            tokens
            | beam.Map(lambda d: (len(d.images), d.images[0].width, d.length - d.text_tokens - 2)),
            equal_to([(1, 16, settings.tokens_per_image)]),
            label="tokenized",
        )


def test_images_removed_from_kept_documents_are_counted_by_reason():
    from corpora.record import Document, TextChunk
    from pipelines.launch import counters_of

    docs = [
        Document("a", "mmc4", (TextChunk("x"),), meta={"images_removed": {"over_max_images": 2}}),
        Document(
            "b",
            "mmc4",
            (TextChunk("y"),),
            meta={"images_removed": {"clip_similarity_below_min": 1, "over_max_images": 1}},
        ),
        Document("c", "mmc4", (TextChunk("z"),)),
    ]
    pipeline = direct_pipeline()
    counted = (
        pipeline
        | beam.Create([docs[:2], docs[2:]])  # two batches
        | beam.ParDo(t.CountRemovedImages()).with_outputs(t.IMAGES_REMOVED, main="docs")
    )
    assert_that(
        counted.docs | beam.FlatMap(lambda batch: [d.id for d in batch]),
        equal_to(["a", "b", "c"]),
        label="docs",
    )
    assert_that(
        counted[t.IMAGES_REMOVED] | beam.CombinePerKey(sum),
        equal_to([("over_max_images", 3), ("clip_similarity_below_min", 1)]),
        label="removed",
    )
    result = pipeline.run()
    result.wait_until_finish()
    counters = counters_of(result)
    assert counters["images_removed.over_max_images"] == 3
    assert counters["images_removed.clip_similarity_below_min"] == 1
