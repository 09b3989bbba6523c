"""The corpora `corpora build` knows, and how each is read and laid out.

A :class:`CorpusSpec` ties a corpus name to its source reader and its layout.
``read(stream, path, settings)`` yields the corpus's records (and drops with
reasons) from one input file; every record it yields is one unit of the
funnel. Stages after it keep, change or drop records one for one.
"""

from __future__ import annotations

import dataclasses
from typing import BinaryIO, Callable, Iterator

from corpora import layouts
from corpora.io import iter_lines
from corpora.record import Document, Drop
from corpora.settings import BuildSettings
from corpora.sources import mmc4

Reader = Callable[[BinaryIO, str, BuildSettings], Iterator[Document | Drop]]


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


def read_mmc4_pairs(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    for line_number, raw in iter_lines(stream, path):
        parsed = mmc4.parse_line(raw, path, line_number)
        if isinstance(parsed, Drop):
            yield parsed
        else:
            yield from layouts.mmc4_pairs(parsed, settings.corpus)


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
    )
}


def get(name: str) -> CorpusSpec:
    try:
        return CORPORA[name]
    except KeyError:
        raise KeyError(f"unknown corpus {name!r}; one of: {', '.join(sorted(CORPORA))}") from None
