"""Names in an image store: the key of an image URL, the split of an input
file, the files of a part.

A key is the first 32 hex digits (128 bits) of the SHA-256 of the URL's
UTF-8 bytes, exactly as the URL is given (no normalisation: the fetcher
requests the URL as given, so two spellings are two fetches). SHA-256 is in
the standard library and the same on every platform and Python release, so
keys never change under a store; 128 bits make a collision among a billion
URLs about one chance in 10^20, where 64 bits would give one in 40.

    >>> image_key("https://example.com/cat.jpg")
    '777460dbe029a0d171d01bdff9684f5c'
    >>> split_name("gs://bucket/coyo/part-00017.parquet"), split_name("/data/docs 1.jsonl.zip")
    ('part-00017.parquet', 'docs_1.jsonl.zip')
"""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Iterable

STORE_FILE = "store.json"  # what the store holds (originals or a size), written once
SPLITS = "splits"  # {root}/splits/{split}/part-….tar + .parquet, complete.json
MARKER = "complete.json"
KEY_HEX_DIGITS = 32
_TEMP = ".tmp-"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class StoreError(Exception):
    """A store that cannot be used as asked (reported in one line, exit code 2)."""


def image_key(url: str) -> str:
    """The store key of an image URL: 32 hex digits of its SHA-256."""
    data = url.encode("utf-8", "surrogatepass")  # a lone surrogate from JSON still has a key
    return hashlib.sha256(data).hexdigest()[:KEY_HEX_DIGITS]


def split_name(input_path: str) -> str:
    """The split an input file's images are stored under: its file name, with
    characters other than letters, digits, ``.``, ``_`` and ``-`` replaced."""
    name = input_path.rstrip("/").rsplit("/", 1)[-1]
    name = _UNSAFE.sub("_", name).strip(".")
    if not name:
        raise StoreError(f"{input_path!r}: no file name to name its split after")
    return name


def check_split_names(input_paths: Iterable[str]) -> dict[str, str]:
    """Split name per input path; raises :class:`StoreError` when two inputs
    would share a split (same file name in two folders).

    >>> check_split_names(["a/x.jsonl", "b/y.jsonl"])
    {'a/x.jsonl': 'x.jsonl', 'b/y.jsonl': 'y.jsonl'}
    >>> check_split_names(["a/x.jsonl", "b/x.jsonl"])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    corpora.store.keys.StoreError: inputs a/x.jsonl and b/x.jsonl would share the image-store
    split 'x.jsonl'; rename one
    """
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    for path in input_paths:
        name = split_name(path)
        if name in owner and owner[name] != path:
            raise StoreError(
                f"inputs {owner[name]} and {path} would share the image-store split {name!r}; "
                "rename one"
            )
        owner[name], names[path] = path, name
    return names


def split_dir(split: str) -> str:
    if split != split_name(split):
        raise StoreError(f"not a split name: {split!r} (use split_name(input_path))")
    return f"{SPLITS}/{split}"


def new_writer_id() -> str:
    """Unique per writer, so writers of one split never collide on a name."""
    return uuid.uuid4().hex[:12]


def part_name(writer_id: str, sequence: int) -> str:
    return f"part-{writer_id}-{sequence:05d}"


def temp_name(final: str) -> str:
    """A fresh name beside ``final`` that no reader takes for a committed file."""
    return f"{final}{_TEMP}{uuid.uuid4().hex}"


def is_temp(name: str) -> bool:
    return _TEMP in name
