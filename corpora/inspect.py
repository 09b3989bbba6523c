"""Human-readable views of packed samples (``corpora inspect``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from corpora import reader
from corpora.manifest import MANIFEST


def _load_manifest(directory: str) -> dict[str, Any] | None:
    try:
        return reader.load_manifest(directory)
    except FileNotFoundError:
        return None


def find_sample(path: str, index: int) -> tuple[reader.Sample, dict[str, Any] | None]:
    """Sample number ``index`` of a build directory (counting across its
    shards in order) or of one shard file, and the build's manifest."""
    if os.path.isdir(path):
        manifest = _load_manifest(path)
        if manifest is None:
            raise ValueError(f"no {MANIFEST} in {path}")
        shard_paths = reader.shard_urls(path, manifest)
    elif os.path.isfile(path):
        manifest = _load_manifest(os.path.dirname(os.path.abspath(path)))
        shard_paths = [path]
    else:
        raise ValueError(f"not found: {path}")
    seen = 0
    for sample in reader.iter_samples(shard_paths):
        if seen == index:
            return sample, manifest
        seen += 1
    raise IndexError(f"sample {index} out of range: {path} holds {seen} samples")


def _decoder(manifest: dict[str, Any] | None):
    if manifest is None:
        return None
    path = manifest.get("tokenizer", {}).get("path")
    if not path or not os.path.exists(path):
        return None
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=path)
    return lambda ids: processor.decode([int(i) for i in ids])


def _image_size(image: Any) -> str:
    return f"{image.width}x{image.height}" if image is not None else "missing"


def segment_parts(
    run, image_token: int | None, tokens_per_image: int, bos: int | None, eos: int | None
) -> list[tuple]:
    """One segment's ids as a reader sees them, in order: ``("bos",)``,
    ``("image", slots)`` per image (adjacent images have adjacent slot runs,
    each ``tokens_per_image`` long), ``("text", ids)``, ``("eos",)``.

    >>> segment_parts([1, 9, 9, 9, 9, 5, 6, 2], image_token=9, tokens_per_image=2, bos=1, eos=2)
    [('bos',), ('image', 2), ('image', 2), ('text', [5, 6]), ('eos',)]
    """
    parts: list[tuple] = []
    text: list[int] = []
    position = 0
    while position < len(run):
        token = int(run[position])
        if token == image_token or token in (bos, eos):
            if text:
                parts.append(("text", text))
                text = []
        if token == image_token:
            end = position
            while (
                end < len(run)
                and int(run[end]) == image_token
                and end - position < tokens_per_image
            ):
                end += 1
            parts.append(("image", end - position))
            position = end
            continue
        if token == bos:
            parts.append(("bos",))
        elif token == eos:
            parts.append(("eos",))
        else:
            text.append(token)
        position += 1
    if text:
        parts.append(("text", text))
    return parts


def describe_sample(sample: reader.Sample, manifest: dict[str, Any] | None) -> str:
    """The sample's segments: decoded text with ``[image k: WxH]`` where each
    image's slot run sits, ``<s>``/``</s>`` for BOS/EOS, and the padding."""
    ids: np.ndarray = sample.input_ids
    segments: np.ndarray = sample.segment_ids
    image_token = manifest["image_token_id"] if manifest else None
    bos = manifest["bos_id"] if manifest else None
    eos = manifest["eos_id"] if manifest else None
    per_image = manifest["tokens_per_image"] if manifest else len(ids)
    decode = _decoder(manifest) or (lambda run: " ".join(str(int(i)) for i in run))
    documents = {d["segment"]: d for d in sample.documents}
    lines = [
        f"sample {sample.key} in {os.path.basename(sample.url)}: "
        f"{len(ids)} tokens, {sample.tokens} used, {len(sample.images)} images"
    ]
    image_index = 0
    for segment in [int(s) for s in np.unique(segments) if s > 0]:
        where = np.nonzero(segments == segment)[0]
        run = ids[where[0] : where[-1] + 1]
        doc = documents.get(segment, {})
        split = f", piece {doc['piece'] + 1} of {doc['pieces']}" if doc.get("split") else ""
        lines.append(f"── segment {segment}: {doc.get('id', '?')} ({len(run)} tokens{split})")
        parts: list[str] = []
        for part in segment_parts(run, image_token, per_image, bos, eos):
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
