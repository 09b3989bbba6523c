"""An MMC4 line as data: :class:`Mmc4Document` and its images, parsed from the
upstream JSON (:func:`parse_line`), and their assignment recomputed from the
similarity matrix (:func:`reassign`).

Upstream schema, per line::

    {"url": ..., "text_list": [sentence, ...],
     "image_info": [{"raw_url", "image_name", "matched_text_index",
                     "matched_sim", "face_detections"}, ...],
     "similarity_matrix": [[...], ...],   # images x sentences
     "could_have_url_duplicate": 0|1}
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from corpora.record import Drop, stable_id
from corpora.sources.inputs import LongLine, basename, json_object, non_finite, type_name
from corpora.sources.mmc4.assign import assign_images


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
    ``similarity_matrix`` (:func:`corpora.sources.mmc4.assign.assign_images`): the v1
    release has corrupted assignments in about 10% of documents.

    >>> doc = Mmc4Document("d", "http://page", ("a.", "b."),
    ...     (Mmc4Image("http://i/1.jpg", 0, 0.1), Mmc4Image("http://i/2.jpg", 0, 0.1)),
    ...     similarity_matrix=((0.2, 0.3), (0.1, 0.25)))
    >>> [(i.matched_text_index, i.matched_sim) for i in reassign(doc).images]
    [(0, 0.2), (1, 0.25)]
    """
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
