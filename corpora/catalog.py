"""The corpora `corpora build` knows, and how each is read and laid out.

A :class:`CorpusSpec` ties a corpus name to its source reader and its layout.
``read(stream, path, settings)`` yields the corpus's records (and drops with
reasons) from one input file; every record it yields is one unit of the
funnel. Stages after it keep, change or drop records one for one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, BinaryIO, Callable, Iterator, Mapping, Union

from corpora import filters, layouts
from corpora.inputs import iter_lines
from corpora.record import Document, Drop
from corpora.settings import BuildSettings
from corpora.sources import c4, coyo, mmc4, wit

Reader = Callable[[BinaryIO, str, BuildSettings], Iterator[Document | Drop]]
Stage = Callable[[Document, BuildSettings], Union[Document, Drop]]


@dataclasses.dataclass(frozen=True)
class CorpusSpec:
    name: str
    summary: str
    unit: str
    read: Reader
    # A record whose image cannot be fetched is dropped (pairs), rather than
    # losing just that image (interleaved documents).
    drop_on_image_failure: bool = True
    input_patterns: tuple[str, ...] = ()
    # Before any download: (record, settings) -> record or Drop (corpora.filters).
    metadata_filter: Stage | None = None
    # After fetching: (record, settings) -> record or Drop (corpora.layouts).
    layout: Stage | None = None
    # (stream, path, settings) -> None, raising InputError for a file that cannot
    # be this corpus (a parquet without a required column); the CLI runs it on
    # every input before building and exits 2 naming the file.
    check_input: Callable[[BinaryIO, str, BuildSettings], None] | None = None


def read_mmc4_pairs(
    stream: BinaryIO, path: str, settings: BuildSettings
) -> Iterator[Document | Drop]:
    for line_number, raw in iter_lines(stream, path):
        parsed = mmc4.parse_line(raw, path, line_number)
        if not isinstance(parsed, Drop) and settings.corpus_options.get("reassign"):
            parsed = mmc4.reassign(parsed)
        if isinstance(parsed, Drop):
            yield parsed
        else:
            yield from layouts.mmc4_pairs(parsed, settings.corpus)


def read_mmc4_documents(
    stream: BinaryIO, path: str, settings: BuildSettings
) -> Iterator[Document | Drop]:
    """One record per MMC4 document (``mmc4``, ``mmc4-reordered``)."""
    reassign = bool(settings.corpus_options.get("reassign"))
    for line_number, raw in iter_lines(stream, path):
        parsed = mmc4.parse_line(raw, path, line_number)
        yield (
            parsed
            if isinstance(parsed, Drop)
            else layouts.mmc4_document(parsed, settings.corpus, reassign)
        )


def read_coyo(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    return coyo.read(stream, path, settings.corpus, coyo_required_columns(settings))


def coyo_required_columns(settings: BuildSettings) -> tuple[str, ...]:
    """``id``, ``url``, ``text`` and the columns the chosen filters read."""
    options = settings.corpus_options
    columns = list(coyo.REQUIRED)
    if options.get("min_clip_sim") is not None or options.get("top_fraction") is not None:
        columns += ["clip_similarity_vitb32", "clip_similarity_vitl14"]
    if options.get("max_nsfw") is not None:
        columns += ["nsfw_score_opennsfw2", "nsfw_score_gantman"]
    if options.get("min_size") or options.get("max_aspect_ratio") is not None:
        columns += ["width", "height"]
    return tuple(columns)


def check_coyo(stream: BinaryIO, path: str, settings: BuildSettings) -> None:
    coyo.check(stream, path, coyo_required_columns(settings))


def read_c4(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    return c4.read(stream, path, settings.corpus)


def read_wit(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    options = settings.corpus_options
    return wit.read(
        stream,
        path,
        options.get("caption", "reference"),
        bool(options.get("with_context")),
        settings.corpus,
    )


@dataclasses.dataclass(frozen=True)
class _WithOptions:
    """A core function of (record, corpus options) as a stage of (record, settings)."""

    function: Callable[[Document, Mapping[str, Any]], Union[Document, Drop]]

    def __call__(self, doc: Document, settings: BuildSettings) -> Document | Drop:
        return self.function(doc, settings.corpus_options)


@dataclasses.dataclass(frozen=True)
class _KeepImageless:
    """A layout of (record, keep_imageless) as a stage of (record, settings)."""

    function: Callable[[Document, bool], Union[Document, Drop]]

    def __call__(self, doc: Document, settings: BuildSettings) -> Document | Drop:
        return self.function(doc, bool(settings.corpus_options.get("keep_imageless")))


def check_wit(stream: BinaryIO, path: str, settings: BuildSettings) -> None:
    wit.check(stream, path)


CORPORA: dict[str, CorpusSpec] = {
    spec.name: spec
    for spec in (
        CorpusSpec(
            name="mmc4-pairs",
            summary="MMC4 split into (image, matched sentence) pairs: VILA's pseudo-interleaved ablation",
            unit="pair",
            read=read_mmc4_pairs,
            input_patterns=("*.jsonl", "*.jsonl.gz", "*.jsonl.zip"),
        ),
        CorpusSpec(
            name="coyo",
            summary="COYO-700M image/alt-text pairs (parquet), filtered on CLIP similarity as in VILA's COYO-25M",
            unit="pair",
            read=read_coyo,
            input_patterns=("*.parquet",),
            metadata_filter=_WithOptions(filters.coyo_filter),
            check_input=check_coyo,
        ),
        CorpusSpec(
            name="mmc4",
            summary="MMC4 interleaved documents, each image before its matched sentence (VILA, OpenFlamingo)",
            unit="document",
            read=read_mmc4_documents,
            drop_on_image_failure=False,
            input_patterns=("*.jsonl", "*.jsonl.gz", "*.jsonl.zip"),
            metadata_filter=_WithOptions(filters.mmc4_filter),
            layout=_KeepImageless(layouts.mmc4_interleaved),
        ),
        CorpusSpec(
            name="mmc4-reordered",
            summary="MMC4 with all images first, then all sentences: VILA's reordering ablation",
            unit="document",
            read=read_mmc4_documents,
            drop_on_image_failure=False,
            input_patterns=("*.jsonl", "*.jsonl.gz", "*.jsonl.zip"),
            metadata_filter=_WithOptions(filters.mmc4_filter),
            layout=_KeepImageless(layouts.mmc4_reordered),
        ),
        CorpusSpec(
            name="c4",
            summary="C4 web text (json.gz), text only: the text corpus of SimVLM's pairs+C4 blend",
            unit="document",
            read=read_c4,
            input_patterns=("*.json.gz", "*.jsonl.gz", "*.json", "*.jsonl"),
        ),
        CorpusSpec(
            name="wit",
            summary="WIT Wikipedia image/caption pairs (tsv.gz), caption and languages chosen by flags",
            unit="pair",
            read=read_wit,
            input_patterns=("*.tsv.gz", "*.tsv"),
            metadata_filter=_WithOptions(filters.wit_filter),
            check_input=check_wit,
        ),
    )
}


def get(name: str) -> CorpusSpec:
    try:
        return CORPORA[name]
    except KeyError:
        raise KeyError(f"unknown corpus {name!r}; one of: {', '.join(sorted(CORPORA))}") from None
