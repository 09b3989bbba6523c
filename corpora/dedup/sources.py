"""What ``--decontaminate PATH`` names, read once: evaluation texts (and the hook for images).

The flag is repeatable; each PATH is one source, and what it is decides who
reads it (:func:`source_kind`):

- a text file (``.txt``, one evaluation text a line) or JSON lines
  (``.jsonl``: each line a string, or an object whose ``text``, ``caption``,
  ``captions``, ``question``, ``questions``, ``sentence``, ``sentences`` or
  ``answers`` fields hold strings or lists of them), or a ``.json`` file (COCO's
  ``annotations`` with a ``caption`` or ``question`` each, or a list of
  strings): evaluation **texts**, read here (:class:`EvalTexts`);
- a folder (of evaluation images) or a ``.parquet`` (of image hashes):
  **images**, read by the image rules (:mod:`corpora.dedup.images`) from
  :attr:`Source.path`; nothing here opens them.

A record's text is contaminated when it shares a 13-word n-gram with an
evaluation text (GPT-3's contamination study, on the normalised words of
:mod:`corpora.dedup.text`). An evaluation text shorter than 13 words counts
as one n-gram of all its words when it has at least :data:`MIN_NGRAM` words
(a COCO caption of 10 words found inside a document); a shorter one (a VQA
question, "what color is the cat") only when a record's whole text is that
text, since five common words in a row are no leak::

    >>> evals = EvalTexts.from_texts([
    ...     "a man riding a wave on top of a surfboard",
    ...     "what color is the cat",
    ... ])
    >>> evals.contaminated("Photo: A man riding a wave on top of a surfboard, at dawn.")
    True
    >>> evals.contaminated("What color is the cat?")
    True
    >>> evals.contaminated("what color is the cat here")
    False
    >>> evals.contaminated("a man riding a wave")
    False
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

import fsspec
import numpy as np

from corpora.config.spec import Option
from corpora.dedup.text import ngram_hashes, record_text, text_hash, words
from corpora.record import Document, Drop

if TYPE_CHECKING:
    from corpora.config.settings import BuildSettings

NGRAM = 13  # GPT-3's contamination study
MIN_NGRAM = 8  # a shorter evaluation text matches only a whole record text
TEXTS, IMAGE_FOLDER, IMAGE_HASHES = "texts", "image_folder", "image_hashes"
IMAGE_KINDS = (IMAGE_FOLDER, IMAGE_HASHES)
TEXT_SUFFIXES = (".txt", ".jsonl", ".json")
TEXT_COMPRESSION = ".gz"  # a text source may be gzipped; nothing else is read compressed
ACCEPTED = (
    "a folder of images, a .parquet of image hashes, or a .txt/.jsonl/.json of texts "
    "(gzipped: .txt.gz/.jsonl.gz/.json.gz)"
)
TEXT_FIELDS = (
    "text",
    "caption",
    "captions",
    "question",
    "questions",
    "sentence",
    "sentences",
    "answers",
)


EVAL_CONTAMINATION = "eval_contamination"


def _check_paths(paths: tuple[str, ...]) -> str | None:
    for path in paths:
        try:
            source_kind(path)
        except SourceError as error:
            return str(error)
        fs, root = fsspec.core.url_to_fs(path)
        if not fs.exists(root):
            return f"--decontaminate {path}: no such file or folder"
    return None


# The one --decontaminate flag, declared here for the text and the image rules
# (the text stage carries it; the image stage reads the same value).
DECONTAMINATE = Option(
    "decontaminate",
    tuple,
    None,
    "evaluation data kept out of the build: a .txt/.jsonl/.json of texts (13-word n-grams), "
    "a folder of images or a .parquet of image hashes (repeatable).",
    check=_check_paths,
    repeatable=True,
)


class SourceError(ValueError):
    """A ``--decontaminate`` path that cannot be read, in one line."""


@dataclasses.dataclass(frozen=True)
class Source:
    """One ``--decontaminate`` path: what it is and the sha256 the manifest records."""

    path: str
    kind: str  # TEXTS, IMAGE_FOLDER or IMAGE_HASHES
    sha256: str

    def as_manifest(self) -> dict:
        return {"path": self.path, "kind": self.kind, "sha256": self.sha256}


def source_kind(path: str) -> str:
    """What ``path`` is, for the text rules and the image rules alike (the one
    place that decides): a folder (local, or any fsspec URL: ``gs://``,
    ``s3://``, ``memory://``) is evaluation images, a ``.parquet`` their
    hashes, a ``.txt``/``.jsonl``/``.json`` (or any of them ``.gz``) texts.
    Anything else, a parquet or a text compressed otherwise among them, is
    refused in one line naming the path and the kinds accepted.

    >>> source_kind("coco_captions.jsonl"), source_kind("eval_hashes.parquet")
    ('texts', 'image_hashes')
    >>> source_kind("vqa_questions.json.gz")
    'texts'
    >>> try:
    ...     source_kind("notes.pdf")
    ... except SourceError as error:
    ...     print(*str(error).split(", "), sep=",\\n")
    --decontaminate notes.pdf: not a folder of images,
    a .parquet of image hashes,
    or a .txt/.jsonl/.json of texts (gzipped: .txt.gz/.jsonl.gz/.json.gz)
    """
    fs, root = fsspec.core.url_to_fs(path)
    if fs.isdir(root):
        return IMAGE_FOLDER
    name = path.lower()
    if name.endswith(".parquet"):
        return IMAGE_HASHES
    if name.removesuffix(TEXT_COMPRESSION).endswith(TEXT_SUFFIXES):
        return TEXTS
    stem, dot, extension = name.rpartition(".")
    if dot and stem.endswith(".parquet"):
        raise SourceError(
            f"--decontaminate {path}: a parquet is read uncompressed (it compresses inside); "
            f"accepted: {ACCEPTED}"
        )
    if dot and stem.endswith(TEXT_SUFFIXES):
        raise SourceError(
            f"--decontaminate {path}: a text file compressed as .{extension} is not read; "
            f"accepted: {ACCEPTED}"
        )
    raise SourceError(f"--decontaminate {path}: not {ACCEPTED}")


def is_image_source(path: str) -> bool:
    """Whether ``path`` is evaluation images (a folder or a parquet of hashes):
    :func:`source_kind`'s answer, for the image rules.

    >>> is_image_source("eval/coco-val.parquet"), is_image_source("eval/vqav2.jsonl")
    (True, False)
    """
    return source_kind(path) in IMAGE_KINDS


def read_sources(paths: Sequence[str]) -> tuple[Source, ...]:
    """Every ``--decontaminate`` path, checked, with its sha256 (a folder's: of its
    files' names and sha256 in name order). Raises :class:`SourceError`."""
    sources = []
    for path in paths:
        kind = source_kind(path)
        try:
            digest = _folder_sha256(path) if kind == IMAGE_FOLDER else _file_sha256(path)
        except OSError as error:
            raise SourceError(f"--decontaminate {path}: {error}") from None
        sources.append(Source(path, kind, digest))
    return tuple(sources)


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with fsspec.open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _folder_sha256(path: str) -> str:
    fs, root = fsspec.core.url_to_fs(path)
    return folder_sha256(
        (os.path.relpath(name, root), _file_sha256(fs.unstrip_protocol(name)))
        for name in sorted(fs.find(root))
    )


def folder_sha256(files: Iterable[tuple[str, str]]) -> str:
    """The sha256 recorded for a folder of evaluation images: of its files'
    names (relative to it) and sha256s (hex), in path order. The manifest's
    and the ``eval_contamination`` report's are the same one.

    >>> folder_sha256([("a.jpg", "00" * 32)]) == folder_sha256([("b.jpg", "00" * 32)])
    False
    """
    digest = hashlib.sha256()
    for relative, sha256 in files:
        digest.update(relative.encode("utf-8") + b"\0")
        digest.update(bytes.fromhex(sha256))
    return digest.hexdigest()


def evaluation_texts(source: Source) -> Iterator[str]:
    """The evaluation texts of a texts source, in file order."""
    compression = "gzip" if source.path.lower().endswith(TEXT_COMPRESSION) else None
    name = source.path.lower().removesuffix(TEXT_COMPRESSION)
    with fsspec.open(source.path, "rt", encoding="utf-8", compression=compression) as stream:
        if name.endswith(".txt"):
            yield from (line.rstrip("\n") for line in stream)
        elif name.endswith(".jsonl"):
            for number, line in enumerate(stream, 1):
                if line.strip():
                    yield from _strings(_json(line, source.path, number))
        else:
            yield from _strings(_json(stream.read(), source.path, None))


def _json(text: str, path: str, line: int | None):
    try:
        return json.loads(text)
    except ValueError as error:
        where = f" line {line}" if line is not None else ""
        raise SourceError(f"--decontaminate {path}{where}: not JSON ({error})") from None


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        if "annotations" in value:  # COCO's captions or VQA's questions file
            yield from _strings(value["annotations"])
        for field in TEXT_FIELDS:
            if field in value:
                yield from _strings(value[field])


@dataclasses.dataclass(frozen=True)
class EvalTexts:
    """The n-grams of every evaluation text: sorted uint64 hashes per n-gram
    length, and the exact hashes of the short texts."""

    ngrams: dict[int, np.ndarray]
    whole: frozenset[str]
    count: int

    @classmethod
    def from_texts(cls, texts: Iterable[str], n: int = NGRAM) -> "EvalTexts":
        by_length: dict[int, list[np.ndarray]] = {}
        whole, count = set(), 0
        for text in texts:
            tokens = words(text)
            if not tokens:
                continue
            count += 1
            if len(tokens) < MIN_NGRAM:
                whole.add(text_hash(text))
                continue
            length = min(n, len(tokens))
            by_length.setdefault(length, []).append(ngram_hashes(tokens, length))
        return cls(
            {length: np.unique(np.concatenate(parts)) for length, parts in by_length.items()},
            frozenset(whole),
            count,
        )

    @classmethod
    def from_sources(cls, sources: Sequence[Source], n: int = NGRAM) -> "EvalTexts":
        texts = (
            text for source in sources if source.kind == TEXTS for text in evaluation_texts(source)
        )
        return cls.from_texts(texts, n)

    def contaminated(self, text: str) -> bool:
        """Whether ``text`` shares an n-gram with an evaluation text (or is a short one)."""
        if not self.ngrams and not self.whole:
            return False
        tokens = words(text)
        if not tokens:
            return False
        if self.whole and text_hash(text) in self.whole:
            return True
        for length, known in self.ngrams.items():
            if len(tokens) < length:
                continue
            grams = ngram_hashes(tokens, length)
            found = np.searchsorted(known, grams)
            found[found == len(known)] = 0
            if np.any(known[found] == grams):
                return True
        return False


def decontamination_paths(settings: "BuildSettings") -> tuple[str, ...]:
    """The ``--decontaminate`` paths of a build (none: an empty tuple)."""
    return tuple(settings.stage_options.get(DECONTAMINATE.name) or ())


def text_paths(settings: "BuildSettings") -> tuple[str, ...]:
    """The ``--decontaminate`` paths that are evaluation texts (the text stage's)."""
    return tuple(p for p in decontamination_paths(settings) if source_kind(p) == TEXTS)


def image_paths(settings: "BuildSettings") -> tuple[str, ...]:
    """The ``--decontaminate`` paths that are evaluation images: the image rules'
    hook (``corpora.dedup.evaluation`` reads each of them)."""
    return tuple(p for p in decontamination_paths(settings) if is_image_source(p))


@functools.lru_cache(maxsize=4)
def eval_texts(paths: tuple[str, ...]) -> EvalTexts:
    """The evaluation texts of ``paths``, read once per process."""
    return EvalTexts.from_sources(read_sources(paths))


def eval_contamination(document: Document, settings: "BuildSettings") -> Document | Drop:
    """The stage's core: ``document``, or a drop when its text shares a 13-word
    n-gram with an evaluation text of ``--decontaminate``."""
    if eval_texts(text_paths(settings)).contaminated(record_text(document)):
        return Drop(EVAL_CONTAMINATION, document.id, detail="text")
    return document


def decontamination_report(paths: Sequence[str]) -> dict:
    """The manifest's report of the text decontamination: every source and its sha256."""
    sources = read_sources(paths)
    texts = eval_texts(tuple(paths))
    return {
        "sources": [source.as_manifest() for source in sources],
        "evaluation_texts": texts.count,
        "ngram": NGRAM,
    }
