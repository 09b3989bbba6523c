from __future__ import annotations

import io

import numpy as np
import pyarrow.parquet as pq
import pytest

from corpora import clip
from tests.clip_model import sample_pairs

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_embeddings_parquet_round_trip(model):
    results = clip.score_pairs(sample_pairs()[:5], model)
    rows = [clip.embedding_row(r) for r in reversed(results)]
    buffer = io.BytesIO()
    info = clip.write_embeddings(buffer, rows, "tiny/tiny.pt")
    assert info == {"rows": 5, "embedding_dim": 32}
    table = pq.read_table(io.BytesIO(buffer.getvalue()))
    assert table.column("id").to_pylist() == ["p0", "p1", "p2", "p3", "p4"]
    assert table.schema.metadata[b"clip_model"] == b"tiny/tiny.pt"
    images = np.array(table.column("image_embedding").to_pylist(), dtype=np.float32)
    np.testing.assert_array_equal(images, np.stack([r.image_embedding for r in results]))
    texts = np.array(table.column("text_embedding").to_pylist(), dtype=np.float32)
    recomputed = np.einsum("nd,nd->n", images, texts)
    np.testing.assert_allclose(recomputed, table.column(clip.SCORE).to_numpy(), atol=1e-5)


def test_embeddings_spread_over_files_of_at_most_the_rows_per_file():
    assert [clip.embeddings_file_count(n) for n in (0, 100_000, 100_001)] == [1, 1, 2]
    assert clip.embeddings_file_count(10, rows_per_file=3) == 4
    assert clip.embeddings_file_name(7) == "clip-embeddings-000007.parquet"
