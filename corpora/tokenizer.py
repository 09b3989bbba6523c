"""Tokenization: SentencePiece text, fixed-length image slot runs.

A document becomes one int32 sequence::

    [bos] chunk_1 chunk_2 ... chunk_n [eos]

where a text chunk is its SentencePiece ids and an image chunk is
``tokens_per_image`` copies of ``image_token_id`` (by default the first id
past the vocabulary). ``spans`` records where each chunk sits so that the
packer can split a long document at chunk boundaries and never inside an
image's slot run.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

import numpy as np

from corpora.record import Document, ImageChunk, TextChunk


@dataclasses.dataclass(frozen=True)
class TokenizerInfo:
    """What a build records about its tokenizer (and the ids it derived)."""

    path: str
    sha256: str
    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int
    image_token_id: int
    tokens_per_image: int


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Tokenizer:
    """A SentencePiece model plus the special ids a build uses.

    Picklable: it carries the serialized model, so a Beam worker loads it
    once in ``setup()`` without needing the original path.
    """

    def __init__(
        self,
        path: str,
        tokens_per_image: int,
        image_token_id: int | None = None,
        pad_id: int | None = None,
    ):
        import sentencepiece as spm

        with open(path, "rb") as handle:
            self._model = handle.read()
        self._processor = spm.SentencePieceProcessor(model_proto=self._model)
        vocab = self._processor.get_piece_size()
        default_pad = self._processor.pad_id()
        self.info = TokenizerInfo(
            path=path,
            sha256=hashlib.sha256(self._model).hexdigest(),
            vocab_size=vocab,
            bos_id=self._processor.bos_id(),
            eos_id=self._processor.eos_id(),
            pad_id=pad_id if pad_id is not None else (default_pad if default_pad >= 0 else 0),
            image_token_id=vocab if image_token_id is None else image_token_id,
            tokens_per_image=tokens_per_image,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"model": self._model, "info": self.info}

    def __setstate__(self, state: dict[str, Any]) -> None:
        import sentencepiece as spm

        self._model = state["model"]
        self.info = state["info"]
        self._processor = spm.SentencePieceProcessor(model_proto=self._model)

    def encode(self, text: str) -> list[int]:
        return self._processor.encode(text, out_type=int)

    def decode(self, ids: list[int]) -> str:
        return self._processor.decode(ids)


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a chunk's tokens sit in a tokenized document: ``[start, end)``."""

    kind: str  # "bos", "text", "image", "eos"
    start: int
    end: int
    image_index: int = -1


@dataclasses.dataclass(frozen=True)
class TokenizedDocument:
    id: str
    corpus: str
    input_ids: np.ndarray  # int32 [length]
    spans: tuple[Span, ...]
    images: tuple[ImageChunk, ...]
    provenance: dict[str, Any]

    @property
    def length(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def text_tokens(self) -> int:
        return sum(s.end - s.start for s in self.spans if s.kind == "text")

    @property
    def image_tokens(self) -> int:
        return sum(s.end - s.start for s in self.spans if s.kind == "image")


def provenance(doc: Document) -> dict[str, Any]:
    """The per-document ``json`` entry of a shard sample (before token counts)."""
    entry: dict[str, Any] = {"id": doc.id, "corpus": doc.corpus}
    if doc.source_url:
        entry["url"] = doc.source_url
    entry["images"] = [
        {
            "url": img.url,
            "sha256": img.sha256,
            "width": img.width,
            "height": img.height,
            **({"scores": dict(img.scores)} if img.scores else {}),
        }
        for img in doc.images
    ]
    keep = {k: v for k, v in doc.meta.items() if v is not None}
    if keep:
        entry["meta"] = keep
    return entry


def tokenize_document(doc: Document, tokenizer: Tokenizer) -> TokenizedDocument:
    """Turn a document's chunks into ids and spans.

    >>> # With bos=1, eos=2, tokens_per_image=3, image_token_id=1000 and a
    >>> # text chunk encoding to [17, 18], [image, text] becomes
    >>> # input_ids [1, 1000, 1000, 1000, 17, 18, 2]
    >>> # spans     bos[0,1) image[1,4) text[4,6) eos[6,7)
    """
    info = tokenizer.info
    ids: list[int] = []
    spans: list[Span] = []
    images: list[ImageChunk] = []
    if info.bos_id >= 0:
        spans.append(Span("bos", 0, 1))
        ids.append(info.bos_id)
    for chunk in doc.chunks:
        start = len(ids)
        if isinstance(chunk, ImageChunk):
            ids.extend([info.image_token_id] * info.tokens_per_image)
            spans.append(Span("image", start, len(ids), len(images)))
            images.append(chunk)
        elif isinstance(chunk, TextChunk):
            encoded = tokenizer.encode(chunk.text)
            if not encoded:
                continue
            ids.extend(encoded)
            spans.append(Span("text", start, len(ids)))
    if info.eos_id >= 0:
        spans.append(Span("eos", len(ids), len(ids) + 1))
        ids.append(info.eos_id)
    return TokenizedDocument(
        id=doc.id,
        corpus=doc.corpus,
        input_ids=np.fromiter(
            ids, dtype=np.int32, count=len(ids)
        ),  # the fastest list-to-int32 path
        spans=tuple(spans),
        images=tuple(images),
        provenance=provenance(doc),
    )
