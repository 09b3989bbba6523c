"""A small build written by the core (no pipeline): what the reading tests read."""

from __future__ import annotations

import json
import os

import numpy as np

from corpora import shards
from corpora.config.settings import BuildSettings
from corpora.record import ImageChunk
from corpora.shards.manifest import MANIFEST, build_manifest
from corpora.tokens import pack
from corpora.tokens.tokenizer import Span, TokenizedDocument, TokenizerInfo
from tests.servers import image_bytes

SEQ_LEN, PER_IMAGE, IMAGE, PAD = 32, 4, 500, 0


def image_doc(name: str, text: int, images: int) -> TokenizedDocument:
    ids, spans, chunks = [1], [Span("bos", 0, 1)], []
    for i in range(images):
        spans.append(Span("image", len(ids), len(ids) + PER_IMAGE, i))
        ids += [IMAGE] * PER_IMAGE
        chunks.append(
            ImageChunk(f"http://img/{name}/{i}.jpg", data=image_bytes(16 + i, 12, f"{name}{i}"))
        )
    spans.append(Span("text", len(ids), len(ids) + text))
    ids += [3 + (len(ids) + j) % 200 for j in range(text)]
    spans.append(Span("eos", len(ids), len(ids) + 1))
    ids.append(2)
    provenance = {"id": name, "corpus": "mmc4-pairs", "images": [{"url": c.url} for c in chunks]}
    return TokenizedDocument(
        name, "mmc4-pairs", np.array(ids, np.int32), tuple(spans), tuple(chunks), provenance
    )


def write_build(out: str, tokenizer_path: str = "t.model") -> str:
    """Two shards written by the core: the first five samples hold one image
    each (long one-image documents packed first), a later one holds two."""
    docs = [image_doc(f"long{i}", 24, 1) for i in range(6)] + [
        image_doc(f"pair{i}", 3, 1) for i in range(2)
    ]
    docs.append(image_doc("two", 2, 2))
    sequences = list(pack.pack(docs, SEQ_LEN, PAD))
    per_shard = 4
    infos = []
    for index in range(0, len(sequences), per_shard):
        shard = index // per_shard
        name = shards.shard_name("mmc4-pairs", shard)
        with open(os.path.join(out, name), "wb") as stream:
            info = shards.write_shard(
                stream,
                [
                    (shards.sample_key("mmc4-pairs", shard, i), s)
                    for i, s in enumerate(sequences[index : index + per_shard])
                ],
            )
        infos.append({"index": shard, "path": name, **info})
    settings = BuildSettings(
        "mmc4-pairs",
        ("in.jsonl",),
        out,
        seq_len=SEQ_LEN,
        tokens_per_image=PER_IMAGE,
        samples_per_shard=per_shard,
    )
    tokenizer = TokenizerInfo(tokenizer_path, "0" * 64, 500, 1, 2, PAD, IMAGE, PER_IMAGE)
    kept = len(docs)
    manifest = build_manifest(settings, tokenizer, infos, kept, kept, {})
    with open(os.path.join(out, MANIFEST), "w") as handle:
        json.dump(manifest, handle)
    return out
