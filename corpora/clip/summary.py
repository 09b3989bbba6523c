"""The manifest's ``clip`` entry."""

from __future__ import annotations

from typing import Any, Sequence

from corpora.clip.settings import SCORE, ClipSettings
from corpora.stages.selection import quantiles


def clip_summary(
    settings: ClipSettings,
    counts: dict[int, int],
    selection: dict | None,
    embedding_files: Sequence[dict],
    resolution: float,
) -> dict[str, Any]:
    """The manifest's ``clip`` entry: which model scored the build, and how scores fell."""
    return {
        "model": settings.model_id,
        "architecture": settings.model,
        "pretrained": settings.pretrained,
        "checkpoint_sha256": settings.checkpoint_sha256,
        "score": SCORE,
        "batch_size": settings.batch_size,
        "device": settings.device,
        "scored": sum(counts.values()),
        "score_quantiles": quantiles(counts, (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99), resolution),
        "quantile_error": resolution,
        "min_sim": settings.min_sim,
        "top_fraction": selection,
        "embeddings": sorted((dict(f) for f in embedding_files), key=lambda f: f["path"]),
    }
