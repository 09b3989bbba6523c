import json

import apache_beam as beam
import numpy as np
import pytest

from corpora.record import ImageChunk
from corpora.stats import figures as stats
from corpora.stats.figures import STATS
from corpora.tokens import pack
from corpora.tokens.tokenizer import Span, TokenizedDocument, TokenizerInfo
from pipelines.stats import WriteStats, token_ids
from tests.pipelines.direct import direct_pipeline

INFO = TokenizerInfo(
    path="t.model",
    sha256="",
    vocab_size=50,
    bos_id=1,
    eos_id=2,
    pad_id=0,
    image_token_id=50,
    tokens_per_image=4,
)


def _document(index: int) -> TokenizedDocument:
    """[bos] image × (index % 3) then (3 + 5·index) text tokens, [eos]."""
    ids, spans, images = [1], [Span("bos", 0, 1)], []
    for k in range(index % 3):
        spans.append(Span("image", len(ids), len(ids) + 4, k))
        ids += [50] * 4
        images.append(
            ImageChunk(
                url=f"http://i/{index}/{k}", data=b"jpeg", scores={"matched_sim": 0.2 + k / 10}
            )
        )
    text = 3 + 5 * index
    spans.append(Span("text", len(ids), len(ids) + text))
    ids += [7] * text
    spans.append(Span("eos", len(ids), len(ids) + 1))
    ids.append(2)
    provenance = {
        "id": f"doc{index:02d}",
        "corpus": "mmc4",
        "images": [{"url": img.url, "scores": dict(img.scores)} for img in images],
    }
    return TokenizedDocument(
        f"doc{index:02d}",
        "mmc4",
        np.array(ids, dtype=np.int32),
        tuple(spans),
        tuple(images),
        provenance,
    )


@pytest.mark.slow
def test_stats_json_from_a_beam_pipeline(tmp_path):
    docs = [_document(i) for i in range(12)]  # the longest (58 text tokens) is split at seq_len 32
    sequences = list(pack.pack_greedy(docs, seq_len=32, pad_id=0))
    manifest = {
        "corpus": "mmc4",
        "seq_len": 32,
        "tokens_per_image": 4,
        "funnel": {"unit": "document", "input": 13, "kept": 12, "dropped": {"http_404": 1}},
    }
    with direct_pipeline() as pipeline:
        values = pipeline | "Values" >> beam.Create(
            [
                stats.sequence_values(s.input_ids, s.segment_ids, s.documents, token_ids(INFO))
                for s in sequences
            ]
        )
        _ = pipeline | "Manifest" >> beam.Create([manifest]) | WriteStats(values, str(tmp_path))
    with open(tmp_path / STATS) as handle:
        result = json.load(handle)

    text = [3 + 5 * i for i in range(12)]
    images = [i % 3 for i in range(12)]
    assert result["totals"] == {
        "documents": 12,
        "images": sum(images),
        "tokens": 32 * len(sequences),
        "text_tokens": sum(text),
        "image_tokens": 4 * sum(images),
        "special_tokens": 24,
        "padding_tokens": 32 * len(sequences) - sum(d.length for d in docs),
    }
    assert result["text_tokens_per_image"] == sum(text) / sum(images)
    assert result["text_tokens_per_document"]["median"] == float(np.median(text))
    assert result["images_per_document"]["histogram"] == {
        "edges": [0, 1, 2, 3],
        "counts": [4, 4, 4],
    }
    assert result["packing"]["sequences"] == len(sequences)
    assert result["packing"]["split_documents"] == sum(1 for d in docs if d.length > 32)
    assert result["scores"]["matched_sim"]["count"] == sum(images)
    assert (
        result["scores"]["matched_sim"]["min"] == 0.2
        and result["scores"]["matched_sim"]["max"] == 0.3
    )
    assert result["image_fetch"]["failed"] == 1 and result["image_fetch"]["fetched"] == sum(images)
