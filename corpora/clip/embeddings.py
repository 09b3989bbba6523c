"""Saved embeddings: parquet files beside the shards, one row per scored pair."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corpora.clip.scoring import ScoredPair
from corpora.clip.settings import SCORE

EMBEDDINGS_ROWS_PER_FILE = 100_000


def embeddings_file_name(index: int) -> str:
    """Embedding files sit beside the shards: ``clip-embeddings-000000.parquet``, …"""
    return f"clip-embeddings-{index:06d}.parquet"


def embeddings_file_count(total: int, rows_per_file: int = EMBEDDINGS_ROWS_PER_FILE) -> int:
    """How many parquet files ``total`` embedding rows are spread over (by id hash).

    >>> [embeddings_file_count(0), embeddings_file_count(100_000), embeddings_file_count(100_001)]
    [1, 1, 2]
    """
    return max(1, -(-total // rows_per_file))


def embedding_row(pair: ScoredPair) -> dict[str, Any]:
    """One parquet row: what a user needs to re-filter or deduplicate a pair."""
    image = pair.doc.images[0]
    return {
        "id": pair.doc.id,
        "image_url": image.url,
        "image_sha256": image.sha256,
        SCORE: pair.score,
        "image_embedding": np.asarray(pair.image_embedding, dtype=np.float32),
        "text_embedding": np.asarray(pair.text_embedding, dtype=np.float32),
    }


def write_embeddings(stream, rows: Sequence[dict[str, Any]], model_id: str) -> dict[str, int]:
    """Write rows (sorted by id) as one parquet file with fixed-size float32 lists.

    The file's schema metadata names the model, so embeddings of two models
    are never mixed up.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    ordered = sorted(rows, key=lambda row: row["id"])
    dim = int(ordered[0]["image_embedding"].shape[0]) if ordered else 0

    def vectors(key: str):
        flat = np.concatenate([row[key] for row in ordered]) if ordered else np.zeros(0, np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)

    table = pa.table(
        {
            "id": pa.array([row["id"] for row in ordered], type=pa.string()),
            "image_url": pa.array([row["image_url"] for row in ordered], type=pa.string()),
            "image_sha256": pa.array([row["image_sha256"] for row in ordered], type=pa.string()),
            SCORE: pa.array([row[SCORE] for row in ordered], type=pa.float32()),
            "image_embedding": vectors("image_embedding"),
            "text_embedding": vectors("text_embedding"),
        }
    ).replace_schema_metadata({"clip_model": model_id, "embedding_dim": str(dim)})
    pq.write_table(table, stream)
    return {"rows": len(ordered), "embedding_dim": dim}
