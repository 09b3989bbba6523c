"""Tokenization: SentencePiece text, fixed-length image slot runs.

A document becomes one int32 sequence::

    [bos] chunk_1 chunk_2 ... chunk_n [eos]

where a text chunk is its SentencePiece ids and an image chunk is
``tokens_per_image`` copies of ``image_token_id`` (by default the first id
past the vocabulary). ``spans`` records where each chunk sits so that the
packer can split a long document at chunk boundaries and never inside an
image's slot run.

The special ids are checked against the model before a build starts
(:func:`check_special_ids`): an image token id that is also a text id would
count text as image slots, and one that does not fit in int32 would wrap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
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


INT32_MAX = 2**31 - 1


class SpecialIdError(ValueError):
    """An image token id or pad id that would corrupt the shards (one line)."""


@dataclasses.dataclass(frozen=True)
class ModelIds:
    """The ids a SentencePiece model fixes itself (-1: the model has none)."""

    vocab_size: int
    unk_id: int
    bos_id: int
    eos_id: int
    pad_id: int

    @classmethod
    def of(cls, processor) -> "ModelIds":
        return cls(
            processor.get_piece_size(),
            processor.unk_id(),
            processor.bos_id(),
            processor.eos_id(),
            processor.pad_id(),
        )

    @classmethod
    def read(cls, path: str) -> "ModelIds":
        import sentencepiece as spm

        return cls.of(spm.SentencePieceProcessor(model_file=path))

    @property
    def default_pad_id(self) -> int:
        """The model's pad piece, else 0 (the UNK id in SentencePiece's default
        layout, which is how Llama-2 pads: padding is told by ``segment_ids == 0``)."""
        return self.pad_id if self.pad_id >= 0 else 0


def _as_id(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise SpecialIdError(f"{name} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise SpecialIdError(f"{name} must be an integer, got {value!r}") from None
    if number < 0:
        raise SpecialIdError(f"{name} {number} is negative")
    if number > INT32_MAX:
        raise SpecialIdError(f"{name} {number} does not fit in int32 (at most {INT32_MAX})")
    return number


def check_special_ids(
    model: ModelIds,
    image_token_id: int | None = None,
    pad_id: int | None = None,
    image_token_reserved: bool = False,
) -> tuple[int, int]:
    """The ``(image_token_id, pad_id)`` a build will use, after checking them
    against the tokenizer; raises :class:`SpecialIdError` with one line.

    Left out, the image token id is the first id past the vocabulary and the
    pad id is the model's pad piece (else 0). Neither may be the BOS, EOS or
    UNK id, nor each other; the image token id must lie past the vocabulary
    unless ``image_token_reserved`` says it is a piece set aside for images
    (then it must lie inside); every id must fit in int32. The pad id may be a
    text id otherwise: padding is told by ``segment_ids == 0``.

    >>> model = ModelIds(vocab_size=1000, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    >>> check_special_ids(model)
    (1000, 0)
    >>> check_special_ids(model, image_token_id=999, image_token_reserved=True)
    (999, 0)
    >>> for image, pad in [(1, None), (7, None), (None, 1000), (2**32, None), (-1, None)]:
    ...     try:
    ...         check_special_ids(model, image, pad)
    ...     except SpecialIdError as exc:
    ...         print(exc)
    image token id 1 is the tokenizer's BOS id
    image token id 7 is a text id (vocabulary 0..999): use 1000 or more, or mark it reserved
    pad id 1000 is the image token id
    image token id 4294967296 does not fit in int32 (at most 2147483647)
    image token id -1 is negative
    """
    image = model.vocab_size if image_token_id is None else _as_id(image_token_id, "image token id")
    pad = model.default_pad_id if pad_id is None else _as_id(pad_id, "pad id")
    if image > INT32_MAX:
        raise SpecialIdError(f"the vocabulary ({model.vocab_size} pieces) leaves no int32 image id")
    specials = {"BOS": model.bos_id, "EOS": model.eos_id, "UNK": model.unk_id}
    for name, special in specials.items():
        if special >= 0 and image == special:
            raise SpecialIdError(f"image token id {image} is the tokenizer's {name} id")
    last = model.vocab_size - 1
    if image_token_reserved and image > last:
        raise SpecialIdError(
            f"image token id {image} is past the vocabulary (0..{last}), so not a reserved piece"
        )
    if not image_token_reserved and image <= last:
        raise SpecialIdError(
            f"image token id {image} is a text id (vocabulary 0..{last}):"
            f" use {model.vocab_size} or more, or mark it reserved"
        )
    if pad == image:
        raise SpecialIdError(f"pad id {pad} is the image token id")
    for name, special in specials.items():
        # UNK pads where the model has no pad piece: it is the default, and harmless
        if name == "UNK" and pad == model.default_pad_id:
            continue
        if special >= 0 and pad == special:
            raise SpecialIdError(f"pad id {pad} is the tokenizer's {name} id")
    return image, pad


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Tokenizer:
    """A SentencePiece model plus the special ids a build uses, checked
    against the model (:func:`check_special_ids`: :class:`SpecialIdError`).

    Picklable: it carries the serialized model, so a Beam worker loads it
    once in ``setup()`` without needing the original path.
    """

    def __init__(
        self,
        path: str,
        tokens_per_image: int,
        image_token_id: int | None = None,
        pad_id: int | None = None,
        image_token_reserved: bool = False,
    ):
        import sentencepiece as spm

        with open(path, "rb") as handle:
            self._model = handle.read()
        self._processor = spm.SentencePieceProcessor(model_proto=self._model)
        model = ModelIds.of(self._processor)
        image_token_id, pad_id = check_special_ids(
            model, image_token_id, pad_id, image_token_reserved
        )
        self.info = TokenizerInfo(
            path=path,
            sha256=hashlib.sha256(self._model).hexdigest(),
            vocab_size=model.vocab_size,
            bos_id=model.bos_id,
            eos_id=model.eos_id,
            pad_id=pad_id,
            image_token_id=image_token_id,
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

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """``[encode(t) for t in texts]`` in one call, each as an int32 array:
        SentencePiece encodes a list in C++ with the GIL released, without a
        Python call per text, and hands each text's ids over as a buffer (no
        Python int per token, the largest cost after encoding itself)."""
        if not texts:
            return []
        return self._processor.encode(texts, out_type="numpy", num_threads=1)

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


def tokenize_batch(docs: list[Document], tokenizer: Tokenizer) -> list[TokenizedDocument]:
    """:func:`tokenize_document` of each of ``docs``, the same documents, with
    every text of the batch encoded in one call (:meth:`Tokenizer.encode_batch`)
    and the batch's ids joined into one int32 array that each document's
    ``input_ids`` is a view of: no list of ids is built.

    >>> import numpy as np
    >>> from corpora.config.bundled_sample import SAMPLE_TOKENIZER
    >>> from corpora.record import Document, TextChunk
    >>> tokenizer = Tokenizer(SAMPLE_TOKENIZER, tokens_per_image=2)
    >>> docs = [Document("a", "c4", (TextChunk("A red brick."),)),
    ...         Document("b", "c4", (TextChunk("Hubble"), TextChunk("  "), TextChunk("saw.")))]
    >>> batch = tokenize_batch(docs, tokenizer)
    >>> one = [tokenize_document(doc, tokenizer) for doc in docs]
    >>> all(np.array_equal(x.input_ids, y.input_ids) and x.spans == y.spans and
    ...     x.provenance == y.provenance for x, y in zip(batch, one))
    True
    """
    info = tokenizer.info
    texts = [chunk.text for doc in docs for chunk in doc.chunks if isinstance(chunk, TextChunk)]
    encoded = iter(tokenizer.encode_batch(texts))
    bos = np.array([info.bos_id], dtype=np.int32)
    eos = np.array([info.eos_id], dtype=np.int32)
    image_run = np.full(info.tokens_per_image, info.image_token_id, dtype=np.int32)
    parts: list[np.ndarray] = []  # the batch's ids, in runs, back to back
    shapes = []  # per document: (its first id in the batch, its length, spans, images)
    total = 0
    for doc in docs:
        first, length = total, 0
        spans: list[Span] = []
        images: list[ImageChunk] = []
        if info.bos_id >= 0:
            spans.append(Span("bos", 0, 1))
            parts.append(bos)
            length = 1
        for chunk in doc.chunks:
            if isinstance(chunk, ImageChunk):
                parts.append(image_run)
                spans.append(Span("image", length, length + len(image_run), len(images)))
                images.append(chunk)
                length += len(image_run)
            elif isinstance(chunk, TextChunk):
                ids = next(encoded)
                if not len(ids):
                    continue
                parts.append(ids)
                spans.append(Span("text", length, length + len(ids)))
                length += len(ids)
        if info.eos_id >= 0:
            spans.append(Span("eos", length, length + 1))
            parts.append(eos)
            length += 1
        total += length
        shapes.append((first, length, tuple(spans), tuple(images)))
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return [
        TokenizedDocument(
            id=doc.id,
            corpus=doc.corpus,
            input_ids=ids[first : first + length],
            spans=spans,
            images=images,
            provenance=provenance(doc),
        )
        for doc, (first, length, spans, images) in zip(docs, shapes)
    ]
