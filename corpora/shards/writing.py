"""WebDataset shards, format v1 (see ``docs/shard-format.md``).

One tar sample is one packed sequence::

    {key}.input_ids.npy    int32 [seq_len]
    {key}.segment_ids.npy  int32 [seq_len]
    {key}.positions.npy    int32 [seq_len]
    {key}.img000.jpg …     the images, in slot order
    {key}.json             provenance per document

Tar members carry fixed metadata (mtime 0, uid/gid 0, mode 0444) and are
written in a fixed order, so the same samples give the same bytes.

The members are written here rather than through :mod:`tarfile`, whose
per-member header building was most of a shard's cost: the bytes are exactly
those of ``tarfile.open(mode="w|", format=tarfile.USTAR_FORMAT)`` with that
metadata (``tests/corpora/shards/test_writing.py`` compares them), down to the
two end-of-archive blocks and the padding to a whole record.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tarfile
import uuid
from typing import Any, BinaryIO, Iterable

import numpy as np

from corpora.tokens.pack import PackedSequence

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


def _np_save(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@functools.lru_cache(maxsize=64)
def _npy_header(shape: tuple[int, ...]) -> bytes:
    # np.save's own header, taken from its output: the same bytes whatever the numpy version
    data = _np_save(np.zeros(shape, dtype=np.int32))
    return data[: len(data) - 4 * int(np.prod(shape))]


def npy_bytes(array: np.ndarray) -> bytes:
    """``array`` as ``np.save`` writes it (``allow_pickle=False``).

    >>> array = np.arange(3, dtype=np.int32)
    >>> npy_bytes(array) == _np_save(array) and npy_bytes(array)[-4:] == b"\\x02\\0\\0\\0"
    True
    """
    # the sequences' arrays (1-D contiguous int32) take the cached header; the rest np.save
    if (
        isinstance(array, np.ndarray)
        and array.ndim == 1
        and array.dtype == np.int32
        and array.flags.c_contiguous
    ):
        return _npy_header(array.shape) + array.tobytes()
    return _np_save(array)


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


# A USTAR header (tarfile's layout) with the fixed metadata, in three parts around the name
# (bytes 0-99) and the size (124-135); the checksum field (148-155) holds its eight spaces.
_BLOCK = tarfile.BLOCKSIZE
_HEADER_MODE_TO_SIZE = b"0000444\0" + b"0000000\0" * 2  # mode, uid, gid
_HEADER_AFTER_SIZE = (
    b"00000000000\0"  # mtime
    + b" " * 8  # checksum, while it is summed
    + tarfile.REGTYPE
    + b"\0" * 100  # linkname
    + tarfile.POSIX_MAGIC
    + b"\0" * (32 + 32)  # uname, gname
    + b"\0" * (8 + 8)  # devmajor, devminor: none for a regular file
    + b"\0" * 155  # prefix
    + b"\0" * (_BLOCK - 500)
)
_HEADER_FIXED_SUM = sum(_HEADER_MODE_TO_SIZE) + sum(_HEADER_AFTER_SIZE)
_MAX_SIZE = 8**11  # USTAR's 11 octal digits


def fixed_tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """A member of ``size`` bytes with the fixed metadata every tar of the
    project carries (shards, image-store parts): mtime 0, mode 0444, uid/gid 0,
    no user or group names."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def tar_header(name: str, size: int) -> bytes:
    """The header ``tarfile`` writes for a member ``name`` of ``size`` bytes."""
    encoded = name.encode(tarfile.ENCODING, "surrogateescape")
    if len(encoded) > 100 or size >= _MAX_SIZE:
        # tarfile splits a long name into prefix and name (or refuses it): its header, its error
        return fixed_tarinfo(name, size).tobuf(
            tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape"
        )
    name_field = encoded + b"\0" * (100 - len(encoded))
    size_field = b"%011o\0" % size
    checksum = _HEADER_FIXED_SUM + sum(encoded) + sum(size_field)
    return b"".join(
        (
            name_field,
            _HEADER_MODE_TO_SIZE,
            size_field,
            _HEADER_AFTER_SIZE[:12],
            b"%06o\0" % checksum,
            _HEADER_AFTER_SIZE[19:],
        )
    )


def _padding(size: int) -> bytes:
    return b"\0" * (-size % _BLOCK)


def tar_end(size: int) -> bytes:
    """What ends an archive of ``size`` bytes so far: two zero blocks, then
    zeros to a whole record, as tarfile writes them."""
    end = 2 * _BLOCK
    return b"\0" * (end + -(size + end) % tarfile.RECORDSIZE)


def write_shard(stream: BinaryIO, samples: Iterable[tuple[str, PackedSequence]]) -> dict[str, Any]:
    """Write ``(key, sequence)`` samples as a tar to ``stream``.

    Returns the shard's counts (``samples``, ``documents``, ``images``,
    ``max_images_per_sample``), its size in ``bytes`` and its ``sha256``.
    """
    writer = _HashingWriter(stream)
    count = documents = images = max_images = 0
    for key, sequence in samples:
        parts = []
        for extension, data in sample_files(sequence):
            parts += (tar_header(f"{key}.{extension}", len(data)), data, _padding(len(data)))
        # one write per sample: the members of a sample are a few blocks each
        writer.write(b"".join(parts))
        count += 1
        documents += len(sequence.documents)
        images += len(sequence.images)
        max_images = max(max_images, len(sequence.images))
    writer.write(tar_end(writer.size))
    return {
        "samples": count,
        "documents": documents,
        "images": images,
        "max_images_per_sample": max_images,
        "bytes": writer.size,
        "sha256": writer.sha256.hexdigest(),
    }


def write_into(path: str, data: bytes) -> None:
    """``data`` at the local ``path`` (a file a reader adds to a build:
    ``report.html``, energon's ``.tar.idx`` and ``.nv-meta``), never written
    through a link someone planted there: the bytes go to a new temporary
    file beside it, created exclusively without following links, that is
    renamed over ``path`` (a link at ``path`` is replaced, not followed). A
    folder on the way that is a link is refused with ``OSError``."""
    directory = os.path.dirname(path) or "."
    if os.path.islink(directory):
        raise OSError(f"{directory} is a link: not writing through it")
    os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp-{uuid.uuid4().hex}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    handle = os.fdopen(os.open(temporary, flags, 0o644), "wb")
    try:
        with handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise
