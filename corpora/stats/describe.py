"""A packed sample as readable text (``corpora inspect``)."""

from __future__ import annotations

import os
import tarfile
import zlib
from typing import Any

import numpy as np

from corpora import reader


def find_sample(
    path: str, index: int, verify: bool = True
) -> tuple[reader.Sample, dict[str, Any] | None]:
    """Sample number ``index`` of a build directory (counting across its
    shards in order) or of one shard file, and the build's manifest (``None``
    for a shard without one beside it).

    With ``verify`` each shard read is first checked against the manifest
    (:func:`corpora.reader.check_shard`). Every problem, a tar that cannot be
    read among them, is a :class:`~corpora.reader.BuildInputError` in one line."""
    build = reader.locate(path, need_manifest=False)
    seen = 0
    for shard in build.shards:
        if verify and build.manifest is not None:
            reader.check_shard(shard, build.manifest)
        try:
            for sample in reader.iter_samples(shard):
                if seen == index:
                    return sample, build.manifest
                seen += 1
        except (tarfile.TarError, ValueError, EOFError, OSError, zlib.error) as exc:
            raise reader.BuildInputError(f"unreadable shard {shard}: {exc}") from None
    raise IndexError(f"sample {index} out of range: {path} holds {seen} samples")


def _image_size(image: Any) -> str:
    return f"{image.width}x{image.height}" if image is not None else "missing"


def describe_sample(sample: reader.Sample, manifest: dict[str, Any] | None) -> str:
    """The sample's segments: decoded text with ``[image k: WxH]`` where each
    image's slot run sits, ``<s>``/``</s>`` for BOS/EOS, and the padding."""
    ids: np.ndarray = sample.input_ids
    segments: np.ndarray = sample.segment_ids
    image_token = manifest["image_token_id"] if manifest else None
    bos = manifest["bos_id"] if manifest else None
    eos = manifest["eos_id"] if manifest else None
    per_image = manifest["tokens_per_image"] if manifest else len(ids)
    decode = reader.text_decoder(manifest) or (lambda run: " ".join(str(int(i)) for i in run))
    documents = {d.get("segment"): d for d in sample.documents}
    lines = [
        f"sample {sample.key} in {os.path.basename(sample.url)}: "
        f"{len(ids)} tokens, {sample.tokens} used, {len(sample.images)} images"
    ]
    image_index = 0
    for segment in [int(s) for s in np.unique(segments) if s > 0]:
        where = np.nonzero(segments == segment)[0]
        run = ids[where[0] : where[-1] + 1]
        doc = documents.get(segment, {})
        piece = doc.get("piece")
        split = (
            f", piece {piece + 1} of {doc.get('pieces')}"
            if doc.get("split") and type(piece) is int
            else ""
        )
        lines.append(f"── segment {segment}: {doc.get('id', '?')} ({len(run)} tokens{split})")
        parts: list[str] = []
        for part in reader.segment_parts(run, image_token, per_image, bos, eos):
            if part[0] == "text":
                parts.append(decode(part[1]))
            elif part[0] == "image":
                image = sample.images[image_index] if image_index < len(sample.images) else None
                parts.append(f"[image {image_index}: {_image_size(image)}, {part[1]} slots]")
                image_index += 1
            else:
                parts.append("<s>" if part[0] == "bos" else "</s>")
        lines.append("   " + " ".join(parts))
    padding = int((segments == 0).sum())
    if padding:
        lines.append(f"── padding: {padding} tokens")
    return "\n".join(lines)
