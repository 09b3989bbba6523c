"""``manifest.json``: everything that shaped a build, its shards, its funnel."""

from __future__ import annotations

import datetime
from typing import Any, Iterable

from corpora import FORMAT, __version__
from corpora.config.catalog import get as get_corpus
from corpora.config.settings import BuildSettings
from corpora.fetch.accounting import consent_summary, image_summary
from corpora.shards.writing import shard_pattern
from corpora.stats.funnel import make_funnel
from corpora.tokens.tokenizer import TokenizerInfo

MANIFEST = "manifest.json"


def build_manifest(
    settings: BuildSettings,
    tokenizer: TokenizerInfo,
    shard_infos: Iterable[dict[str, Any]],
    input_count: int,
    kept: int,
    dropped: dict[str, int],
    images: dict[str, int] | None = None,
    clip: dict[str, Any] | None = None,
    images_removed: dict[str, int] | None = None,
) -> dict[str, Any]:
    """The manifest of a finished build; raises if the funnel does not balance."""
    shard_list = sorted(shard_infos, key=lambda s: s["index"])
    if [s["index"] for s in shard_list] != list(range(len(shard_list))):
        raise RuntimeError(
            f"shards are not numbered 0..{len(shard_list) - 1}: {[s['index'] for s in shard_list]}"
        )
    documents = sum(s["documents"] for s in shard_list)
    totals = {
        "shards": len(shard_list),
        "samples": sum(s["samples"] for s in shard_list),
        "documents": documents,
        "images": sum(s["images"] for s in shard_list),
        "bytes": sum(s["bytes"] for s in shard_list),
    }
    manifest = {
        "format": FORMAT,
        "corpora_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "corpus": settings.corpus,
        "seq_len": settings.seq_len,
        "tokens_per_image": settings.tokens_per_image,
        "image_size": settings.fetch.image_size,
        "image_token_id": tokenizer.image_token_id,
        "pad_id": tokenizer.pad_id,
        "bos_id": tokenizer.bos_id,
        "eos_id": tokenizer.eos_id,
        "vocab_size": tokenizer.vocab_size,
        "tokenizer": {"path": tokenizer.path, "sha256": tokenizer.sha256},
        "max_images_per_sample": max((s["max_images_per_sample"] for s in shard_list), default=0),
        "settings": settings.as_manifest(),
        "shard_pattern": shard_pattern(settings.corpus, len(shard_list)) if shard_list else None,
        "shards": [
            {k: s[k] for k in ("path", "samples", "documents", "images", "bytes", "sha256")}
            for s in shard_list
        ],
        "totals": totals,
        "funnel": make_funnel(get_corpus(settings.corpus).unit, input_count, kept, dropped),
    }
    if images is not None:  # every image that reached the fetch stage: ok or one reason
        manifest["images"] = image_summary(images)
        manifest["consent"] = consent_summary(settings.fetch)  # what the fetch honoured
    if images_removed is not None:
        # images that documents the build kept lost to a filter, by reason
        manifest["images_removed"] = {
            reason: int(n) for reason, n in sorted(images_removed.items()) if n
        }
    if clip is not None:
        manifest["clip"] = clip  # the CLIP model that scored the build, score quantiles, selection
    return manifest
