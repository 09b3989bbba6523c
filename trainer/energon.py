"""Megatron-Energon reads a build as it is: the metadata ``energon prepare`` would write.

Energon reads a WebDataset through a ``.nv-meta`` folder beside the shards
and an index beside each shard. A build's manifest already knows the shards
and their sample counts, so :func:`write_energon_meta` writes them directly,
with one streaming pass over each shard for the byte offsets:

- ``{shard}.tar.idx``: one unsigned 64-bit little-endian integer per sample,
  the offset of its first tar member, then the offset where the last member
  ends (what ``energon prepare`` writes; energon reads them in native byte
  order, little-endian on x86 and ARM);
- ``.nv-meta/.info.json``: ``shard_counts``, each shard's sample count;
- ``.nv-meta/split.yaml``: every shard in the ``train`` split part;
- ``.nv-meta/dataset.yaml``: ``CrudeWebdataset``, with the corpus as a
  subflavor so a cooker can tell builds apart in a metadataset.

``energon prepare`` also writes ``index.sqlite`` and ``index.uuid``, which
energon uses only to join datasets and to look samples up by key; training
on a build through ``get_train_dataset`` does not need them (run ``energon
prepare`` for those uses). Samples come to a cooker as ``CrudeSample`` dicts
keyed by the shard members' extensions (``input_ids.npy``, ``img000.jpg``, …,
``json``); see ``docs/trainer.md``.
"""

from __future__ import annotations

import json
import struct
import tarfile
from typing import Any, BinaryIO

from corpora import reader
from corpora.shards.writing import write_into
from trainer.stream import DataError

NV_META = ".nv-meta"
INDEX_SUFFIX = ".idx"  # energon: Path("x.tar").with_suffix(".tar.idx")


def sample_offsets(stream: BinaryIO) -> list[int]:
    """The byte offset of each sample's first member in a tar, then where the
    last member ends: the content of energon's ``.tar.idx``."""
    offsets: list[int] = []
    last = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        while (member := tar.next()) is not None:
            tar.members.clear()  # one pass; the headers need not be kept
            reader.check_member(member)
            directory, _, name = member.name.rpartition("/")
            key = (
                directory,
                name.partition(".")[0],
            )  # energon's sample key: path up to the first dot
            if key != last:
                offsets.append(member.offset)
                last = key
        offsets.append(tar.offset)
    return offsets


def _write(url: str, data: bytes) -> None:
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" in url:
        import fsspec

        with fsspec.open(url, "wb") as handle:
            handle.write(data)
        return
    write_into(url, data)  # never through a link planted in the build


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name


def energon_files(manifest: dict[str, Any]) -> dict[str, bytes]:
    """The ``.nv-meta`` files of a build, by path relative to the build.

    >>> shards = [{"path": "c4-000000.tar", "samples": 2}, {"path": "c4-000001.tar", "samples": 1}]
    >>> files = energon_files({"corpus": "c4", "corpora_version": "0.1.0",
    ...     "shard_pattern": "c4-{000000..000001}.tar", "shards": shards})
    >>> print(files[".nv-meta/split.yaml"].decode(), end="")
    split_parts:
      train:
        - "c4-{000000..000001}.tar"
    exclude: []
    >>> json.loads(files[".nv-meta/.info.json"])["shard_counts"]
    {'c4-000000.tar': 2, 'c4-000001.tar': 1}
    """
    info = {
        "energon_version": f"written by corpora {manifest.get('corpora_version', '')}".strip(),
        "shard_counts": {shard["path"]: int(shard["samples"]) for shard in manifest["shards"]},
    }
    split = (
        "split_parts:\n"
        "  train:\n"
        f"    - {json.dumps(manifest['shard_pattern'])}\n"  # quoted: the braces stay a string
        "exclude: []\n"
    )
    dataset = (
        "__module__: megatron.energon\n"
        "__class__: CrudeWebdataset\n"
        "subflavors:\n"
        f"  corpus: {json.dumps(manifest['corpus'])}\n"
    )
    return {
        f"{NV_META}/.info.json": (json.dumps(info, indent=2) + "\n").encode(),
        f"{NV_META}/split.yaml": split.encode(),
        f"{NV_META}/dataset.yaml": dataset.encode(),
    }


def write_energon_meta(location: str) -> list[str]:
    """Write a build's ``.nv-meta`` and ``.tar.idx`` files (``location``: its
    directory, local or a URL); the paths written. Raises
    :class:`~trainer.stream.DataError` when a shard does not hold the
    samples its manifest says."""
    base = location[: -len("manifest.json")].rstrip("/") if location.endswith(".json") else location
    try:
        manifest = reader.load_manifest(base)
    except FileNotFoundError:
        raise DataError(f"{location}: no manifest.json (point at a build made by corpora build)")
    except reader.BuildInputError as exc:
        raise DataError(str(exc)) from None
    if not manifest["shards"]:
        raise DataError(f"{location}: the build holds no shards")
    written = []
    for url, entry in zip(reader.shard_urls(base, manifest), manifest["shards"]):
        try:
            with reader.open_url(url) as stream:
                offsets = sample_offsets(stream)
        except (OSError, tarfile.TarError, ValueError) as exc:
            raise DataError(f"{url}: cannot index the shard ({exc})") from None
        if len(offsets) - 1 != entry["samples"]:
            raise DataError(
                f"{url}: {len(offsets) - 1} samples, the manifest says {entry['samples']}"
            )
        _write(url + INDEX_SUFFIX, struct.pack(f"<{len(offsets)}Q", *offsets))
        written.append(url + INDEX_SUFFIX)
    for name, data in energon_files(manifest).items():
        _write(_join(base, name), data)
        written.append(_join(base, name))
    return written
