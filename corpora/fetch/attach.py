"""Fetched images into their records, the records a retry build fetches, and
the input split a record's images are stored under."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Mapping

from corpora.dedup.images import PHASH, SOURCE_SHA256
from corpora.fetch.settings import ImageOutcome
from corpora.record import Document, Drop, ImageChunk
from corpora.store.keys import split_name

# A record's input split (corpora.store.split_name), set where it is read when
# the build has an image store and removed by the fetch stage, so no shard holds it.
STORE_SPLIT = "store_split"


def store_split(input_path: str) -> str:
    """The image-store split of the records read from ``input_path``.

    >>> store_split("gs://bucket/mmc4/docs_shard_0_v2.jsonl")
    'docs_shard_0_v2.jsonl'
    """
    return split_name(input_path)


def without_store_split(doc: Document) -> Document:
    """``doc`` without its split (what it was read as).

    >>> doc = Document("d", "mmc4", (), meta={STORE_SPLIT: "x.jsonl", "a": 1})
    >>> without_store_split(doc).meta
    {'a': 1}
    """
    return doc.replace(meta={k: v for k, v in doc.meta.items() if k != STORE_SPLIT})


def select_for_retry(doc: Document, urls: frozenset[str] | set[str]) -> Document | Drop:
    """Keep a record only if one of its images is in ``urls`` (a previous
    build's failures), so a retry build fetches exactly those."""
    if any(image.url in urls for image in doc.images):
        return doc
    return Drop("not_in_retry_list", doc.id, url=doc.images[0].url if doc.images else None)


def attach_images(
    doc: Document, outcomes: Mapping[str, ImageOutcome], drop_document_on_failure: bool
) -> Document | Drop:
    """Put fetched images into ``doc``'s image chunks.

    A failed image either drops the whole record with its reason (pair
    corpora: a pair without its image is no pair) or is removed from the
    document (interleaved corpora); the per-image outcome is recorded in
    ``meta["image_failures"]`` either way.
    """
    chunks = []
    failures = []
    for chunk in doc.chunks:
        if not isinstance(chunk, ImageChunk) or chunk.fetched:
            chunks.append(chunk)
            continue
        outcome = outcomes[chunk.url]
        if not outcome.ok:
            if drop_document_on_failure:
                return Drop(outcome.reason, doc.id, url=chunk.url, detail=outcome.detail)
            failures.append({"url": chunk.url, "reason": outcome.reason, "status": outcome.status})
            continue
        assert outcome.data is not None
        chunks.append(
            dataclasses.replace(
                chunk,
                data=outcome.data,
                width=outcome.width,
                height=outcome.height,
                sha256=hashlib.sha256(outcome.data).hexdigest(),
                meta={
                    **chunk.meta,
                    "original_width": outcome.original_width,
                    "original_height": outcome.original_height,
                    # the perceptual hash, for the near-duplicate rules (never in a shard)
                    **({PHASH: outcome.phash} if outcome.phash is not None else {}),
                    **({SOURCE_SHA256: outcome.source_sha256} if outcome.source_sha256 else {}),
                },
            )
        )
    document = doc.replace(chunks=tuple(chunks))
    return document.with_meta(image_failures=failures) if failures else document
