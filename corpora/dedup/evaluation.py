"""Evaluation images a build must not contain (``--decontaminate PATH``).

PATH is a folder of evaluation images (every file in it, recursively, that
opens as an image) or a parquet of their perceptual hashes (a ``phash``
column of 16 hex digits, as :func:`corpora.dedup.phash.phash_hex` writes
them; other columns are ignored). A text or JSON-lines file is an evaluation
text, the text rules' (``corpora/dedup/text.py``):
:func:`corpora.dedup.sources.source_kind` tells them apart for both. A
folder may be local or any fsspec URL (``gs://``, ``s3://``, ``memory://``).
The manifest records each source's sha256 (:attr:`EvalImages.sha256`), so a
build says what it was cleaned against.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> from PIL import Image
>>> Image.new("RGB", (32, 32), (10, 200, 10)).save(os.path.join(folder, "a.png"))
>>> with open(os.path.join(folder, "notes.txt"), "w") as f:
...     _ = f.write("not an image")
>>> source = read_eval_images(folder)
>>> source.names, [hex(h) for h in source.hashes], source.skipped
(('a.png',), ['0x8000000000000000'], 1)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os

import fsspec

from corpora.dedup.phash import parse_phash, phash_hex, phash_of_image
from corpora.dedup.sources import folder_sha256


@dataclasses.dataclass(frozen=True)
class EvalImages:
    path: str
    sha256: str  # of the parquet; of a folder: sources.folder_sha256, as the manifest records it
    names: tuple[str, ...]
    hashes: tuple[int, ...]
    skipped: int = 0  # files of a folder that are not images

    def summary(self) -> dict:
        return {
            "path": self.path,
            "kind": "images",
            "sha256": self.sha256,
            "images": len(self.hashes),
            "skipped": self.skipped,
        }


def read_eval_images(path: str) -> EvalImages:
    """The evaluation images of a folder (local or any fsspec URL) or a parquet of
    their hashes (what :func:`corpora.dedup.sources.source_kind` calls them)."""
    fs, root = fsspec.core.url_to_fs(path)
    if fs.isdir(root):
        return _read_folder(path, fs, root)
    return _read_parquet(path)


def _read_folder(folder: str, fs, root: str) -> EvalImages:
    names, hashes, files, skipped = [], [], [], 0
    prefix = root.rstrip("/") + "/"
    for full in sorted(fs.find(root)):
        data = fs.cat_file(full)
        relative = full[len(prefix) :] if full.startswith(prefix) else os.path.basename(full)
        files.append((relative, hashlib.sha256(data).hexdigest()))
        try:
            value = phash_of_image(data)
        except Exception:  # not an image: a README, a labels file
            skipped += 1
            continue
        names.append(relative)
        hashes.append(value)
    return EvalImages(folder, folder_sha256(files), tuple(names), tuple(hashes), skipped)


def _read_parquet(path: str) -> EvalImages:
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as stream:
        data = stream.read()
    table = pq.read_table(io.BytesIO(data))
    if "phash" not in table.column_names:
        raise ValueError(f"{path}: an evaluation parquet needs a 'phash' column (16 hex digits)")
    values = table.column("phash").to_pylist()
    hashes = tuple(parse_phash(v) if isinstance(v, str) else int(v) for v in values)
    names = (
        tuple(str(n) for n in table.column("name").to_pylist())
        if "name" in table.column_names
        else tuple(phash_hex(h) for h in hashes)
    )
    return EvalImages(path, hashlib.sha256(data).hexdigest(), names, hashes)


def write_eval_parquet(path: str, names: list[str], hashes: list[int]) -> None:
    """A parquet of evaluation hashes, as :func:`read_eval_images` reads it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"name": names, "phash": [phash_hex(h) for h in hashes]})
    pq.write_table(table, path)
