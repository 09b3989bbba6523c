from __future__ import annotations

from corpora import clip


def test_the_summary_names_the_model_and_where_the_scores_fell():
    settings = clip.ClipSettings("ViT-L-14", "openai", batch_size=8, min_sim=0.2)
    counts = {2000: 1, 2500: 2, 3000: 1}  # buckets of 1e-4: scores 0.20, 0.25, 0.25, 0.30
    files = [{"path": "clip-embeddings-000001.parquet"}, {"path": "clip-embeddings-000000.parquet"}]
    cut = {"fraction": 0.5, "cut_id": "p3"}
    summary = clip.clip_summary(settings, counts, cut, files, 1e-4)
    assert (summary["model"], summary["architecture"], summary["pretrained"]) == (
        "ViT-L-14/openai",
        "ViT-L-14",
        "openai",
    )
    assert (summary["scored"], summary["score"], summary["min_sim"]) == (4, "clip_sim", 0.2)
    assert summary["top_fraction"] == cut
    assert summary["score_quantiles"]["0.5"] == 0.25005  # the middle of its bucket
    assert summary["score_quantiles"]["0.99"] == 0.30005
    assert [f["path"] for f in summary["embeddings"]] == [
        "clip-embeddings-000000.parquet",
        "clip-embeddings-000001.parquet",
    ]
