"""CLIP scoring with open_clip: load a model, encode in fixed-size batches, score.

The papers' corpora are shaped by CLIP similarity (VILA ranks COYO by it,
MMC4 assigns images to sentences with ViT-L/14, DataComp keeps the top 30%).
This module lets a build score with a model of the user's choice:

- a pair record (one image, its text: ``coyo``, ``wit``, ``mmc4-pairs``) gets
  the cosine similarity of its image and text embeddings, stored as
  ``scores["clip_sim"]`` on the image and ``meta["clip_model"]`` on the
  record, so both reach each sample's ``json``;
- an interleaved document (``mmc4``, ``mmc4-reordered``) gets the image ×
  sentence similarity matrix (:func:`document_similarity`); its images are
  assigned to sentences from it as ``--reassign`` does, placed before their
  new sentences, and scored with their matched cell (:func:`score_documents`).

Models come from open_clip: ``model`` is an open_clip architecture name
(``ViT-L-14``) or the path of an open_clip model config ``.json`` (the
architecture is then the file's stem, as open_clip names its own configs);
``pretrained`` is an open_clip pretrained tag (downloaded where the machine
has network) or a local checkpoint file. Every way this can go wrong raises
:class:`ClipModelError` with one line that names the problem.

Batches have a fixed shape: the last batch is padded to ``batch_size``, so a
record's embedding does not depend on which other records share its batch,
and scores are the same whatever the number of workers. On a GPU the model
runs under float16 autocast; without one, on the CPU in float32.

torch and open_clip are imported only when a model is loaded, so the rest of
the core works without the ``clip`` extra.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import io
import json
import os
import tempfile
import threading
from typing import Any, Sequence

import numpy as np

from corpora.record import Document, Drop, ImageChunk, TextChunk

SCORE = "clip_sim"  # key of the computed score in ImageChunk.scores
DOCUMENT_CORPORA = ("mmc4", "mmc4-reordered")  # scored as documents, not pairs
SCORE_DECIMALS = 6  # scores are stored rounded, well inside float32 precision
DEVICES = ("auto", "cpu", "cuda")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors", ".ckpt")


class ClipModelError(ValueError):
    """A CLIP model cannot be loaded; the message is one line for the user."""


@dataclasses.dataclass(frozen=True)
class ClipSettings:
    """What shapes the CLIP stage (all of it goes into the manifest).

    ``model_config`` holds the JSON text of a config file given as ``model``
    (so a worker process can register the architecture without the file).
    """

    model: str
    pretrained: str | None = None
    model_config: str | None = None
    batch_size: int = 32
    device: str = "auto"
    min_sim: float | None = None
    top_fraction: float | None = None
    save_embeddings: bool = False
    checkpoint_sha256: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"CLIP batch size must be at least 1, got {self.batch_size}")
        if self.device not in DEVICES:
            raise ValueError(
                f"CLIP device must be one of {', '.join(DEVICES)}, got {self.device!r}"
            )
        if self.top_fraction is not None and not 0.0 < self.top_fraction <= 1.0:
            raise ValueError(f"--clip-top-fraction must be in (0, 1], got {self.top_fraction}")
        if self.min_sim is not None and not -1.0 <= self.min_sim <= 1.0:
            raise ValueError(
                f"--min-clip-sim is a cosine similarity in [-1, 1], got {self.min_sim}"
            )

    @property
    def model_id(self) -> str:
        """The name written next to every score: ``ViT-L-14/openai``, ``tiny/tiny.pt``."""
        if self.pretrained is None:
            return f"{self.model}/random-init"
        if is_checkpoint_path(self.pretrained):
            return f"{self.model}/{os.path.basename(self.pretrained)}"
        return f"{self.model}/{self.pretrained}"


def is_checkpoint_path(pretrained: str) -> bool:
    """A local file rather than an open_clip tag (tags hold no path separator)."""
    return (
        os.sep in pretrained
        or "/" in pretrained
        or os.path.isfile(pretrained)
        or pretrained.endswith(CHECKPOINT_SUFFIXES)
    )


def clip_settings(model: str, pretrained: str | None, **options: Any) -> ClipSettings:
    """Settings for ``--clip-model MODEL --clip-pretrained PRETRAINED``.

    Reads a model config given as a path, and fingerprints a local checkpoint
    (sha256) so that the manifest says exactly which weights scored the build.
    """
    model_config = None
    if model.endswith(".json") or os.path.isfile(model):
        try:
            with open(model, encoding="utf-8") as handle:
                text = handle.read()
            config = json.loads(text)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ClipModelError(
                f"cannot read CLIP model config {model}: {_one_line(exc)}"
            ) from None
        if not isinstance(config, dict) or not {"embed_dim", "vision_cfg", "text_cfg"} <= set(
            config
        ):
            raise ClipModelError(
                f"CLIP model config {model} is not an open_clip config (needs embed_dim, vision_cfg, text_cfg)"
            )
        model_config = json.dumps(config, sort_keys=True)
        model = os.path.splitext(os.path.basename(model))[0]
    checkpoint_sha256 = None
    if pretrained is not None and is_checkpoint_path(pretrained):
        pretrained = os.path.abspath(pretrained)
        checkpoint_sha256 = _checkpoint_sha256(pretrained)
    try:
        return ClipSettings(
            model=model,
            pretrained=pretrained,
            model_config=model_config,
            checkpoint_sha256=checkpoint_sha256,
            **options,
        )
    except ValueError as exc:
        raise ClipModelError(str(exc)) from None


def _checkpoint_sha256(path: str) -> str:
    if not os.path.exists(path):
        raise ClipModelError(f"CLIP checkpoint not found: {path}")
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError as exc:
        raise ClipModelError(
            f"CLIP checkpoint is not readable: {path} ({_one_line(exc)})"
        ) from None


def _one_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def require_clip() -> None:
    """Fail early and clearly when the ``clip`` extra is not installed."""
    try:
        import open_clip  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise ClipModelError(
            f"CLIP scoring needs torch and open_clip ({exc.name} is missing): pip install 'corpora[clip]'"
        ) from None


def resolve_device(requested: str) -> str:
    """``auto`` → ``cuda`` where torch sees a GPU, else ``cpu``.

    Checked here rather than trusted to a framework: Beam's RunInference
    ``device='GPU'`` falls back to the CPU without saying so.
    """
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise ClipModelError("--clip-device cuda was asked for, but torch sees no CUDA GPU")
    return requested


_REGISTER_LOCK = threading.Lock()


def _register_config(name: str, config_text: str) -> None:
    """Make ``name`` an open_clip architecture (open_clip reads configs from files)."""
    import open_clip

    with _REGISTER_LOCK:
        existing = open_clip.get_model_config(name)
        if existing is not None and json.dumps(existing, sort_keys=True) == config_text:
            return
        directory = tempfile.mkdtemp(prefix="corpora-clip-config-")
        path = os.path.join(directory, f"{name}.json")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(config_text)
        open_clip.add_model_config(path)


def _check_architecture(name: str) -> None:
    import open_clip

    known = open_clip.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = (
            f"did you mean {', '.join(close)}?"
            if close
            else f"{len(known)} known, e.g. ViT-B-32, ViT-L-14"
        )
        raise ClipModelError(
            f"unknown CLIP architecture {name!r} ({hint}; or pass an open_clip config .json)"
        )


def _load_checkpoint(model, name: str, path: str) -> None:
    """Load a local checkpoint strictly; explain a mismatch in one line."""
    import open_clip
    import torch

    if not os.path.isfile(path):
        raise ClipModelError(f"CLIP checkpoint not found: {path}")
    try:
        state = open_clip.factory.load_state_dict(path)
    except Exception as exc:  # torch.load raises many types for a file that is not a checkpoint
        raise ClipModelError(
            f"CLIP checkpoint is not readable: {path} (not a PyTorch or safetensors "
            f"state dict: {_load_reason(exc)})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ClipModelError(
            f"CLIP checkpoint is not readable: {path} (not a state dict of tensors)"
        )
    try:
        open_clip.load_checkpoint(model, path, strict=True)
    except Exception:
        raise ClipModelError(
            f"CLIP checkpoint {path} does not fit architecture {name}: "
            f"{_mismatch(model.state_dict(), state)}"
        ) from None


def _load_reason(exc: BaseException) -> str:
    """The useful part of a torch.load failure (weights-only loading buries it)."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        rest = [line.strip() for line in text.split(marker, 1)[1].splitlines() if line.strip()]
        if rest:
            return rest[0]
    return _one_line(exc)


def _mismatch(expected: dict, found: dict) -> str:
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    wrong = sorted(
        k for k in set(expected) & set(found) if tuple(expected[k].shape) != tuple(found[k].shape)
    )
    parts = []
    if wrong:
        k = wrong[0]
        parts.append(
            f"{len(wrong)} tensor(s) with another shape (first {k}: "
            f"checkpoint {list(found[k].shape)}, architecture {list(expected[k].shape)})"
        )
    if missing:
        parts.append(f"{len(missing)} missing (first {missing[0]})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected (first {unexpected[0]})")
    return "; ".join(parts) or "the weights were rejected"


class ClipModel:
    """A loaded open_clip model with its preprocessing and tokenizer.

    Safe to share across threads: forward passes run under
    ``torch.inference_mode`` and hold no state between calls.
    """

    def __init__(self, settings: ClipSettings, model, preprocess, tokenizer, device: str):
        self.settings = settings
        self.model = model
        self.preprocess = preprocess
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = settings.batch_size
        import open_clip

        self.embed_dim = (
            int((open_clip.get_model_config(settings.model) or {}).get("embed_dim", 0)) or None
        )
        self.precision = "fp16-autocast" if device == "cuda" else "fp32"

    def _run(self, encode, batch):
        import torch

        with torch.inference_mode():
            if self.device == "cuda":
                with torch.autocast("cuda", dtype=torch.float16):
                    features = encode(batch.to(self.device, non_blocking=True))
            else:
                features = encode(batch)
            features = torch.nn.functional.normalize(features.float(), dim=-1)
        return features.cpu().numpy()

    def image_tensor(self, image) -> Any:
        """One decoded PIL image → the model's input tensor [3, H, W]."""
        return self.preprocess(image)

    def encode_images(self, images: Sequence[Any]) -> np.ndarray:
        """Decoded PIL images (or preprocessed tensors) → unit-norm float32 [n, embed_dim]."""
        import torch

        tensors = [img if isinstance(img, torch.Tensor) else self.preprocess(img) for img in images]
        return self._batched(tensors, lambda chunk: torch.stack(chunk), self.model.encode_image)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Texts → unit-norm float32 [n, embed_dim] (truncated to the context length)."""
        return self._batched(list(texts), self.tokenizer, self.model.encode_text)

    def _batched(self, items: list, collate, encode) -> np.ndarray:
        outputs = []
        for start in range(0, len(items), self.batch_size):
            chunk = items[start : start + self.batch_size]
            padding = self.batch_size - len(chunk)
            # A fixed batch shape keeps each row's numerics independent of its neighbours.
            batch = collate(chunk + [chunk[-1]] * padding)
            outputs.append(self._run(encode, batch)[: len(chunk)])
        if not outputs:
            return np.zeros((0, self.embed_dim or 0), dtype=np.float32)
        return np.concatenate(outputs).astype(np.float32, copy=False)


def needs_quick_gelu(architecture: str, tag: str | None) -> bool:
    """Whether weights ``tag`` were trained with QuickGELU that ``architecture``'s config lacks.

    OpenAI's weights use QuickGELU; open_clip's ``ViT-L-14`` config does not,
    and open_clip only warns when the two are combined. Without this, ``ViT-L-14``
    with ``openai`` would score with the wrong activation.
    """
    import open_clip

    if tag is None:
        return False
    tag_config = open_clip.get_pretrained_cfg(architecture, tag) or {}
    model_config = open_clip.get_model_config(architecture) or {}
    return bool(tag_config.get("quick_gelu")) and not model_config.get("quick_gelu", False)


def load_clip(settings: ClipSettings, device: str | None = None) -> ClipModel:
    """Load the model ``settings`` name; raises :class:`ClipModelError` in one line."""
    require_clip()
    import open_clip

    device = resolve_device(device or settings.device)
    if settings.model_config is not None:
        _register_config(settings.model, settings.model_config)
    _check_architecture(settings.model)
    pretrained = settings.pretrained
    tag = None
    if pretrained is not None and not is_checkpoint_path(pretrained):
        tags = open_clip.list_pretrained_tags_by_model(settings.model)
        if pretrained not in tags:
            known = ", ".join(tags) if tags else "none; pass a local checkpoint file"
            raise ClipModelError(
                f"unknown pretrained tag {pretrained!r} for CLIP architecture "
                f"{settings.model} (known tags: {known})"
            )
        tag = pretrained
    try:
        model, _, preprocess = open_clip.create_model_and_transforms(
            settings.model, pretrained=tag, force_quick_gelu=needs_quick_gelu(settings.model, tag)
        )
    except ClipModelError:
        raise
    except Exception as exc:
        if tag is not None:
            raise ClipModelError(
                f"cannot get CLIP weights {settings.model}/{tag}: {_one_line(exc)} "
                "(downloading needs network; or pass a local checkpoint file)"
            ) from None
        raise ClipModelError(
            f"cannot build CLIP architecture {settings.model}: {_one_line(exc)}"
        ) from None
    if pretrained is not None and tag is None:
        _load_checkpoint(model, settings.model, pretrained)
    model = model.to(device).eval()
    tokenizer = open_clip.get_tokenizer(settings.model)
    return ClipModel(settings, model, preprocess, tokenizer, device)


def decode_image(data: bytes | None):
    """Encoded image bytes → an RGB PIL image, or ``None`` if they do not decode."""
    from PIL import Image

    if not data:
        return None
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except Exception:  # Pillow raises a zoo of types for corrupt data
        return None


def pair_scores(image_embeddings: np.ndarray, text_embeddings: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of unit-norm embeddings.

    >>> pair_scores(np.array([[1.0, 0.0], [0.6, 0.8]]), np.array([[0.6, 0.8], [0.6, 0.8]]))
    array([0.6, 1. ])
    """
    return np.einsum("nd,nd->n", image_embeddings, text_embeddings)


def similarity_matrix(image_embeddings: np.ndarray, sentence_embeddings: np.ndarray) -> np.ndarray:
    """Image × sentence cosine similarities, ``[n_images, n_sentences]``.

    >>> similarity_matrix(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]]))
    array([[0.6, 1. , 0. ],
           [0.8, 0. , 1. ]])
    """
    return image_embeddings @ sentence_embeddings.T


def round_score(value: float) -> float:
    return round(float(value), SCORE_DECIMALS)


@dataclasses.dataclass(frozen=True)
class ScoredPair:
    """A scored pair record and the embeddings its score came from."""

    doc: Document
    score: float
    image_embedding: np.ndarray
    text_embedding: np.ndarray


def pair_parts(doc: Document) -> tuple[ImageChunk, str] | Drop:
    """The one image and the text of a pair record, or why it cannot be scored."""
    images = doc.images
    if len(images) != 1:
        return Drop("clip_not_a_pair", doc.id, detail=f"{len(images)} images", url=doc.source_url)
    if not images[0].fetched:
        return Drop("clip_no_image_data", doc.id, url=images[0].url)
    text = " ".join(
        c.text.strip() for c in doc.chunks if isinstance(c, TextChunk) and c.text.strip()
    )
    if not text:
        return Drop("clip_no_text", doc.id, url=images[0].url)
    return images[0], text


def with_score(doc: Document, score: float, model_id: str) -> Document:
    """``doc`` with ``score`` on its image and the model's name in its meta."""
    chunks = tuple(
        dataclasses.replace(c, scores={**c.scores, SCORE: score})
        if isinstance(c, ImageChunk)
        else c
        for c in doc.chunks
    )
    return doc.replace(chunks=chunks).with_meta(clip_model=model_id)


def score_pairs(docs: Sequence[Document], model: ClipModel) -> list[ScoredPair | Drop]:
    """Score pair records (one image, its text), in the order given.

    A record whose image does not decode is dropped as
    ``clip_image_undecodable``; nothing here raises for bad data.
    """
    results: list[ScoredPair | Drop | None] = [None] * len(docs)
    images, texts, positions = [], [], []
    for position, doc in enumerate(docs):
        parts = pair_parts(doc)
        if isinstance(parts, Drop):
            results[position] = parts
            continue
        image_chunk, text = parts
        image = decode_image(image_chunk.data)
        if image is None:
            results[position] = Drop("clip_image_undecodable", doc.id, url=image_chunk.url)
            continue
        images.append(model.image_tensor(image))
        texts.append(text)
        positions.append(position)
    if positions:
        image_embeddings = model.encode_images(images)
        text_embeddings = model.encode_texts(texts)
        scores = pair_scores(image_embeddings, text_embeddings)
        model_id = model.settings.model_id
        for row, position in enumerate(positions):
            score = round_score(scores[row])
            results[position] = ScoredPair(
                with_score(docs[position], score, model_id),
                score,
                image_embeddings[row],
                text_embeddings[row],
            )
    return results  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class DocumentSimilarity:
    """An interleaved document's image × sentence similarity matrix.

    Rows follow the document's images, columns its text chunks, both in
    reading order. The row of an image without data or that does not decode
    is NaN, and its index is in ``undecodable``.
    """

    matrix: np.ndarray
    undecodable: tuple[int, ...]


def document_similarity(doc: Document, model: ClipModel) -> DocumentSimilarity:
    """The image × sentence CLIP similarity matrix of an MMC4-style document.

    This is the matrix MMC4 computed with ViT-L/14 to place images
    (``similarity_matrix`` in its ``image_info``); assigning images to
    sentences from it is the layout's job.
    """
    return document_similarities([doc], model)[0]


def document_similarities(docs: Sequence[Document], model: ClipModel) -> list[DocumentSimilarity]:
    """:func:`document_similarity` for many documents, their images and
    sentences encoded together in full batches (a document holds only a few)."""
    tensors, texts, layout = [], [], []
    for doc in docs:
        sentences = [c.text for c in doc.chunks if isinstance(c, TextChunk)]
        rows, undecodable = [], []
        for index, image in enumerate(doc.images):
            picture = decode_image(image.data)
            if picture is None:
                undecodable.append(index)
            else:
                rows.append((index, len(tensors)))
                tensors.append(model.image_tensor(picture))
        layout.append((len(doc.images), rows, tuple(undecodable), len(texts), len(sentences)))
        texts.extend(sentences)
    image_embeddings = model.encode_images(tensors) if tensors else None
    text_embeddings = model.encode_texts(texts) if texts else None
    results = []
    for n_images, rows, undecodable, first_text, n_texts in layout:
        matrix = np.full((n_images, n_texts), np.nan, dtype=np.float32)
        if rows and n_texts:
            sentences = text_embeddings[first_text : first_text + n_texts]
            matrix[[r for r, _ in rows]] = similarity_matrix(
                image_embeddings[[e for _, e in rows]], sentences
            )
        results.append(DocumentSimilarity(matrix, undecodable))
    return results


def assign_by_clip(doc: Document, similarity: DocumentSimilarity, model_id: str) -> Document | Drop:
    """Re-place ``doc``'s images by its computed similarity matrix.

    Images are assigned to sentences by :func:`corpora.assign.assign_images`
    (the ``--reassign`` matching) on the rows of the images that decode, and
    each is placed immediately before its sentence
    (:func:`corpora.layouts.place_images`). Each image gets its matched cell
    as ``scores["clip_sim"]`` and the sentence's position among the document's
    sentences as ``meta["clip_text_index"]``; an image that does not decode is
    removed and counted in ``meta["images_removed"]``. A document without
    images passes unchanged, for the layout to judge.
    """
    from corpora.assign import assign_images
    from corpora.layouts import place_images

    images = doc.images
    if not images:
        return doc
    if not doc.texts:
        return Drop("clip_no_text", doc.id, url=doc.source_url)
    rows = [i for i in range(len(images)) if i not in set(similarity.undecodable)]
    assigned, sims = assign_images(similarity.matrix[rows]) if rows else ([], [])
    matched: list[int | None] = [None] * len(images)
    scored = list(images)
    for row, sentence, sim in zip(rows, assigned, sims):
        matched[row] = sentence
        scored[row] = dataclasses.replace(
            images[row],
            scores={**images[row].scores, SCORE: round_score(sim)},
            meta={**images[row].meta, "clip_text_index": sentence},
        )
    iterator = iter(scored)
    doc = doc.replace(
        chunks=tuple(next(iterator) if isinstance(c, ImageChunk) else c for c in doc.chunks)
    )
    doc = place_images(doc, matched).with_meta(clip_model=model_id)
    return _count_removed(doc, "clip_image_undecodable", len(similarity.undecodable))


def score_documents(docs: Sequence[Document], model: ClipModel) -> list[Document | Drop]:
    """Score and re-place the images of interleaved documents (``mmc4``), in
    the order given: :func:`document_similarities`, then :func:`assign_by_clip`."""
    similarities = document_similarities(docs, model)
    return [
        assign_by_clip(doc, similarity, model.settings.model_id)
        for doc, similarity in zip(docs, similarities)
    ]


def remove_images_below(doc: Document, min_sim: float) -> Document:
    """``doc`` without the images whose computed score is below ``min_sim``,
    counted in ``meta["images_removed"]["clip_sim_below_min"]``. The document
    stays (its layout drops it if no image is left).

    >>> doc = Document("d", "mmc4", (ImageChunk("u0", scores={"clip_sim": 0.31}), TextChunk("a."),
    ...     ImageChunk("u1", scores={"clip_sim": 0.12}), TextChunk("b.")))
    >>> kept = remove_images_below(doc, 0.2)
    >>> [c.text if c.kind == "text" else c.url for c in kept.chunks], kept.meta["images_removed"]
    (['u0', 'a.', 'b.'], {'clip_sim_below_min': 1})
    """
    chunks = tuple(
        c
        for c in doc.chunks
        if not isinstance(c, ImageChunk) or c.scores.get(SCORE, float("-inf")) >= min_sim
    )
    return _count_removed(
        doc.replace(chunks=chunks), "clip_sim_below_min", len(doc.chunks) - len(chunks)
    )


def _count_removed(doc: Document, reason: str, count: int) -> Document:
    if not count:
        return doc
    removed = dict(doc.meta.get("images_removed") or {})
    removed[reason] = removed.get(reason, 0) + count
    return doc.with_meta(images_removed=removed)


EMBEDDINGS_ROWS_PER_FILE = 100_000


def embeddings_file_name(index: int) -> str:
    """Embedding files sit beside the shards: ``clip-embeddings-000000.parquet``, …"""
    return f"clip-embeddings-{index:06d}.parquet"


def embeddings_file_count(total: int, rows_per_file: int = EMBEDDINGS_ROWS_PER_FILE) -> int:
    """How many parquet files ``total`` embedding rows are spread over (by id hash).

    >>> [embeddings_file_count(0), embeddings_file_count(100_000), embeddings_file_count(100_001)]
    [1, 1, 2]
    """
    return max(1, -(-total // rows_per_file))


def embedding_row(pair: ScoredPair) -> dict[str, Any]:
    """One parquet row: what a user needs to re-filter or deduplicate a pair."""
    image = pair.doc.images[0]
    return {
        "id": pair.doc.id,
        "image_url": image.url,
        "image_sha256": image.sha256,
        SCORE: pair.score,
        "image_embedding": np.asarray(pair.image_embedding, dtype=np.float32),
        "text_embedding": np.asarray(pair.text_embedding, dtype=np.float32),
    }


def write_embeddings(stream, rows: Sequence[dict[str, Any]], model_id: str) -> dict[str, int]:
    """Write rows (sorted by id) as one parquet file with fixed-size float32 lists.

    The file's schema metadata names the model, so embeddings of two models
    are never mixed up.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    ordered = sorted(rows, key=lambda row: row["id"])
    dim = int(ordered[0]["image_embedding"].shape[0]) if ordered else 0

    def vectors(key: str):
        flat = np.concatenate([row[key] for row in ordered]) if ordered else np.zeros(0, np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)

    table = pa.table(
        {
            "id": pa.array([row["id"] for row in ordered], type=pa.string()),
            "image_url": pa.array([row["image_url"] for row in ordered], type=pa.string()),
            "image_sha256": pa.array([row["image_sha256"] for row in ordered], type=pa.string()),
            SCORE: pa.array([row[SCORE] for row in ordered], type=pa.float32()),
            "image_embedding": vectors("image_embedding"),
            "text_embedding": vectors("text_embedding"),
        }
    ).replace_schema_metadata({"clip_model": model_id, "embedding_dim": str(dim)})
    pq.write_table(table, stream)
    return {"rows": len(ordered), "embedding_dim": dim}


def clip_summary(
    settings: ClipSettings,
    counts: dict[int, int],
    selection: dict | None,
    embedding_files: Sequence[dict],
    resolution: float,
) -> dict[str, Any]:
    """The manifest's ``clip`` entry: which model scored the build, and how scores fell."""
    from corpora import select

    return {
        "model": settings.model_id,
        "architecture": settings.model,
        "pretrained": settings.pretrained,
        "checkpoint_sha256": settings.checkpoint_sha256,
        "score": SCORE,
        "batch_size": settings.batch_size,
        "device": settings.device,
        "scored": sum(counts.values()),
        "score_quantiles": select.quantiles(
            counts, (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99), resolution
        ),
        "quantile_error": resolution,
        "min_sim": settings.min_sim,
        "top_fraction": selection,
        "embeddings": sorted((dict(f) for f in embedding_files), key=lambda f: f["path"]),
    }
