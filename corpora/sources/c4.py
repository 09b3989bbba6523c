"""C4 (allenai/c4): ``c4-{split}.{i:05d}-of-{n:05d}.json.gz`` JSON lines.

Upstream schema, per line::

    {"text": "...", "timestamp": "2019-04-25T12:57:54Z", "url": "https://..."}

One line is one text-only record; its id derives from the url.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, BinaryIO, Iterator

from corpora.config.bundled_sample import c4_sample
from corpora.config.spec import CorpusSpec
from corpora.record import Document, Drop, TextChunk, stable_id
from corpora.sources.inputs import (
    MAX_LINE_BYTES,
    LongLine,
    basename,
    iter_lines,
    json_object,
    type_name,
)

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

FILE_PATTERN = "c4-*.json.gz"


def document_id(url: str) -> str:
    return "c4-" + stable_id(url)


def parse_line(raw: bytes | LongLine, path: str, line: int, corpus: str = "c4") -> Document | Drop:
    """One C4 JSON line as a text-only record, or why it cannot be used. A
    field of the wrong type is ``bad_value``: nothing is coerced.

    >>> doc = parse_line(b'{"text": "Hi there.", "timestamp": "2019-04-25T12:57:54Z",'
    ...     b' "url": "https://a.example/"}', "c4-train.00000-of-01024.json.gz", 1)
    >>> [c.text for c in doc.chunks], doc.meta["timestamp"]
    (['Hi there.'], '2019-04-25T12:57:54Z')
    >>> parse_line(b'{"text": "", "url": "https://b.example/"}', "c4.json.gz", 2).reason
    'empty_text'
    >>> parse_line(b'{"text": 5, "url": "https://b.example/"}', "c4.json.gz", 3).detail
    'text is an integer'
    """
    where = f"{basename(path)}:{line}"
    obj = json_object(raw, where)
    if isinstance(obj, Drop):
        return obj
    for name in ("url", "text", "timestamp"):
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            return Drop("bad_value", where, detail=f"{name} is {type_name(value)}")
    url = obj.get("url")
    if url is None or not url.strip():
        return Drop("missing_url", where)
    body = obj.get("text")
    if body is None:
        return Drop("missing_text", where, url=url)
    if not body.strip():
        return Drop("empty_text", where, url=url)
    timestamp = obj.get("timestamp")
    return Document(
        id=document_id(url),
        corpus=corpus,
        chunks=(TextChunk(body),),
        source_url=url,
        meta={
            "timestamp": timestamp,
            "source_file": basename(path),
            "line": line,
        },
    )


def read(
    stream: BinaryIO, path: str, corpus: str = "c4", max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[Document | Drop]:
    for line, raw in iter_lines(stream, path, max_line_bytes):
        yield parse_line(raw, path, line, corpus)


# --- the corpus ----------------------------------------------------------------


def read_records(stream: BinaryIO, path: str, settings: BuildSettings) -> Iterator[Document | Drop]:
    return read(stream, path, settings.corpus, settings.max_line_bytes)


def parse_record(
    raw: bytes | LongLine, path: str, line: int, settings: BuildSettings
) -> Document | Drop:
    return parse_line(raw, path, line, settings.corpus)


def bundled_sample(directory: str) -> str:
    """The C4 sample bundled with the package: 300 documents written for it."""
    return c4_sample(directory)


SPECS = (
    CorpusSpec(
        name="c4",
        summary="C4 web text (json.gz), text only: the text corpus of SimVLM's pairs+C4 blend",
        unit="document",
        read=read_records,
        parse_line=parse_record,
        input_patterns=("*.json.gz", "*.jsonl.gz", "*.json", "*.jsonl"),
        images=False,
        sample=bundled_sample,
    ),
)
