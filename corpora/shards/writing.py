"""WebDataset shards, format v1 (see ``docs/shard-format.md``).

One tar sample is one packed sequence::

    {key}.input_ids.npy    int32 [seq_len]
    {key}.segment_ids.npy  int32 [seq_len]
    {key}.positions.npy    int32 [seq_len]
    {key}.img000.jpg …     the images, in slot order
    {key}.json             provenance per document

Tar members carry fixed metadata (mtime 0, uid/gid 0, mode 0444) and are
written in a fixed order, so the same samples give the same bytes.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from typing import Any, BinaryIO, Iterable

import numpy as np

from corpora.pack import PackedSequence

ARRAYS = ("input_ids", "segment_ids", "positions")


def shard_name(corpus: str, index: int) -> str:
    return f"{corpus}-{index:06d}.tar"


def shard_pattern(corpus: str, count: int) -> str:
    """Brace notation for ``count`` shards: ``mmc4-{000000..000041}.tar``."""
    if count == 1:
        return shard_name(corpus, 0)
    return f"{corpus}-{{{0:06d}..{count - 1:06d}}}.tar"


def sample_key(corpus: str, shard: int, index: int) -> str:
    return f"{corpus}-{shard:06d}-{index:06d}"


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode(
        "utf-8"
    )


def sample_files(sequence: PackedSequence) -> list[tuple[str, bytes]]:
    """The (extension, bytes) members of one sample, in tar order."""
    files = [(f"{name}.npy", npy_bytes(getattr(sequence, name))) for name in ARRAYS]
    files += [(f"img{i:03d}.jpg", data) for i, data in enumerate(sequence.images)]
    files.append(("json", json_bytes({"documents": list(sequence.documents)})))
    return files


class _HashingWriter(io.RawIOBase):
    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self._stream.write(data)
        self.sha256.update(data)
        self.size += len(data)
        return len(data)


def write_shard(stream: BinaryIO, samples: Iterable[tuple[str, PackedSequence]]) -> dict[str, Any]:
    """Write ``(key, sequence)`` samples as a tar to ``stream``.

    Returns the shard's counts (``samples``, ``documents``, ``images``,
    ``max_images_per_sample``), its size in ``bytes`` and its ``sha256``.
    """
    writer = _HashingWriter(stream)
    count = documents = images = max_images = 0
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.USTAR_FORMAT) as tar:
        for key, sequence in samples:
            for extension, data in sample_files(sequence):
                info = tarfile.TarInfo(f"{key}.{extension}")
                info.size = len(data)
                info.mtime = 0
                info.mode = 0o444
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
            # tarfile keeps every member's header otherwise: memory would grow with the shard
            tar.members.clear()
            count += 1
            documents += len(sequence.documents)
            images += len(sequence.images)
            max_images = max(max_images, len(sequence.images))
    return {
        "samples": count,
        "documents": documents,
        "images": images,
        "max_images_per_sample": max_images,
        "bytes": writer.size,
        "sha256": writer.sha256.hexdigest(),
    }
