"""MMC4 documents (allenai/mmc4 JSON lines, often one ``.jsonl`` per ``.zip``).

Upstream schema, per line::

    {"url": ..., "text_list": [sentence, ...],
     "image_info": [{"raw_url", "image_name", "matched_text_index",
                     "matched_sim", "face_detections"}, ...],
     "similarity_matrix": [[...], ...],   # images x sentences
     "could_have_url_duplicate": 0|1}

A line is parsed into an :class:`Mmc4Document`; a layout (see
:mod:`corpora.layouts`) turns that into the records a corpus is built from.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator

from corpora import filters, layouts
from corpora.inputs import (
    InputError,
    LongLine,
    basename,
    iter_lines,
    json_object,
    non_finite,
    type_name,
)
from corpora.record import Document, Drop, stable_id
from corpora.spec import CLIP_DOCUMENTS, CLIP_PAIRS, CorpusSpec, Option, in_range, zero_is_off

if TYPE_CHECKING:
    from corpora.settings import BuildSettings


@dataclasses.dataclass(frozen=True)
class Mmc4Image:
    raw_url: str
    matched_text_index: int | None
    matched_sim: float | None
    image_name: str | None = None
    face_detections: Any = None


@dataclasses.dataclass(frozen=True)
class Mmc4Document:
    id: str
    url: str
    text_list: tuple[str, ...]
    images: tuple[Mmc4Image, ...]
    similarity_matrix: tuple[tuple[float, ...], ...] | None = None
    could_have_url_duplicate: int | None = None
    source_file: str = ""
    line: int = 0


def document_id(path: str, line: int, url: str) -> str:
    """MMC4's id: the document url and where the line sits (file name, line)."""
    return "mmc4-" + stable_id(basename(path), line, url)


class _BadValue(ValueError):
    """A field holds a value of the wrong type, or a number that is not finite."""


def _integer(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)  # 3.0 is written by some JSON tools for 3
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadValue(f"{name} is {type_name(value)}")
    return value


def _number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadValue(f"{name} is {type_name(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise _BadValue(f"{name} is {type_name(number)}")
    return number


def _string(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _BadValue(f"{name} is {type_name(value)}")
    return value


def _as_matrix(value: Any) -> tuple[tuple[float, ...], ...] | None:
    """A list of equal-length lists of finite numbers, else ``None`` (never
    raises): only ``--reassign`` reads the matrix, and it drops a document
    without a usable one as ``bad_similarity_matrix``."""
    if not isinstance(value, list) or not all(isinstance(row, list) for row in value):
        return None
    rows = []
    for row in value:
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in row):
            return None
        numbers = tuple(float(v) for v in row)
        if not all(math.isfinite(v) for v in numbers):
            return None
        rows.append(numbers)
    if len({len(row) for row in rows}) > 1:
        return None
    return tuple(rows)


def _image(info: Any, index: int) -> Mmc4Image:
    name = f"image_info[{index}]"
    if not isinstance(info, dict):
        raise _BadValue(f"{name} is {type_name(info)}")
    faces = info.get("face_detections")
    if non_finite(faces):
        raise _BadValue(f"{name}.face_detections holds a number that is not finite")
    return Mmc4Image(
        raw_url=_string(info.get("raw_url"), f"{name}.raw_url") or "",
        matched_text_index=_integer(info.get("matched_text_index"), f"{name}.matched_text_index"),
        matched_sim=_number(info.get("matched_sim"), f"{name}.matched_sim"),
        image_name=_string(info.get("image_name"), f"{name}.image_name"),
        face_detections=faces,
    )


def parse_line(raw: bytes | LongLine, path: str, line: int) -> Mmc4Document | Drop:
    """Parse one MMC4 JSON line, or say why it cannot be used. A field of the
    wrong type, or a number that is not finite, drops the document as
    ``bad_value``: nothing is coerced.

    >>> doc = parse_line(b'{"url": "http://a", "text_list": ["hi"], '
    ...     b'"image_info": [{"raw_url": "http://a/1.jpg", "matched_text_index": 0,'
    ...     b' "matched_sim": 0.3}]}', "docs.jsonl", 1)
    >>> doc.text_list, doc.images[0].matched_text_index
    (('hi',), 0)
    >>> parse_line(b'{"url": "http://a"}', "docs.jsonl", 2).reason
    'missing_text_list'
    >>> parse_line(b'{"text_list": ["hi"], "image_info": [{"matched_sim": NaN}]}',
    ...            "docs.jsonl", 3).detail
    'image_info[0].matched_sim is NaN'
    """
    where = f"{basename(path)}:{line}"
    obj = json_object(raw, where)
    if isinstance(obj, Drop):
        return obj
    text_list = obj.get("text_list")
    if text_list is None:
        return Drop("missing_text_list", where)
    image_info = obj.get("image_info")
    try:
        if not isinstance(text_list, list):
            raise _BadValue(f"text_list is {type_name(text_list)}")
        if image_info is None:
            return Drop("missing_image_info", where)
        if not isinstance(image_info, list):
            raise _BadValue(f"image_info is {type_name(image_info)}")
        url = _string(obj.get("url"), "url") or ""
        texts = tuple(_string(t, f"text_list[{i}]") or "" for i, t in enumerate(text_list))
        images = tuple(_image(info, index) for index, info in enumerate(image_info))
        duplicate = obj.get("could_have_url_duplicate")
        duplicate = (
            int(duplicate)  # 0/1 upstream; true/false mean the same
            if isinstance(duplicate, bool)
            else _integer(duplicate, "could_have_url_duplicate")
        )
    except _BadValue as exc:
        return Drop("bad_value", where, detail=str(exc))
    return Mmc4Document(
        id=document_id(path, line, url),
        url=url,
        text_list=texts,
        images=images,
        similarity_matrix=_as_matrix(obj.get("similarity_matrix")),
        could_have_url_duplicate=duplicate,
        source_file=basename(path),
        line=line,
    )


def reassign(doc: Mmc4Document) -> Mmc4Document | Drop:
    """``doc`` with ``matched_text_index``/``matched_sim`` recomputed from its
    ``similarity_matrix`` (:func:`corpora.assign.assign_images`): the v1
    release has corrupted assignments in about 10% of documents.

    >>> doc = Mmc4Document("d", "http://page", ("a.", "b."),
    ...     (Mmc4Image("http://i/1.jpg", 0, 0.1), Mmc4Image("http://i/2.jpg", 0, 0.1)),
    ...     similarity_matrix=((0.2, 0.3), (0.1, 0.25)))
    >>> [(i.matched_text_index, i.matched_sim) for i in reassign(doc).images]
    [(0, 0.2), (1, 0.25)]
    """
    from corpora.assign import assign_images

    matrix = doc.similarity_matrix
    sentences = len(doc.text_list)
    if (
        matrix is None
        or len(matrix) != len(doc.images)
        or any(len(row) != sentences for row in matrix)
    ):
        return Drop(
            "bad_similarity_matrix",
            doc.id,
            url=doc.url,
            detail=f"need {len(doc.images)} x {sentences} similarities to reassign",
        )
    if not doc.images:
        return doc
    if sentences == 0:
        return Drop("empty_text_list", doc.id, url=doc.url)
    indices, sims = assign_images(matrix)
    images = tuple(
        dataclasses.replace(image, matched_text_index=index, matched_sim=sim)
        for image, index, sim in zip(doc.images, indices, sims)
    )
    return dataclasses.replace(doc, images=images)


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
    corpora.inputs.InputError: c4.json: this file looks like C4, not MMC4: its documents have text, timestamp, url, but no text_list or image_info (build it with `corpora build c4`)
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
    from corpora.bundled_sample import materialize_sample

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
