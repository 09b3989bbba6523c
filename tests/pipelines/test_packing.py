"""The packing stage inside a real Beam pipeline gives what the core packer gives."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora import pack, reader
from corpora.settings import BuildSettings
from corpora.tokenizer import TokenizedDocument
from pipelines.packing import PackSequences
from tests.corpora.test_pack import make_doc
from tests.pipelines.direct import direct_pipeline

pytestmark = pytest.mark.slow


def test_pack_sequences_in_beam_matches_the_core_packer(tmp_path):
    rng = np.random.default_rng(3)
    docs = []
    for i in range(30):
        chunks = [
            ("image", 0) if rng.random() < 0.3 else ("text", int(rng.integers(1, 14)))
            for _ in range(int(rng.integers(1, 4)))
        ]
        docs.append(make_doc(f"doc{i:02d}", chunks))
    empty = TokenizedDocument("doc-empty", "c", np.zeros(0, np.int32), (), (), {"id": "doc-empty"})
    settings = BuildSettings(
        "mmc4-pairs",
        ("unused",),
        str(tmp_path),
        seq_len=16,
        tokens_per_image=3,
        samples_per_shard=4,
        pack_groups=1,
    )

    with direct_pipeline() as pipeline:
        result = (
            pipeline
            | beam.Create(docs[::-1] + [empty])  # input order must not matter
            | beam.BatchElements(min_batch_size=4, max_batch_size=8)
            | PackSequences(settings, pad_id=0)
        )
        assert_that(
            result["dropped"] | "Reason" >> beam.Map(lambda d: (d.reason, d.record_id)),
            equal_to([("empty_document", "doc-empty")]),
            label="Dropped",
        )
        assert_that(result["kept"] | beam.CombineGlobally(sum), equal_to([30]), label="Kept")

    expected = list(pack.pack(sorted(docs, key=lambda d: d.id), 16, 0))
    got = list(
        reader.iter_samples(sorted(str(p) for p in tmp_path.glob("*.tar")), decode_images=False)
    )
    assert len(got) == len(expected) > 4  # several shards
    for sample, sequence in zip(got, expected):
        np.testing.assert_array_equal(sample.input_ids, sequence.input_ids)
        np.testing.assert_array_equal(sample.segment_ids, sequence.segment_ids)
        np.testing.assert_array_equal(sample.positions, sequence.positions)
        assert sample.images == list(sequence.images)
        assert sample.documents == list(sequence.documents)
    assert not list(tmp_path.glob("*.tmp-*"))
