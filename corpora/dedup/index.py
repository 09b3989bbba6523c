"""A build's hash index, and what another build already kept (``--exclude-seen``).

Every build writes ``dedup_index.parquet`` beside its manifest: one row per
distinct key of what it kept, ``kind`` and ``value``, sorted (the same bytes
for the same kept records, whatever the runner):

- ``image_sha256``: the sha256 of each kept image's bytes as the shards hold
  them (after the resize: two builds at one image size agree);
- ``image_source_sha256``: the sha256 of the body the server sent, where the
  fetch kept it (``meta["source_sha256"]``, the exact image rule's key):
  builds at other image sizes agree on it;
- ``image_url``: each kept image's URL;
- ``text``: the normalised text hash (:func:`corpora.dedup.text.text_hash`)
  of each kept record's text.

``--exclude-seen BUILD`` reads another build's index (:class:`Seen`); the
stage ``seen_in_blend`` then drops a record whose text that build kept, or
whose image it kept (a pair), and takes such an image out of a document
(counted in ``images_removed``), before anything is downloaded; after the
fetch, an image whose bytes it kept is taken out the same way::

    >>> from corpora.record import Document, ImageChunk, TextChunk
    >>> image = ImageChunk("http://x/1.jpg", sha256="ab")
    >>> kept = Document("a", "coyo", (image, TextChunk("A cat.")))
    >>> sorted(index_rows([kept]))  # doctest: +NORMALIZE_WHITESPACE
    [('image_sha256', 'ab'), ('image_url', 'http://x/1.jpg'),
     ('text', '6eda1d6f0337894464a66e34f5d33507')]
    >>> seen = Seen.from_rows(index_rows([kept]))
    >>> exclude_seen(Document("b", "coyo", (ImageChunk(image.url), TextChunk("A dog."))), seen)
    Drop(reason='seen_in_blend', record_id='b', detail='image http://x/1.jpg', count=1, url=None)
    >>> doc = Document("c", "mmc4", (ImageChunk("http://x/1.jpg"), TextChunk("One."),
    ...                              ImageChunk("http://x/2.jpg"), TextChunk("Two.")))
    >>> left = exclude_seen(doc, seen, pairs=False)
    >>> [c.url for c in left.images], left.meta["images_removed"]
    (['http://x/2.jpg'], {'seen_in_blend': 1})
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import functools
import hashlib
import io
import os
import tempfile
from typing import TYPE_CHECKING, BinaryIO, Iterable, Iterator, Sequence

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from corpora.config import catalog
from corpora.config.spec import Option
from corpora.dedup.text import record_text, text_hash, text_hashes
from corpora.record import Document, Drop, ImageChunk

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

INDEX = "dedup_index.parquet"
SEEN_IN_BLEND = "seen_in_blend"
IMAGE_SHA256, IMAGE_SOURCE_SHA256 = "image_sha256", "image_source_sha256"
IMAGE_URL, TEXT = "image_url", "text"
KINDS = (IMAGE_SHA256, IMAGE_SOURCE_SHA256, IMAGE_URL, TEXT)
# the key the fetch stage keeps the body's sha256 under (corpora.dedup.images.SOURCE_SHA256)
_SOURCE_SHA256 = "source_sha256"
_SCHEMA = pa.schema([("kind", pa.string()), ("value", pa.string())])
# The index writer merges about this many rows at once (write_merged_index),
# keeps a sample of about _SAMPLE rows to cut them into ranges, and writes row
# groups of ROW_GROUP_ROWS: a writer holds a row group until it is written, and
# parquet's default (1,048,576 rows) took 90 MB of a 2,000,000-row index's
# 137 MB peak
MERGE_ROWS = 64_000
ROW_GROUP_ROWS = 128 * 1024
_SAMPLE = 8_192
_OPEN_RANGES = 256  # range files open at once, well under a process's file limit


def index_rows(documents: Sequence[Document]) -> Iterator[tuple[str, str]]:
    """The index's (kind, value) rows of kept records (a batch's texts hashed
    together: :func:`corpora.dedup.text.text_hashes`)."""
    texts = []
    for document in documents:
        for image in document.images:
            if image.sha256:
                yield IMAGE_SHA256, image.sha256
            if image.meta.get(_SOURCE_SHA256):
                yield IMAGE_SOURCE_SHA256, image.meta[_SOURCE_SHA256]
            yield IMAGE_URL, image.url
        text = record_text(document)
        if text.strip():
            texts.append(text)
    for value in text_hashes(texts):
        yield TEXT, value


def index_table(rows: Iterable[tuple[str, str]]) -> pa.Table:
    """``rows`` distinct and sorted, as the index's table: a batch's rows cross
    the runner and wait for the writer as a few bytes a row, not Python tuples."""
    unique = sorted(set(rows))
    return pa.table(
        {"kind": [kind for kind, _ in unique], "value": [value for _, value in unique]},
        schema=_SCHEMA,
    )


def merged_table(tables: Iterable[pa.Table]) -> pa.Table:
    """The distinct rows of ``tables``, sorted, in one chunk: the table of
    all their rows (:func:`index_table`), merged in Arrow's memory.

    The rows are put in one chunk first (the batches' tables are let go
    of), sorted, and a row equal to the one before it left out, where a
    hash grouping of the two string columns held several copies: merging
    and writing a 40,000-image index (160,000 rows, 9 MB) peaks 61 MiB
    above the process's base, against 113 MiB before, and it was the
    largest share of what a build's biggest process grew by per image.

    >>> a = index_table([("text", "b"), ("text", "a")])
    >>> b = index_table([("image_url", "u"), ("text", "b")])
    >>> merged_table([a, b]).equals(index_table([("text", "b"), ("text", "a"), ("image_url", "u")]))
    True
    """
    empty = index_table(())  # where there is no table
    rows = pa.concat_tables([empty, *(table.cast(_SCHEMA) for table in tables)]).combine_chunks()
    order = pc.sort_indices(rows, sort_keys=[("kind", "ascending"), ("value", "ascending")])
    rows = rows.take(order)
    if rows.num_rows < 2:
        return rows.combine_chunks()
    kind, value = rows.column("kind"), rows.column("value")
    repeated = pc.and_(pc.equal(kind[1:], kind[:-1]), pc.equal(value[1:], value[:-1]))
    first = pa.concat_arrays([pa.array([True]), pc.invert(repeated).combine_chunks()])
    return rows.filter(first).combine_chunks()


def write_merged_index(
    stream: BinaryIO,
    tables: Iterable[pa.Table],
    merge_rows: int = MERGE_ROWS,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> dict[str, int]:
    """Write the distinct rows of ``tables`` (each sorted and distinct, as
    :func:`index_table` makes them) sorted, as one parquet: the bytes of
    :func:`write_index_table` on :func:`merged_table`, in memory that stays
    flat however many rows there are. Returns the rows of each kind.

    The tables are read once and spilled to a local scratch file; a sample of
    their rows cuts the key space into ranges of about ``merge_rows`` rows;
    each range is merged on its own (:func:`merged_table`), in order, and
    written a row group (``row_group_rows``) at a time. Merging and writing
    2,000,000 text rows took 426 MiB above the process's base all at once
    (where a 2,000,000-document build's other steps peak at 341 MiB), and
    57 MiB by ranges (200,000 rows: 61 and 46 MiB).

    >>> a = index_table([("text", "b"), ("text", "a")])
    >>> b = index_table([("image_url", "u"), ("text", "b"), ("text", "c")])
    >>> one, two = io.BytesIO(), io.BytesIO()
    >>> write_merged_index(one, [a, b], merge_rows=2, row_group_rows=2)
    {'image_url': 1, 'text': 3}
    >>> _ = pq.write_table(merged_table([a, b]), two, compression="zstd", row_group_size=2)
    >>> one.getvalue() == two.getvalue()
    True
    """
    counts: collections.Counter = collections.Counter()
    pool = pa.default_memory_pool()
    with tempfile.TemporaryDirectory(prefix="corpora-index-") as scratch:
        spill = os.path.join(scratch, "rows.arrow")
        rows, sample = _spill(tables, spill)
        cuts = _cuts(sample, ranges=-(-rows // merge_rows))
        pending: list[pa.Table] = []
        with pq.ParquetWriter(stream, _SCHEMA, compression="zstd") as writer:
            for part in _ranges(spill, cuts, scratch):
                pool.release_unused()  # the last range's buffers: mimalloc keeps them otherwise
                merged = merged_table(part)
                for entry in pc.value_counts(merged.column("kind")).to_pylist():
                    counts[entry["values"]] += entry["counts"]
                pending.append(merged)
                while sum(t.num_rows for t in pending) >= row_group_rows:
                    block = pa.concat_tables(pending)  # chunks side by side, not copied
                    writer.write_table(block.slice(0, row_group_rows))
                    pending = [block.slice(row_group_rows)]
            block = pa.concat_tables([index_table(()), *pending]).combine_chunks()
            if block.num_rows or not counts:  # an empty index is one empty row group
                writer.write_table(block)
    return {kind: counts[kind] for kind in sorted(counts)}


def _spill(tables: Iterable[pa.Table], path: str) -> tuple[int, list[tuple[str, str]]]:
    """Write ``tables`` one after another to ``path`` (Arrow IPC), each a
    batch of its own; returns the rows written and an even sample of them,
    at most about :data:`_SAMPLE` rows whatever their number."""
    rows, step, sample = 0, 1, []
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as writer:
        for table in tables:
            table = table.cast(_SCHEMA).combine_chunks()
            if not table.num_rows:
                continue
            writer.write_batch(table.to_batches()[0])
            picked = table.take(pa.array(range(-rows % step, table.num_rows, step), pa.int64()))
            sample += zip(picked.column("kind").to_pylist(), picked.column("value").to_pylist())
            rows += table.num_rows
            if len(sample) > 2 * _SAMPLE:  # every other one: still even, half the rate
                sample, step = sample[::2], 2 * step
    return rows, sample


def _cuts(sample: list[tuple[str, str]], ranges: int) -> list[tuple[str, str]]:
    """The distinct rows, in order, that cut ``sample`` into ``ranges`` even ranges."""
    ordered = sorted(set(sample))
    return sorted({ordered[len(ordered) * i // ranges] for i in range(1, ranges)})


def _ranges(path: str, cuts: list[tuple[str, str]], scratch: str) -> Iterator[list[pa.Table]]:
    """The rows of the spill at ``path`` a range at a time, in order (the
    ranges between ``cuts``): each range's pieces of every batch, written to
    a file of its own and read back when its turn comes."""
    with pa.OSFile(path, "rb") as source:
        spill = pa.ipc.open_file(source)
        if not cuts:  # one range: the spill itself
            yield [
                pa.Table.from_batches([spill.get_batch(i)]) for i in range(spill.num_record_batches)
            ]
            return
        names = [os.path.join(scratch, f"range-{i}.arrow") for i in range(len(cuts) + 1)]
        for first in range(0, len(names), _OPEN_RANGES):  # at most so many files open at once
            wave = range(first, min(first + _OPEN_RANGES, len(names)))
            with contextlib.ExitStack() as stack:
                writers = [stack.enter_context(pa.ipc.new_stream(names[i], _SCHEMA)) for i in wave]
                for i in range(spill.num_record_batches):
                    batch = spill.get_batch(i)
                    bounds = _bounds(batch, cuts, wave.start, wave.stop)
                    for writer, start, stop in zip(writers, bounds, bounds[1:]):
                        if stop > start:
                            writer.write_batch(batch.slice(start, stop - start))
    os.remove(path)  # every row is in a range's file now: half the scratch disk
    for name in names:
        with pa.OSFile(name, "rb") as source:
            yield [pa.Table.from_batches(list(pa.ipc.open_stream(source)), _SCHEMA)]
        os.remove(name)


def _bounds(batch: pa.RecordBatch, cuts: list, first: int, stop: int) -> list[int]:
    """Where the ranges ``first`` to ``stop`` begin and end in a sorted
    ``batch``: range ``i`` holds the rows from ``cuts[i - 1]`` (included) to
    ``cuts[i]`` (left out), the first from the start, the last to the end."""
    rows = list(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))
    starts = [bisect.bisect_left(rows, cuts[i - 1]) if i else 0 for i in range(first, stop)]
    return starts + [bisect.bisect_left(rows, cuts[stop - 1]) if stop <= len(cuts) else len(rows)]


def write_index_table(stream: BinaryIO, table: pa.Table) -> int:
    """Write an index table (:func:`merged_table`) as one parquet; returns its rows."""
    pq.write_table(table, stream, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    return table.num_rows


def write_index(stream: BinaryIO, rows: Iterable[tuple[str, str]]) -> int:
    """Write the distinct ``rows`` sorted as one parquet; returns how many."""
    return write_index_table(stream, index_table(rows))


@dataclasses.dataclass(frozen=True)
class Seen:
    """What other builds kept: image sha256s, image URLs, text hashes."""

    image_sha256: frozenset[str] = frozenset()
    image_source_sha256: frozenset[str] = frozenset()
    image_url: frozenset[str] = frozenset()
    text: frozenset[str] = frozenset()

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str]]) -> "Seen":
        found: dict[str, set[str]] = {kind: set() for kind in KINDS}
        for kind, value in rows:
            if kind in found:
                found[kind].add(value)
        return cls(**{kind: frozenset(values) for kind, values in found.items()})

    @classmethod
    def read(cls, streams: Iterable[BinaryIO]) -> "Seen":
        return cls.from_rows(row for stream in streams for row in read_index(stream))

    def __len__(self) -> int:
        return sum(len(getattr(self, kind)) for kind in KINDS)

    def image_seen(self, image: ImageChunk) -> bool:
        return (
            image.url in self.image_url
            or (image.sha256 is not None and image.sha256 in self.image_sha256)
            or image.meta.get(_SOURCE_SHA256) in self.image_source_sha256
        )


def read_index(stream: BinaryIO) -> Iterator[tuple[str, str]]:
    table = pq.read_table(io.BytesIO(stream.read()))
    return zip(table.column("kind").to_pylist(), table.column("value").to_pylist())


def exclude_seen(document: Document, seen: Seen, pairs: bool = True) -> Document | Drop:
    """``document`` less what another build kept: dropped when its text was kept,
    or (``pairs``: a one-image record) its image; otherwise its seen images removed."""
    if seen.text:
        text = record_text(document)
        if text.strip() and text_hash(text) in seen.text:
            return Drop(SEEN_IN_BLEND, document.id, detail="text")
    seen_images = [chunk for chunk in document.images if seen.image_seen(chunk)]
    if not seen_images:
        return document
    if pairs:
        return Drop(SEEN_IN_BLEND, document.id, detail=f"image {seen_images[0].url}")
    kept = tuple(c for c in document.chunks if not (c.kind == "image" and seen.image_seen(c)))
    removed = dict(document.meta.get("images_removed") or {})
    removed[SEEN_IN_BLEND] = removed.get(SEEN_IN_BLEND, 0) + len(seen_images)
    return document.replace(chunks=kept).with_meta(images_removed=removed)


def overlap(one: Seen, two: Seen) -> dict[str, int]:
    """How many keys of each kind two builds share (``corpora train data`` warns on any).

    >>> overlap(Seen(image_url=frozenset({"u", "v"})), Seen(image_url=frozenset({"v"})))
    {'image_sha256': 0, 'image_source_sha256': 0, 'image_url': 1, 'text': 0}
    """
    return {kind: len(getattr(one, kind) & getattr(two, kind)) for kind in KINDS}


def index_path(build: str) -> str:
    """Where a build's index is: ``BUILD/dedup_index.parquet`` (local or a URL)."""
    return f"{build.rstrip('/')}/{INDEX}"


def _check_builds(builds: tuple[str, ...]) -> str | None:
    for build in builds:
        fs, root = fsspec.core.url_to_fs(index_path(build))
        if not fs.exists(root):
            return f"--exclude-seen {build}: no {INDEX} there (a build made by corpora build)"
    return None


EXCLUDE_SEEN = Option(
    "exclude_seen",
    tuple,
    None,
    "builds whose kept images (URL, sha256) and texts this build leaves out (a blend "
    "that shares nothing): their dedup_index.parquet is read (repeatable).",
    check=_check_builds,
    repeatable=True,
)


def seen_builds(settings: "BuildSettings") -> tuple[str, ...]:
    return tuple(settings.stage_options.get(EXCLUDE_SEEN.name) or ())


@functools.lru_cache(maxsize=4)
def load_seen(builds: tuple[str, ...]) -> Seen:
    """What ``builds`` kept, read once per process from their indexes."""
    rows = []
    for build in builds:
        with fsspec.open(index_path(build), "rb") as stream:
            rows.extend(read_index(stream))
    return Seen.from_rows(rows)


def exclude_seen_stage(document: Document, settings: "BuildSettings") -> Document | Drop:
    """The stage's core: ``document`` less what the ``--exclude-seen`` builds kept
    (a pair corpus drops the record; a document loses the image)."""
    pairs = catalog.get(settings.corpus).drop_on_image_failure
    return exclude_seen(document, load_seen(seen_builds(settings)), pairs=pairs)


def seen_report(builds: Sequence[str]) -> dict:
    """The manifest's report of ``--exclude-seen``: each build's index and its sha256."""
    entries = []
    for build in builds:
        with fsspec.open(index_path(build), "rb") as stream:
            entries.append({"build": build, "sha256": hashlib.sha256(stream.read()).hexdigest()})
    seen = load_seen(tuple(builds))
    return {"builds": entries, "seen": {kind: len(getattr(seen, kind)) for kind in KINDS}}
