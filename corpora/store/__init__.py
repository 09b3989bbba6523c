"""The fetched-image store: download once, build many times.

A build writes every image it fetches to the store as it arrives (per input
split, WebDataset tars of the bodies the servers sent, keyed by a hash of
the URL, with a parquet of every URL's outcome beside each tar and a marker
per split), then carries references instead of bytes. A resumed build, a
rebuild with another tokenizer, ``seq_len``, ``--image-size`` or layout, and
the three MMC4 layouts of one input read the images back from it without
the network. ``docs/image-store.md`` describes the layout.

    >>> import io, tempfile
    >>> from PIL import Image
    >>> def png(colour):
    ...     buffer = io.BytesIO()
    ...     Image.new("RGB", (40, 30), colour).save(buffer, "PNG")
    ...     return buffer.getvalue()
    >>> store = ImageStore.open(tempfile.mkdtemp())
    >>> with store.writer("docs-0.jsonl") as writer:      # a fetch stage feeds it
    ...     stored = writer.add("https://a.example/1.png", png("red"), status=200)
    ...     failed = writer.add_failure("https://a.example/2.png", "timeout")
    ...     opted = writer.add_failure("https://b.example/3.png", "opted_out", status=200)
    >>> store.state("docs-0.jsonl")
    'partial'
    >>> _ = store.mark_complete("docs-0.jsonl")
    >>> index = store.index(["docs-0.jsonl"])                # what the next build asks
    >>> found = index.lookup("https://a.example/1.png")
    >>> found.key, found.width, found.height, found.ref.size == len(png("red"))
    ('a61b9a566c31d2ee01445caca7b3d826', 40, 30, True)
    >>> [needs_fetch(index.lookup(u), refetch_failures=True) for u in (
    ...     "https://a.example/1.png", "https://a.example/2.png",
    ...     "https://b.example/3.png", "https://c.example/new.png")]
    [False, True, False, True]
    >>> with ImageReader() as reader:                      # the shard writer reads it back
    ...     reader.read(found.ref) == png("red")
    True
"""

from corpora.store.img2dataset_output import Img2DatasetOutput, reason_from_img2dataset
from corpora.store.index import StoreIndex
from corpora.store.keys import StoreError, check_split_names, image_key, split_name
from corpora.store.layout import ImageStore
from corpora.store.outcomes import (
    RECHECKED,
    RETRYABLE,
    UNKNOWN,
    Failed,
    ImageRef,
    Stored,
    Unknown,
    needs_fetch,
    resolve,
)
from corpora.store.reader import ImageReader
from corpora.store.writer import StoreSpec, StoreWriter, identify

__all__ = [
    "RECHECKED",
    "RETRYABLE",
    "UNKNOWN",
    "Failed",
    "ImageReader",
    "ImageRef",
    "ImageStore",
    "Img2DatasetOutput",
    "StoreError",
    "StoreIndex",
    "StoreSpec",
    "StoreWriter",
    "Stored",
    "Unknown",
    "check_split_names",
    "identify",
    "image_key",
    "needs_fetch",
    "reason_from_img2dataset",
    "resolve",
    "split_name",
]
