"""WIT (google-research-datasets/wit): ``wit_v1.*.tsv.gz``.

Tab-separated, 17 columns, a header line. Fields are quoted when they hold a
tab, a quote or a newline, and ``context_*`` fields can be very long, so the
csv module's field size limit is raised. Booleans are the strings ``true`` and
``false``: a bare ``bool(str)`` would make both true, so they are parsed
strictly and a row with any other value is dropped (``bad_boolean``).

One row is one ``[image, caption]`` record (``--with-context`` puts the page
title and the section's context before the caption); its id derives from
``image_url`` and ``page_url``. The caption is chosen here, before any
download, so that a row with no usable caption never costs a fetch.
"""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, BinaryIO, Iterator, Mapping, Sequence

from corpora.config.spec import CLIP_PAIRS, CorpusSpec, Option
from corpora.record import Document, Drop, ImageChunk, TextChunk, stable_id
from corpora.sources import filters
from corpora.sources.inputs import MAX_LINE_BYTES, READ_ERRORS, InputError, basename, decompressed
from corpora.sources.wit.languages import LanguageError, parse_languages

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

FILE_PATTERN = "wit_v1.*.tsv.gz"

COLUMNS = (
    "language",
    "page_url",
    "image_url",
    "page_title",
    "section_title",
    "hierarchical_section_title",
    "caption_reference_description",
    "caption_attribution_description",
    "caption_alt_text_description",
    "mime_type",
    "original_height",
    "original_width",
    "is_main_image",
    "attribution_passes_lang_id",
    "page_changed_recently",
    "context_page_description",
    "context_section_description",
)
BOOLEAN_COLUMNS = ("is_main_image", "attribution_passes_lang_id", "page_changed_recently")
INTEGER_COLUMNS = ("original_height", "original_width")

CAPTIONS = {
    "reference": ("caption_reference_description",),
    "attribution": ("caption_attribution_description",),
    "alt": ("caption_alt_text_description",),
    # the first non-empty of the three, in this order
    "best": (
        "caption_reference_description",
        "caption_alt_text_description",
        "caption_attribution_description",
    ),
}
_FIELD_SIZE_LIMIT = 2**31 - 1


class BadValue(ValueError):
    pass


def parse_bool(value: str) -> bool:
    """WIT's booleans: exactly ``true`` or ``false``.

    >>> parse_bool("true"), parse_bool("false")
    (True, False)
    >>> for text in ("False", "1", ""):
    ...     try:
    ...         parse_bool(text)
    ...     except BadValue as exc:
    ...         print(exc)
    not a WIT boolean (true/false): 'False'
    not a WIT boolean (true/false): '1'
    not a WIT boolean (true/false): ''
    """
    if value == "true":
        return True
    if value == "false":
        return False
    raise BadValue(f"not a WIT boolean (true/false): {value!r}")


def choose_caption(row: Mapping[str, str], caption: str) -> tuple[str, str] | None:
    """``(column, text)`` of the caption ``caption`` picks, or ``None`` when
    that caption is empty.

    >>> row = {"caption_reference_description": "", "caption_alt_text_description": "A bat",
    ...        "caption_attribution_description": "English: Lesser bulldog bat"}
    >>> choose_caption(row, "best")
    ('caption_alt_text_description', 'A bat')
    >>> choose_caption(row, "reference") is None
    True
    """
    try:
        columns = CAPTIONS[caption]
    except KeyError:
        raise ValueError(f"unknown caption {caption!r}; one of {', '.join(CAPTIONS)}") from None
    for column in columns:
        text = (row.get(column) or "").strip()
        if text:
            return column, text
    return None


def record_id(image_url: str, page_url: str) -> str:
    return "wit-" + stable_id(image_url, page_url)


def _has_surrogates(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_row(
    values: Sequence[str],
    where: str,
    caption: str = "reference",
    with_context: bool = False,
    corpus: str = "wit",
) -> Document | Drop:
    """One WIT row (the 17 fields, in header order) as an ``[image, caption]``
    record, or why it cannot be used. Fields hold lone surrogates where the
    file had bytes that are not UTF-8 (see :func:`read`)."""
    if len(values) != len(COLUMNS):
        return Drop(
            "wrong_column_count", where, detail=f"{len(values)} fields, expected {len(COLUMNS)}"
        )
    if any(_has_surrogates(v) for v in values):
        return Drop("not_utf8", where, detail="row holds bytes that are not UTF-8")
    row = dict(zip(COLUMNS, values))
    image_url = row["image_url"].strip()
    if not image_url:
        return Drop("missing_url", where)
    try:
        booleans = {column: parse_bool(row[column]) for column in BOOLEAN_COLUMNS}
    except BadValue as exc:
        return Drop("bad_boolean", where, detail=str(exc), url=image_url)
    integers = {}
    for column in INTEGER_COLUMNS:
        text = row[column].strip()
        if text and not text.isdigit():
            return Drop("bad_integer", where, detail=f"{column}={text!r}", url=image_url)
        integers[column] = int(text) if text else None
    chosen = choose_caption(row, caption)
    if chosen is None:
        return Drop("empty_caption", where, detail=f"no {caption} caption", url=image_url)
    column, text = chosen
    texts = []
    if with_context:
        texts = [
            row[c].strip() for c in ("page_title", "context_section_description") if row[c].strip()
        ]
    texts.append(text)
    page_url = row["page_url"].strip()
    return Document(
        id=record_id(image_url, page_url),
        corpus=corpus,
        chunks=(
            ImageChunk(url=image_url, meta={"mime_type": row["mime_type"] or None}),
            *(TextChunk(t) for t in texts),
        ),
        source_url=page_url or None,
        meta={
            "language": row["language"],
            "page_title": row["page_title"],
            "section_title": row["section_title"] or None,
            "caption_column": column,
            **integers,
            **booleans,
            "source": where,
        },
    )


def column_order(header: list[str] | None, path: str) -> list[int] | None:
    """Where each of WIT's columns sits in ``header`` (``None``: in order);
    raises :class:`InputError` naming the file when the header is not WIT's."""
    if header is None:
        raise InputError(f"{path}: empty file, expected a WIT header")
    if header == list(COLUMNS):
        return None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: not a WIT file: missing column {missing[0]!r}")
    if len(header) != len(COLUMNS):
        raise InputError(
            f"{path}: not a WIT file: {len(header)} columns in the header, expected 17"
        )
    return [header.index(c) for c in COLUMNS]


def check(stream: BinaryIO, path: str, max_line_bytes: int = MAX_LINE_BYTES) -> None:
    """Raise :class:`InputError` naming the file unless it starts with WIT's header."""
    _prepare_csv(max_line_bytes)
    try:
        text = io.TextIOWrapper(
            decompressed(stream, path), encoding="utf-8-sig", errors="replace", newline=""
        )
        lines = _capped_lines(text, max_line_bytes, [0], [0, 0])
        column_order(next(csv.reader(lines, delimiter="\t"), None), path)
    except _LongLine as long:
        raise InputError(f"{path}: not a WIT file: a first line of {long.length} characters")
    except (*READ_ERRORS, csv.Error) as exc:
        raise InputError(f"{path}: {' '.join(str(exc).split())}") from None


class _LongLine(Exception):
    """A physical line over the cap, read past (never held whole)."""

    def __init__(self, length: int):
        super().__init__(length)
        self.length = length


def _capped_lines(
    text: io.TextIOBase, limit: int, count: list[int], row: list[int]
) -> Iterator[str]:
    """The physical lines of ``text`` for the csv reader, counted in
    ``count[0]``. A line longer than ``limit`` characters, or one that takes
    the row being read (``row``: its characters and quote characters so far,
    reset by the caller at each row) past ``limit``, is read past in pieces,
    with the rest of a quoted field it is in, and raises :class:`_LongLine`,
    which ends this iterator."""
    while True:
        line = text.readline(limit + 2)  # +2: the longest line allowed and its \r\n
        if not line:
            return
        count[0] += 1
        row[0] += len(line)
        row[1] += line.count('"')
        if len(line) == limit + 2 and line[-1] not in "\r\n" or row[0] > limit:
            length = row[0]
            while line and line[-1] not in "\r\n":  # the rest of this line
                line = text.readline(1 << 20)
                length += len(line)
                row[1] += line.count('"')
            while row[1] % 2:  # a quote left open: its field goes on to the quote that closes it
                line = text.readline(1 << 20)
                if not line:
                    break
                count[0] += line.endswith("\n")
                length += len(line)
                row[1] += line.count('"')
            raise _LongLine(length)
        yield line


def _prepare_csv(max_line_bytes: int) -> None:
    """A field is capped like a line: a quote left open would otherwise
    gather every line after it into one field, however many."""
    csv.field_size_limit(min(max_line_bytes, _FIELD_SIZE_LIMIT))


def read(
    stream: BinaryIO,
    path: str,
    caption: str = "reference",
    with_context: bool = False,
    corpus: str = "wit",
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Document | Drop]:
    """The records of one WIT file.

    Bytes that are not UTF-8 are kept as lone surrogates while the row is
    split, so that only the row holding them is dropped (``not_utf8``). A
    byte-order mark before the header is removed. A physical line longer
    than ``max_line_bytes`` (counted in characters) is dropped as
    ``line_too_long`` without being held whole, and reading starts afresh on
    the next line (the rest of a quoted field it cut reads as rows of its own,
    each dropped with its reason).
    """
    _prepare_csv(max_line_bytes)
    name = basename(path)
    try:
        text = io.TextIOWrapper(
            decompressed(stream, path), encoding="utf-8-sig", errors="surrogateescape", newline=""
        )
        count = [0]  # physical lines read, the header's included
        row = [0, 0]  # characters and quote characters of the row being read
        reader = csv.reader(_capped_lines(text, max_line_bytes, count, row), delimiter="\t")
        try:
            order = column_order(next(reader, None), path)
        except _LongLine as long:
            raise InputError(f"{path}: not a WIT file: a first line of {long.length} characters")
        while True:
            line = count[0] + 1
            row[:] = [0, 0]
            try:
                values = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                yield Drop("bad_row", f"{name}:{line}", detail=str(exc))
                continue
            except _LongLine as long:
                yield Drop(
                    "line_too_long",
                    f"{name}:{line}",
                    detail=f"{long.length} characters, over the {max_line_bytes} cap",
                )
                reader = csv.reader(_capped_lines(text, max_line_bytes, count, row), delimiter="\t")
                continue
            if not any(v.strip() for v in values):
                continue
            if order is not None and len(values) == len(COLUMNS):
                values = [values[i] for i in order]
            yield parse_row(values, f"{name}:{line}", caption, with_context, corpus)
    except READ_ERRORS as exc:
        raise InputError(f"{path}: {' '.join(str(exc).split())}") from None


# --- the corpus ----------------------------------------------------------------


def read_records(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    options = settings.corpus_options
    return read(
        stream,
        path,
        options.get("caption", "reference"),
        bool(options.get("with_context")),
        settings.corpus,
        settings.max_line_bytes,
    )


def check_input(stream: BinaryIO, path: str, settings: BuildSettings) -> None:
    check(stream, path, settings.max_line_bytes)


def metadata_filter(doc: Document, settings: BuildSettings) -> Document | Drop:
    return filters.wit_filter(doc, settings.corpus_options)


def _known_languages(codes: tuple[str, ...]) -> str | None:
    """``--languages``: WIT's own codes, in any case (:mod:`corpora.sources.wit.languages`)."""
    if not any(code.strip() for code in codes):
        return "--languages names no language"
    try:
        parse_languages(",".join(codes))
    except LanguageError as exc:
        return f"--languages: {exc}"
    return None


def _language_list(codes: tuple[str, ...]) -> list[str]:
    return list(parse_languages(",".join(codes)))


SPECS = (
    CorpusSpec(
        name="wit",
        summary="WIT Wikipedia image/caption pairs (tsv.gz), caption and languages chosen by flags",
        unit="pair",
        read=read_records,
        input_patterns=("*.tsv.gz", "*.tsv"),
        options=(
            Option(
                "caption",
                str,
                "reference",  # the caption shown under the image on its page: WIT's main caption
                "which caption (best = first non-empty of reference, alt, attribution).",
                choices=tuple(CAPTIONS),
            ),
            Option(
                "languages",
                tuple,
                None,
                "comma-separated WIT language codes to keep, in any case, e.g. en,de "
                "(WIT writes iw for Hebrew).",
                check=_known_languages,
                store=_language_list,
            ),
            Option(
                "with_context",
                bool,
                False,
                "put page_title and context_section_description before the caption.",
            ),
        ),
        metadata_filter=metadata_filter,
        check_input=check_input,
        clip=CLIP_PAIRS,
    ),
)
