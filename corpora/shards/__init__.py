"""The shard side of a build: everything after packing.

- :mod:`~corpora.shards.writing`: WebDataset shards, format v1, written
  byte for byte the same for the same samples;
- :mod:`~corpora.shards.reading`: the one reading of a build (public as
  :mod:`corpora.reader`);
- :mod:`~corpora.shards.manifest`: ``manifest.json``;
- :mod:`~corpora.shards.resume`: what a resumed build compares.

The writing names are importable from here (``shards.write_shard``).
"""

from corpora.shards.writing import (
    ARRAYS,
    json_bytes,
    npy_bytes,
    sample_files,
    sample_key,
    shard_name,
    shard_pattern,
    write_shard,
)

__all__ = [
    "ARRAYS",
    "json_bytes",
    "npy_bytes",
    "sample_files",
    "sample_key",
    "shard_name",
    "shard_pattern",
    "write_shard",
]
