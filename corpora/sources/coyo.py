"""COYO-700M (kakaobrain/coyo-dataset): snappy parquet, 17 columns.

Upstream files are named ``part-NNNNN-<uuid>-c000.snappy.parquet`` (on the
Hugging Face hub under ``hf://datasets/kakaobrain/coyo-700m/data/``). Files
are read one row group batch at a time, never whole: a part is about 5 GB.

One row is one ``[image, alt-text]`` record whose id is COYO's ``id``. The
precomputed columns (CLIP similarities, NSFW scores, size) are kept in the
record's meta so that the metadata filters (:func:`corpora.sources.filters.coyo_filter`)
decide before any download.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator, Mapping

import numpy as np

from corpora.config.spec import CLIP_PAIRS, CorpusSpec, Option, in_range, zero_is_off
from corpora.record import Document, Drop, ImageChunk, TextChunk
from corpora.sources import filters
from corpora.sources.inputs import MAX_LINE_BYTES, InputError, basename, seekable, type_name

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

FILE_PATTERN = "*.parquet"

# The upstream schema: column name -> Arrow type name.
SCHEMA = {
    "id": "int64",
    "url": "string",
    "text": "string",
    "width": "int32",
    "height": "int32",
    "image_phash": "string",
    "text_length": "int32",
    "word_count": "int32",
    "num_tokens_bert": "int32",
    "num_tokens_gpt": "int32",
    "num_faces": "int32",
    "clip_similarity_vitb32": "float",
    "clip_similarity_vitl14": "float",
    "nsfw_score_opennsfw2": "float",
    "nsfw_score_gantman": "float",
    "watermark_score": "float",
    "aesthetic_score_laion_v2": "float",
}
COLUMNS = tuple(SCHEMA)
REQUIRED = ("id", "url", "text")
SCORES = (
    "clip_similarity_vitb32",
    "clip_similarity_vitl14",
    "nsfw_score_opennsfw2",
    "nsfw_score_gantman",
    "watermark_score",
    "aesthetic_score_laion_v2",
)
BATCH_ROWS = 8192


def arrow_schema():
    """COYO-700M's Arrow schema (int64 id, int32 counts, float32 scores)."""
    import pyarrow as pa

    return pa.schema([(name, pa.type_for_alias(kind)) for name, kind in SCHEMA.items()])


def _open(stream: BinaryIO, path: str, read_dictionary: Iterable[str] = ()):
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(seekable(stream), read_dictionary=list(read_dictionary) or None)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
        raise InputError(f"{path}: not a parquet file ({str(exc).splitlines()[0]})") from None


def _compatible(arrow_type, upstream: str) -> bool:
    """Can a column of ``arrow_type`` stand for COYO's ``upstream`` type? Any
    integer width for an integer, any float width for a float, a string for a
    string; a column of nulls is missing values, not a wrong type."""
    import pyarrow as pa

    if pa.types.is_null(arrow_type):
        return True
    if upstream in ("int64", "int32"):
        return pa.types.is_integer(arrow_type)
    if upstream == "float":
        return pa.types.is_floating(arrow_type)
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def check_schema(schema, path: str, required: Iterable[str] = REQUIRED) -> None:
    """Raise :class:`InputError` naming the file and the first required column
    it lacks, or the first COYO column whose type is not COYO's."""
    names = set(schema.names)
    for column in COLUMNS:
        if schema.names.count(column) > 1:
            raise InputError(
                f"{path}: column {column!r} appears {schema.names.count(column)} times"
            )
    for column in required:
        if column not in names:
            raise InputError(
                f"{path}: missing column {column!r} (COYO-700M parquet has: {', '.join(COLUMNS)})"
            )
    for column in COLUMNS:
        if column in names and not _compatible(schema.field(column).type, SCHEMA[column]):
            raise InputError(
                f"{path}: column {column!r} is {schema.field(column).type}, "
                f"expected {SCHEMA[column]} (COYO-700M's type)"
            )


def check(stream: BinaryIO, path: str, required: Iterable[str] = REQUIRED) -> None:
    """Raise :class:`InputError` naming the file and the first required column
    it lacks, or a column of the wrong type (:func:`check_schema`)."""
    check_schema(_open(stream, path).schema_arrow, path, required)


def record_id(coyo_id: int) -> str:
    return f"coyo-{coyo_id}"


class _BadValue(ValueError):
    def __init__(self, detail: str, reason: str = "bad_value"):
        super().__init__(detail)
        self.reason = reason


def _value(value: Any, column: str) -> Any:
    """A cell of one of COYO's other columns as the meta keeps it: a string,
    an integer or a finite number of the column's type, or ``None``."""
    if value is None:
        return None
    kind = SCHEMA[column]
    if kind == "string":
        if isinstance(value, bytes):
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                raise _BadValue(f"{column} is not valid UTF-8", "not_utf8") from None
        if isinstance(value, str):
            return value
    elif kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                return value
            raise _BadValue(f"{column} is {type_name(float(value))}")
    elif isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _BadValue(f"{column} is {type_name(value)}, expected {kind}")


def parse_row(row: dict[str, Any], where: str, corpus: str = "coyo") -> Document | Drop:
    """One COYO row as an ``[image, alt-text]`` record, or why it cannot be used.

    ``url`` and ``text`` arrive as raw bytes so that one row that is not UTF-8
    is dropped (``not_utf8``) without failing its file. A value of the wrong
    type, or a score that is not finite, drops the row as ``bad_value``:
    nothing is coerced.

    >>> doc = parse_row({"id": 7, "url": b"https://a.example/1.jpg", "text": b"The Gate",
    ...                  "width": 600, "height": 347, "clip_similarity_vitb32": 0.25},
    ...                 "part-0.parquet:1")
    >>> doc.id, [c.kind for c in doc.chunks], doc.chunks[1].text, doc.meta["width"]
    ('coyo-7', ['image', 'text'], 'The Gate', 600)
    >>> parse_row({"id": 8, "url": b"https://a.example/2.jpg", "text": b"  "},
    ...           "part-0.parquet:2").reason
    'empty_text'
    >>> drop = parse_row({"id": 9, "url": b"https://a.example/3.jpg", "text": b"A",
    ...                   "watermark_score": float("nan")}, "part-0.parquet:3")
    >>> drop.reason, drop.detail
    ('bad_value', 'watermark_score is NaN')
    """
    coyo_id = row.get("id")
    if coyo_id is None:
        return Drop("missing_id", where)
    if isinstance(coyo_id, bool) or not isinstance(coyo_id, int):
        return Drop("bad_value", where, detail=f"id is {type_name(coyo_id)}, expected int64")
    rid = record_id(coyo_id)
    decoded = {}
    for column in ("url", "text"):
        raw = row.get(column)
        if raw is None:
            return Drop(f"missing_{column}", rid)
        if not isinstance(raw, (bytes, str)):
            return Drop("bad_value", rid, detail=f"{column} is {type_name(raw)}, expected string")
        try:
            decoded[column] = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            decoded[column].encode("utf-8")  # a str may hold lone surrogates
        except UnicodeError:
            return Drop("not_utf8", rid, detail=f"{column} is not valid UTF-8")
    url, text = decoded["url"].strip(), decoded["text"].strip()
    if not url:
        return Drop("missing_url", rid)
    if not text:
        return Drop("empty_text", rid, url=url)
    meta: dict[str, Any] = {"coyo_id": coyo_id, "source": where}
    try:
        for column in COLUMNS[3:]:
            if column in row:
                meta[column] = _value(row[column], column)
    except _BadValue as exc:
        return Drop(exc.reason, rid, detail=str(exc), url=url)
    scores = {c: float(meta[c]) for c in SCORES if meta.get(c) is not None}
    return Document(
        id=rid,
        corpus=corpus,
        chunks=(ImageChunk(url=url, scores=scores), TextChunk(text)),
        source_url=url,
        meta=meta,
    )


# The text a batch of rows turns into Python strings at once: a batch of
# long texts is taken a slice at a time, so memory follows this, not the rows.
SLICE_BYTES = 64 << 20


def _string_lengths(array):
    """The byte length of each value of a string or dictionary-of-strings
    column, from its offsets: no value is copied."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(array.type):
        return pc.take(pc.binary_length(array.dictionary), array.indices)
    return pc.binary_length(array)


def _values(array) -> list:
    """A column slice as Python values, strings as ``bytes`` (parse_row
    decodes them and drops what is not UTF-8)."""
    import pyarrow as pa

    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        array = array.view(pa.binary() if pa.types.is_string(array.type) else pa.large_binary())
    return array.to_pylist()


def read(
    stream: BinaryIO,
    path: str,
    corpus: str = "coyo",
    required: Iterable[str] = REQUIRED,
    batch_rows: int = BATCH_ROWS,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Document | Drop]:
    """The records of one COYO parquet file, one row-group batch at a time.

    String columns are read as they are stored (a dictionary stays one), and
    each value's length is checked from the offsets before it becomes a
    Python string: a row holding a value over ``max_line_bytes`` is dropped
    as ``line_too_long``, and a batch's text is turned into strings at most
    :data:`SLICE_BYTES` at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    source = seekable(stream)  # read twice: the schema, then the rows
    parquet = _open(source, path)
    names = parquet.schema_arrow.names
    check_schema(parquet.schema_arrow, path, required)
    columns = [c for c in COLUMNS if c in names]
    texts = [c for c in columns if SCHEMA[c] == "string"]
    dictionary = _open(source, path, read_dictionary=texts)
    name = basename(path)
    row_number = 0
    try:
        for batch in dictionary.iter_batches(batch_size=batch_rows, columns=columns):
            lengths = [
                _string_lengths(batch.column(c)).fill_null(0).to_numpy(zero_copy_only=False)
                for c in texts
                if not pa.types.is_null(batch.column(c).type)
            ]
            longest = np.max(lengths, axis=0) if lengths else np.zeros(batch.num_rows, np.int64)
            total = np.sum(lengths, axis=0) if lengths else np.zeros(batch.num_rows, np.int64)
            start = 0
            while start < batch.num_rows:
                # as many rows as fit in SLICE_BYTES of text, one at least
                fits = np.searchsorted(np.cumsum(total[start:]), SLICE_BYTES, side="right")
                end = start + max(1, int(fits))
                part = batch.slice(start, end - start)
                over = pc.greater(pa.array(longest[start:end]), max_line_bytes)
                arrays = {
                    c: _values(
                        pc.if_else(over, pa.scalar(None, part.column(c).type), part.column(c))
                        if c in texts and pc.any(over).as_py()
                        else part.column(c)
                    )
                    for c in columns
                }
                for index in range(end - start):
                    row_number += 1
                    where = f"{name}:{row_number}"
                    if longest[start + index] > max_line_bytes:
                        yield Drop(
                            "line_too_long",
                            where,
                            detail=f"a value of {int(longest[start + index])} bytes, "
                            f"over the {max_line_bytes} cap",
                        )
                        continue
                    yield parse_row({c: arrays[c][index] for c in columns}, where, corpus)
                start = end
    except (OSError, pa.ArrowException) as exc:
        raise InputError(f"{path}: {str(exc).splitlines()[0]}") from exc


# --- the corpus ----------------------------------------------------------------


def required_columns(options: Mapping[str, Any]) -> tuple[str, ...]:
    """``id``, ``url``, ``text`` and the columns the chosen filters read."""
    columns = list(REQUIRED)
    if options.get("min_clip_sim") is not None or options.get("top_fraction") is not None:
        columns += ["clip_similarity_vitb32", "clip_similarity_vitl14"]
    if options.get("max_nsfw") is not None:
        columns += ["nsfw_score_opennsfw2", "nsfw_score_gantman"]
    if options.get("min_size") or options.get("max_aspect_ratio") is not None:
        columns += ["width", "height"]
    return tuple(columns)


def read_records(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    return read(
        stream,
        path,
        settings.corpus,
        required_columns(settings.corpus_options),
        max_line_bytes=settings.max_line_bytes,
    )


def check_input(stream: BinaryIO, path: str, settings: BuildSettings) -> None:
    check(stream, path, required_columns(settings.corpus_options))


def metadata_filter(doc: Document, settings: BuildSettings) -> Document | Drop:
    return filters.coyo_filter(doc, settings.corpus_options)


SPECS = (
    CorpusSpec(
        name="coyo",
        summary="COYO-700M image/alt-text pairs (parquet), filtered on CLIP similarity as in "
        "VILA's COYO-25M",
        unit="pair",
        read=read_records,
        input_patterns=(FILE_PATTERN,),
        options=(
            Option(
                "min_clip_sim",
                float,
                0.6,  # VILA's COYO-25M
                "keep rows with clip_similarity_vitb32 + clip_similarity_vitl14 at least this "
                "(VILA's COYO-25M; 0 turns it off).",
                check=in_range("--min-clip-sim", 0, 2, "is a sum of two cosine similarities, 0..2"),
                store=zero_is_off,
            ),
            Option(
                "max_nsfw",
                float,
                None,
                "drop rows where either NSFW score is above this.",
                check=in_range("--max-nsfw", 0, 1, "is a probability, 0..1"),
            ),
            Option(
                "min_size",
                int,
                0,
                "drop rows whose upstream width or height is below this.",
                check=in_range("--min-size", 0, None, "must be at least 0"),
            ),
            Option(
                "max_aspect_ratio",
                float,
                None,
                "drop rows whose upstream width/height (longer over shorter side) is above "
                "this, before any download.",
                check=in_range("--max-aspect-ratio", 1, None, "must be at least 1"),
            ),
            Option(
                "top_fraction",
                float,
                None,
                "keep this fraction of rows with the highest clip_similarity_vitb32 + vitl14 "
                "over the whole corpus (ties broken by id), before any download. VILA's "
                "COYO-25M: 0.2 per file.",
                check=in_range("--top-fraction", 0, 1, "must be in (0, 1]", low_open=True),
            ),
        ),
        metadata_filter=metadata_filter,
        check_input=check_input,
        clip=CLIP_PAIRS,
        rank=filters.coyo_clip_sum,
    ),
)
