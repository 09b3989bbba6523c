"""The packing stage inside a real Beam pipeline gives what the core packer gives."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.util import assert_that, equal_to

from corpora import reader
from corpora.config.settings import BuildSettings
from corpora.store.stash import DOCUMENTS
from corpora.tokens import pack
from corpora.tokens.pack_groups import group_of
from corpora.tokens.tokenizer import TokenizedDocument
from pipelines import packing
from pipelines.packing import PackSequences, PackText, StashDocuments
from pipelines.store import StashReader, stash_files
from tests.corpora.tokens.test_pack import make_doc
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


@pytest.mark.parametrize("per_element", [2, 1_000])
def test_a_repeated_document_is_packed_each_time_it_was_read_over_several_groups(
    tmp_path, monkeypatch, per_element
):
    # 2: a group's sequences leave it in several elements, each reaching several shards
    monkeypatch.setattr(packing, "SEQUENCES_PER_ELEMENT", per_element)
    docs = [make_doc(f"doc{i:02d}", [("text", 3 + i % 9)]) for i in range(24)]
    repeated = docs + [docs[5]]  # the same record twice: both count, both are packed
    settings = BuildSettings(
        "c4",
        ("unused",),
        str(tmp_path),
        seq_len=16,
        tokens_per_image=3,
        samples_per_shard=3,
        pack_groups=3,
    )
    with direct_pipeline() as pipeline:
        result = (
            pipeline
            | beam.Create(repeated[::-1])
            | beam.BatchElements(min_batch_size=5, max_batch_size=5)
            | PackSequences(settings, pad_id=0)
        )
        assert_that(result["kept"] | beam.CombineGlobally(sum), equal_to([25]), label="Kept")

    # the core, group by group in group order, each group's documents in key order
    by_group: dict[int, list] = {}
    for doc in repeated:
        by_group.setdefault(group_of(pack.doc_key(doc), len(repeated), 3), []).append(doc)
    expected = [
        sequence
        for group in sorted(by_group)
        for sequence in pack.pack(sorted(by_group[group], key=pack.doc_key), 16, 0)
    ]
    got = list(reader.iter_samples(sorted(str(p) for p in tmp_path.glob("*.tar"))))
    assert len(by_group) == 3 and len(got) == len(expected)
    for sample, sequence in zip(got, expected):
        np.testing.assert_array_equal(sample.input_ids, sequence.input_ids)
        assert sample.documents == list(sequence.documents)
    assert sum(d["id"] == "doc05" for s in got for d in s.documents) == 2


def test_where_the_stash_cannot_be_reached_documents_travel_in_the_elements():
    doc = make_doc("doc00", [("text", 4), ("image", 0)])
    stash = StashDocuments("nosuchfs://bucket/build", seq_len=16)
    stash.setup()
    [[(plan, where)]] = list(stash.process([doc]))
    assert where is doc and packing._plan(plan) == pack.plan_pieces(doc, 16)
    assert stash_files("nosuchfs://bucket/build", DOCUMENTS) is None


def test_stashed_documents_read_back_equal_with_their_images_by_reference(tmp_path):
    doc = make_doc("doc00", [("text", 4), ("image", 0), ("text", 2)])
    stash = StashDocuments(str(tmp_path), seq_len=16)
    stash.setup()
    [[(compact, where)]] = list(stash.process([doc]))
    plan = packing._plan(compact)
    reader = StashReader()
    stored = packing._restored(reader.get(where))
    assert plan.key == pack.doc_key(doc)  # taken while the image bytes were there
    assert stored.images[0].data is None  # the image travels as a reference
    assert (stored.id, stored.corpus, stored.spans, stored.provenance) == (
        doc.id,
        doc.corpus,
        doc.spans,
        doc.provenance,
    )
    piece = reader.piece(pack.cut_piece(stored, plan.pieces[0]))
    assert piece.images == doc.images
    np.testing.assert_array_equal(piece.input_ids, doc.input_ids)
    reader.close()


def _text_records(count: int) -> list:
    from corpora.record import Document, TextChunk

    words = "the cat sleeps on a warm windowsill while rain falls outside".split()
    return [
        Document(
            f"c4-{i:03d}",
            "c4",
            (TextChunk(" ".join(words[(i + j) % len(words)] for j in range(1 + i % 23))),),
            source_url=f"https://example.org/{i}",
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("workers", [1, 2])
def test_pack_text_writes_each_group_s_sequences_in_group_order(tmp_path, tokenizer_path, workers):
    from corpora.tokens.pack_groups import group_sequences, pack_group
    from corpora.tokens.tokenizer import Tokenizer, tokenize_batch
    from pipelines.stats import token_ids

    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=1)
    records = _text_records(90)
    batches = [records[:16], records[16:48], records[48:], records[:16]]  # one group twice
    settings = BuildSettings(
        "c4", ("unused",), str(tmp_path), seq_len=32, tokens_per_image=1, samples_per_shard=5
    )
    with direct_pipeline(workers) as pipeline:
        result = (
            pipeline
            | beam.Create(batches)
            | PackText(settings, tokenizer, token_ids(tokenizer.info))
        )
        assert_that(result["kept"] | beam.CombineGlobally(sum), equal_to([106]), label="Kept")
        assert_that(result["dropped"], equal_to([]), label="Dropped")

    groups = sorted(
        (pack_group(tokenize_batch(batch, tokenizer), 32) for batch in batches),
        key=lambda group: group.order,
    )
    expected = [
        sequence
        for group in groups
        for sequence in group_sequences(group, 0, group.sequences, 32, tokenizer.info.pad_id)
    ]
    got = list(reader.iter_samples(sorted(str(p) for p in tmp_path.glob("*.tar"))))
    assert len(got) == len(expected) > 10 and len(expected) % 5  # several shards, one partial
    for sample, sequence in zip(got, expected):
        np.testing.assert_array_equal(sample.input_ids, sequence.input_ids)
        np.testing.assert_array_equal(sample.segment_ids, sequence.segment_ids)
        np.testing.assert_array_equal(sample.positions, sequence.positions)
        assert sample.documents == list(sequence.documents)
    assert sum(d["id"] == "c4-003" for s in got for d in s.documents) == 2
    assert not list(tmp_path.glob("*.tmp-*"))


def test_where_the_stash_cannot_be_reached_a_packed_group_travels_in_the_element(
    tokenizer_path,
):
    from corpora.tokens.pack_groups import PackedGroup
    from corpora.tokens.tokenizer import Tokenizer

    tokenizer = Tokenizer(tokenizer_path, tokens_per_image=1)
    settings = BuildSettings(
        "c4", ("unused",), "nosuchfs://bucket/build", seq_len=32, tokens_per_image=1
    )
    step = packing.PackTextGroup(settings, tokenizer)
    step.setup()
    [(order, (count, where))] = [
        out for out in step.process(_text_records(12)) if isinstance(out, tuple)
    ]
    assert isinstance(where, PackedGroup) and where.order == order and where.sequences == count


def test_a_shard_writer_reads_each_document_once_and_lets_it_go_after_its_last_sequence(
    tmp_path,
):
    """A shard of 1,000 samples at 64 tokens an image holds about 25,000 COYO
    pairs: the writer holds one sequence's documents (and those split across
    sequences), not the shard's (issue 31)."""
    docs = [make_doc(f"doc{i:02d}", [("text", 6)]) for i in range(3)]
    stash = StashDocuments(str(tmp_path), seq_len=16)
    stash.setup()
    where = {packing._plan(c).key: w for out in stash.process(docs) for c, w in out}
    a, b, c = (pack.doc_key(doc) for doc in docs)
    # b is split: its first half with a in sequence 0, its second with c in sequence 1
    ordered = [
        (0, [((a, 0, 1, 0, 6), where[a]), ((b, 0, 2, 0, 3), where[b])]),
        (1, [((b, 1, 2, 3, 6), where[b]), ((c, 0, 1, 0, 6), where[c])]),
    ]

    class Counting(StashReader):
        reads: list[str] = []

        def get(self, value):
            stored = super().get(value)
            self.reads.append(stored[0])
            return stored

    reader = Counting()
    documents = packing._Documents(reader, ordered)
    held = []
    ids = {pack.doc_key(doc): doc.id for doc in docs}
    for number, pieces in ordered:
        for ref, place in pieces:
            assert documents.get(ref[0], place).id == ids[ref[0]]
        documents.done(number)
        held.append(sorted(documents._read))
    assert held == [[b], []]  # a went with sequence 0, b and c with sequence 1
    assert sorted(reader.reads) == ["doc00", "doc01", "doc02"]  # each read once
    reader.close()
