"""MMC4 documents (allenai/mmc4 JSON lines, often one ``.jsonl`` per ``.zip``):
the three corpora read from them, mmc4, mmc4-reordered and mmc4-pairs.

A line is parsed into an :class:`~corpora.sources.mmc4.document.Mmc4Document`
(:mod:`corpora.sources.mmc4.document`); a layout (see
:mod:`corpora.sources.mmc4.layouts`) turns that into the records a corpus is built from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Iterator

from corpora.config.bundled_sample import materialize_sample
from corpora.config.spec import (
    CLIP_DOCUMENTS,
    CLIP_PAIRS,
    CorpusSpec,
    Option,
    in_range,
    zero_is_off,
)
from corpora.record import Document, Drop
from corpora.sources import filters
from corpora.sources.inputs import InputError, iter_lines, json_object
from corpora.sources.mmc4 import layouts
from corpora.sources.mmc4.document import Mmc4Document, Mmc4Image, parse_line, reassign

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

__all__ = ["SPECS", "Mmc4Document", "Mmc4Image", "parse_line", "reassign"]


# --- the corpora: mmc4, mmc4-reordered and mmc4-pairs ----------------------------


def read_pairs(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    """One record per image of each MMC4 document (``mmc4-pairs``)."""
    for line_number, raw in iter_lines(stream, path, settings.max_line_bytes):
        parsed = parse_line(raw, path, line_number)
        if not isinstance(parsed, Drop) and settings.corpus_options.get("reassign"):
            parsed = reassign(parsed)
        if isinstance(parsed, Drop):
            yield parsed
        else:
            yield from layouts.mmc4_pairs(parsed, settings.corpus)


def read_documents(
    stream: BinaryIO, path: str, settings: BuildSettings
) -> Iterator[Document | Drop]:
    """One record per MMC4 document (``mmc4``, ``mmc4-reordered``)."""
    reassigned = bool(settings.corpus_options.get("reassign"))
    for line_number, raw in iter_lines(stream, path, settings.max_line_bytes):
        parsed = parse_line(raw, path, line_number)
        yield (
            parsed
            if isinstance(parsed, Drop)
            else layouts.mmc4_document(parsed, settings.corpus, reassigned)
        )


# Documents looked at before a build, as WIT's header and COYO's schema are.
SNIFF_DOCUMENTS = 10
# The other JSON-lines corpus's fields, to name it when a file of it is given as MMC4.
C4_FIELDS = frozenset({"text", "url"})


def check(stream: BinaryIO, path: str, max_line_bytes: int) -> None:
    """Raise :class:`InputError` naming the file when none of its first JSON
    documents has MMC4's ``text_list`` or ``image_info`` (and name the corpus
    it looks like); a file whose first lines are not JSON objects, or empty
    ones (``{}``), is left to the reader, which counts them.

    >>> import io
    >>> check(io.BytesIO(b'{"url": "u", "text_list": ["a"], "image_info": []}'), "d.jsonl", 99)
    >>> check(io.BytesIO(b'{"text": "a", "url": "u", "timestamp": "t"}'), "c4.json", 99)
    Traceback (most recent call last):
    ...
    corpora.sources.inputs.InputError: c4.json: this file looks like C4, not MMC4: its documents have text, timestamp, url, but no text_list or image_info (build it with `corpora build c4`)
    """  # noqa: E501
    keys: set[str] = set()
    seen = 0
    for _, raw in iter_lines(stream, path, max_line_bytes):
        obj = json_object(raw, path)
        if isinstance(obj, Drop) or not obj:  # not JSON, or {}: the reader counts them
            continue
        if "text_list" in obj or "image_info" in obj:
            return
        keys |= set(obj)
        seen += 1
        if seen == SNIFF_DOCUMENTS:
            break
    if not seen:
        return
    found = ", ".join(sorted(keys)[:8])
    if C4_FIELDS <= keys:
        raise InputError(
            f"{path}: this file looks like C4, not MMC4: its documents have {found}, "
            "but no text_list or image_info (build it with `corpora build c4`)"
        )
    raise InputError(
        f"{path}: not an MMC4 file: its first documents have {found}, but no text_list "
        "or image_info"
    )


def check_input(stream: BinaryIO, path: str, settings: BuildSettings) -> None:
    check(stream, path, settings.max_line_bytes)


def metadata_filter(doc: Document, settings: BuildSettings) -> Document | Drop:
    return filters.mmc4_filter(doc, settings.corpus_options)


def interleaved(doc: Document, settings: BuildSettings) -> Document | Drop:
    return layouts.mmc4_interleaved(doc, bool(settings.corpus_options.get("keep_imageless")))


def reordered(doc: Document, settings: BuildSettings) -> Document | Drop:
    return layouts.mmc4_reordered(doc, bool(settings.corpus_options.get("keep_imageless")))


def bundled_sample(directory: str) -> str:
    """The sample MMC4 documents bundled with the package (their images too)."""
    return materialize_sample(directory)


INPUT_PATTERNS = ("*.jsonl", "*.jsonl.gz", "*.jsonl.zip")
REASSIGN = Option(
    "reassign",
    bool,
    False,
    "recompute matched_text_index/matched_sim from similarity_matrix (linear assignment).",
)
DOCUMENT_OPTIONS = (
    REASSIGN,
    Option(
        "min_sim",
        float,
        None,
        "remove images whose matched_sim is below this (OpenFlamingo: 0.24).",
        check=in_range("--min-sim", -1, 1, "is a cosine similarity, -1..1"),
    ),
    Option(
        "max_images",
        int,
        6,  # VILA's
        "at most this many images per document (0: no limit; VILA uses 6).",
        check=in_range("--max-images", 0, None, "must be at least 0 (0: no limit)"),
        store=zero_is_off,
    ),
    Option(
        "preset",
        str,
        None,
        "core = mmc4-core (4-40 sentences, 2-15 images, 75% of sims > 0.25).",
        choices=tuple(filters.PRESETS),
    ),
    Option(
        "keep_imageless",
        bool,
        False,
        "keep documents left with no image (as text) instead of dropping them.",
    ),
)

SPECS = (
    CorpusSpec(
        name="mmc4-pairs",
        summary="MMC4 split into (image, matched sentence) pairs: VILA's pseudo-interleaved "
        "ablation",
        unit="pair",
        read=read_pairs,
        input_patterns=INPUT_PATTERNS,
        options=(REASSIGN,),
        clip=CLIP_PAIRS,
        sample=bundled_sample,
        check_input=check_input,
    ),
    CorpusSpec(
        name="mmc4",
        summary="MMC4 interleaved documents, each image before its matched sentence (VILA, "
        "OpenFlamingo)",
        unit="document",
        read=read_documents,
        input_patterns=INPUT_PATTERNS,
        options=DOCUMENT_OPTIONS,
        metadata_filter=metadata_filter,
        layout=interleaved,
        drop_on_image_failure=False,
        clip=CLIP_DOCUMENTS,
        sample=bundled_sample,
        check_input=check_input,
    ),
    CorpusSpec(
        name="mmc4-reordered",
        summary="MMC4 with all images first, then all sentences: VILA's reordering ablation",
        unit="document",
        read=read_documents,
        input_patterns=INPUT_PATTERNS,
        options=DOCUMENT_OPTIONS,
        metadata_filter=metadata_filter,
        layout=reordered,
        drop_on_image_failure=False,
        clip=CLIP_DOCUMENTS,
        sample=bundled_sample,
        check_input=check_input,
    ),
)
