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
import json
from typing import Any

from corpora.io import basename
from corpora.record import Drop, stable_id


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


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_line(raw: bytes, path: str, line: int) -> Mmc4Document | Drop:
    """Parse one MMC4 JSON line, or say why it cannot be used.

    >>> doc = parse_line(b'{"url": "http://a", "text_list": ["hi"], '
    ...     b'"image_info": [{"raw_url": "http://a/1.jpg", "matched_text_index": 0,'
    ...     b' "matched_sim": 0.3}]}', "docs.jsonl", 1)
    >>> doc.text_list, doc.images[0].matched_text_index
    (('hi',), 0)
    >>> parse_line(b'{"url": "http://a"}', "docs.jsonl", 2).reason
    'missing_text_list'
    """
    where = f"{basename(path)}:{line}"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Drop("not_utf8", where, detail="line is not valid UTF-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return Drop("bad_json", where, detail=str(exc))
    if not isinstance(obj, dict):
        return Drop("bad_json", where, detail="line is not a JSON object")
    text_list = obj.get("text_list")
    if not isinstance(text_list, list):
        return Drop("missing_text_list", where)
    image_info = obj.get("image_info")
    if not isinstance(image_info, list):
        return Drop("missing_image_info", where)
    url = obj.get("url") if isinstance(obj.get("url"), str) else ""
    images = []
    for info in image_info:
        info = info if isinstance(info, dict) else {}
        images.append(
            Mmc4Image(
                raw_url=info.get("raw_url") if isinstance(info.get("raw_url"), str) else "",
                matched_text_index=_as_int(info.get("matched_text_index")),
                matched_sim=_as_float(info.get("matched_sim")),
                image_name=info.get("image_name"),
                face_detections=info.get("face_detections"),
            )
        )
    matrix = obj.get("similarity_matrix")
    similarity = None
    if isinstance(matrix, list) and all(isinstance(row, list) for row in matrix):
        similarity = tuple(tuple(float(v) for v in row) for row in matrix)
    return Mmc4Document(
        id=document_id(path, line, url),
        url=url,
        text_list=tuple(t if isinstance(t, str) else "" for t in text_list),
        images=tuple(images),
        similarity_matrix=similarity,
        could_have_url_duplicate=_as_int(obj.get("could_have_url_duplicate")),
        source_file=basename(path),
        line=line,
    )
