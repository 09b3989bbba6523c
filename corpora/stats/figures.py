"""Corpus statistics, computed exactly from packed sequences.

The same code computes them during a build (from the sequences before they
are written, combined by Beam) and afterwards from finished shards
(``corpora stats``), so the two agree exactly. ``docs/statistics.md`` defines
every figure; in short, inside a sequence every token is one of:

- padding: ``segment_ids == 0``;
- image slot: ``input_ids == image_token_id`` in a segment;
- special: BOS or EOS in a segment (not text: VILA counts the text's tokens);
- text: every other token in a segment.

A document split across sequences (``pieces > 1`` in the sample's ``json``)
is put back together by its ``id`` before it is counted. Every value that
enters a distribution is an integer (scores are quantised to 1e-4), so sums,
medians and histograms do not depend on the order Beam combines them in.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import tarfile
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from corpora import reader
from corpora.config import catalog
from corpora.fetch.settings import is_fetch_reason
from corpora.stats.distributions import distribution

STATS = "stats.json"
STATS_VERSION = 1
SCORE_SCALE = 10_000  # scores are counted in units of 1e-4

# VILA: On Pre-training for Visual Language Models (Lin et al., CVPR 2024),
# Table 2, counted with the Llama-2 tokenizer.
VILA_TABLE2 = {
    "coyo": {"text_tokens_per_image": 22.7},
    "mmc4": {"text_tokens_per_image": 122.5, "images_per_document": 4.0},
}
VILA_SOURCE = "VILA (Lin et al., CVPR 2024), Table 2; Llama-2 tokenizer"


@dataclasses.dataclass(frozen=True)
class TokenIds:
    """What classifies a sequence's tokens (from the manifest or the tokenizer)."""

    image_token_id: int
    bos_id: int
    eos_id: int
    tokens_per_image: int

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> "TokenIds":
        return cls(
            int(manifest["image_token_id"]),
            int(manifest["bos_id"]),
            int(manifest["eos_id"]),
            int(manifest["tokens_per_image"]),
        )


@dataclasses.dataclass(frozen=True)
class SegmentValues:
    """One segment of a sequence: a document, or one piece of a split one."""

    id: str
    piece: int
    pieces: int
    text_tokens: int
    image_tokens: int
    special_tokens: int
    images: int
    scores: tuple[tuple[str, int], ...]  # (name, value in units of 1e-4), one per image score
    image_failures: tuple[str, ...]  # reasons, on the first piece only
    images_with_text: int = 0  # images whose next text chunk is in this piece
    ends_in_image: bool = False  # the piece's last token is an image slot
    dropped_pieces: int = 0  # pieces of the document dropped as too short (first piece only)
    dropped_tokens: int = 0


@dataclasses.dataclass(frozen=True)
class SequenceValues:
    """What one packed sequence contributes to the statistics."""

    tokens: int
    padding_tokens: int
    pieces: tuple[SegmentValues, ...]


def quantise(score: float) -> int:
    """A score in units of 1e-4: ``quantise(0.3127) == 3127``."""
    return int(round(float(score) * SCORE_SCALE))


def sequence_values(
    input_ids: np.ndarray,
    segment_ids: np.ndarray,
    documents: Iterable[Mapping[str, Any]],
    ids: TokenIds,
) -> SequenceValues:
    """Classify one sequence's tokens per segment.

    >>> ids = TokenIds(image_token_id=9, bos_id=1, eos_id=2, tokens_per_image=2)
    >>> input_ids = np.array([1, 9, 9, 5, 6, 2, 1, 7, 2, 0])
    >>> segment_ids = np.array([1, 1, 1, 1, 1, 1, 2, 2, 2, 0])
    >>> documents = [{"id": "a", "segment": 1, "images": [{"scores": {"matched_sim": 0.31}}]},
    ...              {"id": "b", "segment": 2}]
    >>> v = sequence_values(input_ids, segment_ids, documents, ids)
    >>> [(p.id, p.text_tokens, p.image_tokens, p.special_tokens, p.images) for p in v.pieces]
    [('a', 2, 2, 2, 1), ('b', 1, 0, 2, 0)]
    >>> [(p.images_with_text, p.ends_in_image) for p in v.pieces]  # a's image is followed by 5
    [(1, False), (0, False)]
    >>> v.padding_tokens
    1
    """
    input_ids = np.asarray(input_ids)
    segment_ids = np.asarray(segment_ids)
    if input_ids.shape != segment_ids.shape or input_ids.ndim != 1:
        raise ValueError(
            f"input_ids {input_ids.shape} and segment_ids {segment_ids.shape} are not one sequence"
        )
    counts = _segment_counts(input_ids, segment_ids, ids)
    placement = _image_placement(input_ids, segment_ids, ids)
    pieces = []
    for entry in sorted(documents, key=lambda d: d["segment"]):
        tokens, image_tokens, special_tokens = counts.get(entry["segment"], (0, 0, 0))
        with_text, ends_in_image = placement.get(entry["segment"], (0, False))
        pieces.append(
            _segment_values(
                entry, tokens, image_tokens, special_tokens, with_text, ends_in_image, ids
            )
        )
    return SequenceValues(
        tokens=int(input_ids.shape[0]),
        padding_tokens=counts.get(0, (0, 0, 0))[0],
        pieces=tuple(pieces),
    )


def _token_classes(tokens: np.ndarray, ids: TokenIds) -> tuple[np.ndarray, np.ndarray]:
    """Which ``tokens`` are image slots and which are special (BOS or EOS,
    never an image slot), as two boolean arrays."""
    image = tokens == ids.image_token_id
    special = np.zeros(tokens.shape, dtype=bool)
    for token in (ids.bos_id, ids.eos_id):
        if token >= 0:
            special |= tokens == token
    special &= ~image
    return image, special


def packed_values(
    tokens: np.ndarray,
    lengths: np.ndarray,
    counts: np.ndarray,
    entries: Sequence[Mapping[str, Any]],
    seq_len: int,
    ids: TokenIds,
) -> Iterator[SequenceValues]:
    """:func:`sequence_values` of each sequence of a packing group, from the
    arrays the packer holds (pieces' ids back to back, each piece's length,
    the pieces of each sequence: :class:`corpora.tokens.pack_groups.PackedGroup`)
    rather than from laid-out sequences: one pass over the group's tokens.

    >>> ids = TokenIds(image_token_id=9, bos_id=1, eos_id=2, tokens_per_image=2)
    >>> tokens = np.array([1, 5, 6, 2, 1, 7, 2], np.int32)
    >>> entries = [{"id": "a", "pieces": 1}, {"id": "b", "piece": 0, "pieces": 2}]
    >>> [v] = packed_values(tokens, np.array([4, 3]), np.array([2]), entries, 10, ids)
    >>> v == sequence_values(np.append(tokens, [0, 0, 0]), np.array([1] * 4 + [2] * 3 + [0] * 3),
    ...     [{**entries[0], "segment": 1}, {**entries[1], "segment": 2}], ids)
    True
    """
    tokens = np.asarray(tokens)
    starts = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))[:-1]
    image, special = _token_classes(tokens, ids)
    if len(lengths):
        image_tokens = np.add.reduceat(image, starts, dtype=np.int64).tolist()
        special_tokens = np.add.reduceat(special, starts, dtype=np.int64).tolist()
    else:
        image_tokens = special_tokens = []
    has_images = bool(image.any())
    piece = 0
    for count in np.asarray(counts).tolist():
        pieces, used = [], 0
        for index in range(piece, piece + count):
            entry, length = entries[index], int(lengths[index])
            used += length
            if has_images:  # where the slots sit needs the laid-out sequence
                break
            pieces.append(
                _segment_values(
                    entry, length, image_tokens[index], special_tokens[index], 0, False, ids
                )
            )
        if has_images:
            a, b = int(starts[piece]), int(starts[piece + count - 1] + lengths[piece + count - 1])
            segments = np.repeat(np.arange(1, count + 1), lengths[piece : piece + count])
            yield sequence_values(
                np.concatenate((tokens[a:b], np.full(seq_len - (b - a), -1, tokens.dtype))),
                np.concatenate((segments, np.zeros(seq_len - (b - a), segments.dtype))),
                [{**entries[p], "segment": p - piece + 1} for p in range(piece, piece + count)],
                ids,
            )
        else:
            yield SequenceValues(
                tokens=seq_len, padding_tokens=seq_len - used, pieces=tuple(pieces)
            )
        piece += count


def _segment_values(
    entry: Mapping[str, Any],
    tokens: int,
    image_tokens: int,
    special_tokens: int,
    with_text: int,
    ends_in_image: bool,
    ids: TokenIds,
) -> SegmentValues:
    """One segment's values from its ``json`` entry and its token counts."""
    dropped = entry.get("dropped") or {}
    piece = int(entry.get("piece", 0))
    scores = []
    for img in entry.get("images", []):
        for name, value in sorted((img.get("scores") or {}).items()):
            if value is not None:
                scores.append((name, quantise(value)))
    failures = ()
    if piece == 0:
        failures = tuple(
            f.get("reason", "unknown") for f in (entry.get("meta") or {}).get("image_failures", [])
        )
    return SegmentValues(
        id=str(entry["id"]),
        piece=piece,
        pieces=int(entry.get("pieces", 1)),
        text_tokens=tokens - image_tokens - special_tokens,
        image_tokens=image_tokens,
        special_tokens=special_tokens,
        images=image_tokens // ids.tokens_per_image,
        scores=tuple(scores),
        image_failures=failures,
        images_with_text=with_text // ids.tokens_per_image,
        ends_in_image=ends_in_image,
        dropped_pieces=int(dropped.get("pieces", 0)),
        dropped_tokens=int(dropped.get("tokens", 0)),
    )


def _segment_counts(
    input_ids: np.ndarray, segment_ids: np.ndarray, ids: TokenIds
) -> dict[Any, tuple[int, int, int]]:
    """Tokens, image tokens and special tokens per segment id, in one pass.

    A segment is a run of equal ``segment_ids`` (the packer writes each one
    contiguously); runs of the same id are added up, so any order is counted
    right. An image slot is never special, even where its id is BOS or EOS.
    """
    if not segment_ids.shape[0]:
        return {}
    starts = np.flatnonzero(np.concatenate(([True], segment_ids[1:] != segment_ids[:-1])))
    lengths = np.diff(np.append(starts, segment_ids.shape[0]))
    image, special = _token_classes(input_ids, ids)
    counts: dict[Any, tuple[int, int, int]] = {}
    for segment, tokens, image_tokens, special_tokens in zip(
        segment_ids[starts].tolist(),
        lengths.tolist(),
        np.add.reduceat(image, starts, dtype=np.int64).tolist(),
        np.add.reduceat(special, starts, dtype=np.int64).tolist(),
    ):
        before = counts.get(segment, (0, 0, 0))
        counts[segment] = (
            before[0] + tokens,
            before[1] + image_tokens,
            before[2] + special_tokens,
        )
    return counts


def _image_placement(
    input_ids: np.ndarray, segment_ids: np.ndarray, ids: TokenIds
) -> dict[Any, tuple[int, bool]]:
    """Per segment with image slots: how many slots have a text token as the
    next token after their run, in the same segment, and whether the
    segment's last token is a slot (an image cut off from its text when the
    document goes on). Empty where the sequence holds no image."""
    image = input_ids == ids.image_token_id
    if not image.any():
        return {}
    size = image.shape[0]
    special = np.zeros(size, dtype=bool)
    for token in (ids.bos_id, ids.eos_id):
        if token >= 0:
            special |= input_ids == token
    text = (segment_ids > 0) & ~image & ~special
    # the first position at or after each one that is not a slot (size: none)
    after = np.minimum.accumulate(np.where(image, size, np.arange(size))[::-1])[::-1]
    slots = np.flatnonzero(image)
    nxt = after[slots]
    inside = nxt < size
    followed = np.zeros(slots.shape[0], dtype=bool)
    followed[inside] = text[nxt[inside]] & (segment_ids[nxt[inside]] == segment_ids[slots[inside]])
    with_text = collections.Counter(segment_ids[slots[followed]].tolist())
    ends = np.flatnonzero(np.append(segment_ids[1:] != segment_ids[:-1], True))
    ending = {int(segment_ids[e]) for e in ends if image[e]}
    return {
        segment: (with_text.get(segment, 0), segment in ending)
        for segment in set(segment_ids[slots].tolist())
    }


class StatsAccumulator:
    """Integer counts that merge in any order (a Beam CombineFn's accumulator)."""

    def __init__(self) -> None:
        self.sequences = 0
        self.tokens = 0
        self.padding_tokens = 0
        self.text_tokens = 0
        self.image_tokens = 0
        self.special_tokens = 0
        self.images = 0
        self.pieces = 0
        self.documents = 0
        self.split_documents = 0
        self.images_with_text = 0
        self.pieces_ending_in_image = 0
        self.dropped_pieces = 0
        self.dropped_tokens = 0
        self.text_tokens_per_document: collections.Counter = collections.Counter()
        self.images_per_document: collections.Counter = collections.Counter()
        self.documents_per_sequence: collections.Counter = collections.Counter()
        self.scores: dict[str, collections.Counter] = {}
        self.image_failures: collections.Counter = collections.Counter()
        # split documents not yet complete: id -> [pieces, seen piece indices, text tokens, images]
        self.partial: dict[str, list] = {}

    def add(self, values: SequenceValues) -> "StatsAccumulator":
        self.sequences += 1
        self.tokens += values.tokens
        self.padding_tokens += values.padding_tokens
        self.documents_per_sequence[len(values.pieces)] += 1
        for piece in values.pieces:
            self._add_piece(piece)
        return self

    def _add_piece(self, piece: SegmentValues) -> None:
        self.pieces += 1
        self.text_tokens += piece.text_tokens
        self.image_tokens += piece.image_tokens
        self.special_tokens += piece.special_tokens
        self.images += piece.images
        self.images_with_text += piece.images_with_text
        self.pieces_ending_in_image += int(piece.ends_in_image)
        self.dropped_pieces += piece.dropped_pieces
        self.dropped_tokens += piece.dropped_tokens
        for name, value in piece.scores:
            self.scores.setdefault(name, collections.Counter())[value] += 1
        self.image_failures.update(piece.image_failures)
        if piece.pieces <= 1:
            self._document(piece.text_tokens, piece.images, split=False)
        else:
            self._partial(piece.id, piece.pieces, {piece.piece}, piece.text_tokens, piece.images)

    def add_group(
        self,
        tokens: np.ndarray,
        lengths: np.ndarray,
        counts: np.ndarray,
        entries: Sequence[Mapping[str, Any]],
        seq_len: int,
        ids: TokenIds,
    ) -> "StatsAccumulator":
        """:meth:`add` of every :func:`packed_values` of a packing group, the
        same counts; a group without image slots (a text build's) in a few
        array operations and one look at each ``json`` entry, not a
        :class:`SequenceValues` per sequence and a :class:`SegmentValues` per
        piece (a document's statistics in a tenth of the CPU).

        >>> ids = TokenIds(image_token_id=9, bos_id=1, eos_id=2, tokens_per_image=2)
        >>> tokens = np.array([1, 5, 6, 2, 1, 7, 2, 1, 8], np.int32)
        >>> entries = [{"id": "a", "pieces": 1}, {"id": "b"}, {"id": "c", "pieces": 2}]
        >>> lengths, counts = np.array([4, 3, 2]), np.array([2, 1])
        >>> one = StatsAccumulator()
        >>> for values in packed_values(tokens, lengths, counts, entries, 10, ids):
        ...     _ = one.add(values)
        >>> group = StatsAccumulator().add_group(tokens, lengths, counts, entries, 10, ids)
        >>> vars(group) == vars(one)
        True
        """
        image, special = _token_classes(np.asarray(tokens), ids)
        if not len(lengths) or image.any():  # slots: laid out
            for values in packed_values(tokens, lengths, counts, entries, seq_len, ids):
                self.add(values)
            return self
        lengths = np.asarray(lengths, dtype=np.int64)
        counts = np.asarray(counts, dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(lengths)))[:-1]
        specials = np.add.reduceat(special, starts, dtype=np.int64)
        texts = lengths - specials
        first_pieces = np.concatenate(([0], np.cumsum(counts)))[:-1]
        used = np.add.reduceat(lengths, first_pieces) if len(counts) else np.zeros(0, np.int64)
        self.sequences += len(counts)
        self.tokens += seq_len * len(counts)
        self.padding_tokens += int((seq_len - used).sum())
        self.documents_per_sequence.update(counts.tolist())
        whole, whole_special = [], 0  # whole documents': no drop, image or image failure
        for entry, text_tokens, special_tokens, length in zip(
            entries, texts.tolist(), specials.tolist(), lengths.tolist()
        ):
            meta = entry.get("meta")
            if (
                entry.get("pieces", 1) <= 1
                and "dropped" not in entry
                and not entry.get("images")
                and not (meta and meta.get("image_failures"))
            ):
                whole.append(text_tokens)
                whole_special += special_tokens
                continue
            self._add_piece(_segment_values(entry, length, 0, special_tokens, 0, False, ids))
        self.pieces += len(whole)
        self.text_tokens += sum(whole)
        self.special_tokens += whole_special
        self.documents += len(whole)
        self.text_tokens_per_document.update(whole)
        if whole:
            self.images_per_document[0] += len(whole)
        return self

    def _document(self, text_tokens: int, images: int, split: bool) -> None:
        self.documents += 1
        self.split_documents += int(split)
        self.text_tokens_per_document[text_tokens] += 1
        self.images_per_document[images] += 1

    def _partial(self, doc_id: str, pieces: int, seen: set, text_tokens: int, images: int) -> None:
        entry = self.partial.setdefault(doc_id, [pieces, set(), 0, 0])
        entry[1] |= seen
        entry[2] += text_tokens
        entry[3] += images
        if len(entry[1]) >= entry[0]:
            del self.partial[doc_id]
            self._document(entry[2], entry[3], split=True)

    def merge(self, other: "StatsAccumulator") -> "StatsAccumulator":
        for name in (
            "sequences",
            "tokens",
            "padding_tokens",
            "text_tokens",
            "image_tokens",
            "special_tokens",
            "images",
            "pieces",
            "documents",
            "split_documents",
            "images_with_text",
            "pieces_ending_in_image",
            "dropped_pieces",
            "dropped_tokens",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in (
            "text_tokens_per_document",
            "images_per_document",
            "documents_per_sequence",
            "image_failures",
        ):
            getattr(self, name).update(getattr(other, name))
        for name, counts in other.scores.items():
            self.scores.setdefault(name, collections.Counter()).update(counts)
        for doc_id, (pieces, seen, text_tokens, images) in other.partial.items():
            self._partial(doc_id, pieces, seen, text_tokens, images)
        return self

    def finish_partial(self) -> int:
        """Count split documents whose pieces were not all seen (stats of one
        shard of a build) with the pieces that were; returns how many."""
        incomplete = len(self.partial)
        for doc_id in sorted(self.partial):
            _, _, text_tokens, images = self.partial[doc_id]
            self._document(text_tokens, images, split=True)
        self.partial = {}
        return incomplete


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _reasons(counts: Mapping[str, int], total: int) -> list[dict[str, Any]]:
    return [
        {"reason": reason, "count": int(count), "share": _ratio(count, total)}
        for reason, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if count
    ]


def funnel_section(
    funnel: Mapping[str, Any] | None, images_removed: Mapping[str, int] | None = None
) -> dict[str, Any] | None:
    """The funnel of ``stats.json``, with the images removed from kept records
    (``--min-sim``, ``--max-images``, CLIP: the manifest's ``images_removed``)
    where there are any (a build without keeps the bytes it had before).

    >>> section = funnel_section({"unit": "document", "input": 4, "kept": 3,
    ...     "dropped": {"no_images": 1}}, {"clip_similarity_below_min": 2})
    >>> section["dropped"], section["images_removed"]
    ([{'reason': 'no_images', 'count': 1, 'share': 0.25}], [{'reason': 'clip_similarity_below_min', 'count': 2}])
    """  # noqa: E501
    if not funnel:
        return None
    total = int(funnel["input"])
    removed = sorted((images_removed or {}).items(), key=lambda kv: (-kv[1], kv[0]))
    section = {
        "unit": funnel.get("unit"),
        "input": total,
        "kept": int(funnel["kept"]),
        "kept_share": _ratio(int(funnel["kept"]), total),
        "dropped": _reasons(funnel.get("dropped", {}), total),
    }
    if any(n for _, n in removed):
        section["images_removed"] = [{"reason": r, "count": int(n)} for r, n in removed if n]
    return section


# The image dedup stages (corpora/stages: pipelines/dedup_images.py's steps)
IMAGE_DEDUP_STAGES = (
    "duplicate_image_urls",
    "duplicate_images",
    "near_duplicate_images",
    "clip_near_duplicates",
)


def dedup_section(manifest: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the image dedup stages removed, from their reports in the
    manifest's ``stages``: images removed by rule, the most repeated images
    (thumbnails where the stage had the bytes), the largest near-duplicate
    clusters (by pHash, and by CLIP embedding with ``--near-dup-clip-sim``)
    and the decontamination sources. None when no rule removed
    anything and nothing was decontaminated (the stats of a build without
    duplicates stay as they were).

    >>> manifest = {"stages": [
    ...     {"name": "duplicate_images", "report": {"removed": {"duplicate_image": 2},
    ...      "most_repeated": [{"sha256": "ab", "documents": 3}]}},
    ...     {"name": "near_duplicate_images", "report": {"removed": {}, "radius": 12,
    ...      "clusters": 0, "largest_clusters": []}}]}
    >>> section = dedup_section(manifest)
    >>> section["removed"], section["most_repeated"]
    ([{'stage': 'duplicate_images', 'reason': 'duplicate_image', 'count': 2}], [{'sha256': 'ab', 'documents': 3}])
    >>> dedup_section({"stages": [{"name": "duplicate_images", "report": {"removed": {}}}]}) is None
    True
    """  # noqa: E501
    reports = {
        entry.get("name"): entry.get("report") or {}
        for entry in manifest.get("stages") or ()
        if isinstance(entry, Mapping) and entry.get("name") in IMAGE_DEDUP_STAGES
    }
    removed = [
        {"stage": name, "reason": reason, "count": int(count)}
        for name in IMAGE_DEDUP_STAGES
        for reason, count in sorted((reports.get(name, {}).get("removed") or {}).items())
        if count
    ]
    near = reports.get("near_duplicate_images", {})
    sources = near.get("decontaminate") or []
    if not removed and not sources:
        return None
    repeated = []
    for name in IMAGE_DEDUP_STAGES[:2]:
        repeated += reports.get(name, {}).get("most_repeated") or []
    section = {
        "removed": removed,
        "most_repeated": repeated,
        "near_radius": near.get("radius"),
        "clusters": near.get("clusters"),
        "largest_clusters": near.get("largest_clusters") or [],
        "decontaminate": sources,
    }
    by_clip = reports.get("clip_near_duplicates")
    if by_clip is not None:  # only with --near-dup-clip-sim: other builds' stats keep their bytes
        section["clip_sim"] = by_clip.get("clip_sim")
        section["clip_cluster_count"] = by_clip.get("clusters")
        section["clip_clusters"] = by_clip.get("largest_clusters") or []
    return section


def fetch_drops(manifest: Mapping[str, Any]) -> collections.Counter:
    """Records the fetch stage dropped, by reason: pairs that lost their image.

    The fetch stage's own count (the manifest's ``images.failed``) says which
    drops were fetches: a filter before any download may give a drop the same
    name (coyo's ``image_too_small`` on the size its parquet declares). A
    document corpus drops no record for a failed image. Without that count (a
    manifest that has none), every funnel drop with a fetch reason is one.
    """
    dropped = (manifest.get("funnel") or {}).get("dropped", {})
    if "images" not in manifest:
        return collections.Counter(
            {reason: int(n) for reason, n in dropped.items() if is_fetch_reason(reason)}
        )
    spec = catalog.CORPORA.get(manifest.get("corpus"))
    if spec is not None and not spec.drop_on_image_failure:
        return collections.Counter()
    return collections.Counter(
        {reason: int(n) for reason, n in manifest["images"].get("failed", {}).items()}
    )


def image_fetch_section(acc: StatsAccumulator, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Fetch outcomes per image: images in the shards succeeded; a failure is
    an image removed from its document (``meta.image_failures``) or a record
    the fetch stage dropped (:func:`fetch_drops`: one image each)."""
    failures = collections.Counter(acc.image_failures) + fetch_drops(manifest)
    failed = sum(failures.values())
    attempted = acc.images + failed
    section = {
        "attempted": attempted,
        "fetched": acc.images,
        "failed": failed,
        "success_rate": _ratio(acc.images, attempted),
        "failures": _reasons(failures, attempted),
    }
    if "images" in manifest:  # the build's own fetch accounting, when it keeps one
        section["manifest"] = manifest["images"]
    return section


def finalize(
    acc: StatsAccumulator, manifest: Mapping[str, Any], whole_build: bool = True
) -> dict[str, Any]:
    """The ``stats.json`` document for a build with ``manifest``.

    Statistics of only some of a build's shards (``whole_build=False``) leave
    out the funnel and the image fetch outcomes, which belong to the build.
    """
    incomplete = acc.finish_partial()
    corpus = manifest.get("corpus")
    reference = VILA_TABLE2.get(corpus)
    return {
        "stats_version": STATS_VERSION,
        "corpus": corpus,
        "seq_len": manifest.get("seq_len"),
        "tokens_per_image": manifest.get("tokens_per_image"),
        "totals": {
            "documents": acc.documents,
            "images": acc.images,
            "tokens": acc.tokens,
            "text_tokens": acc.text_tokens,
            "image_tokens": acc.image_tokens,
            "special_tokens": acc.special_tokens,
            "padding_tokens": acc.padding_tokens,
        },
        "text_tokens_per_image": _ratio(acc.text_tokens, acc.images),
        "images_per_document": distribution(acc.images_per_document),
        "text_tokens_per_document": distribution(acc.text_tokens_per_document),
        "packing": {
            "sequences": acc.sequences,
            "pieces": acc.pieces,
            "documents_per_sequence": distribution(acc.documents_per_sequence),
            "non_padding_fraction": _ratio(acc.tokens - acc.padding_tokens, acc.tokens),
            "split_documents": acc.split_documents,
            "split_fraction": _ratio(acc.split_documents, acc.documents),
            "incomplete_documents": incomplete,
            "images_with_text_fraction": _ratio(acc.images_with_text, acc.images),
            "pieces_ending_in_image": acc.pieces_ending_in_image,
            "short_pieces_dropped": {"pieces": acc.dropped_pieces, "tokens": acc.dropped_tokens},
        },
        "scope": "build" if whole_build else "shards",
        "funnel": (
            funnel_section(manifest.get("funnel"), manifest.get("images_removed"))
            if whole_build
            else None
        ),
        "scores": {
            name: distribution(counts, SCORE_SCALE) for name, counts in sorted(acc.scores.items())
        },
        "image_fetch": image_fetch_section(acc, manifest) if whole_build else None,
        "reference": {"source": VILA_SOURCE, "values": reference} if reference else None,
        **_dedup_entry(manifest, whole_build),
    }


def _dedup_entry(manifest: Mapping[str, Any], whole_build: bool) -> dict[str, Any]:
    section = dedup_section(manifest) if whole_build else None
    return {"dedup": section} if section is not None else {}


# ── from finished shards ─────────────────────────────────────────────────────


def stats_from_shards(
    path: str, progress: Callable[[int, int, str], None] | None = None, verify: bool = True
) -> dict[str, Any]:
    """Recompute a build's statistics from its finished shards: ``path`` is a
    build directory, its ``manifest.json`` or one shard (see
    :func:`corpora.reader.locate`, whose :class:`~corpora.reader.BuildInputError`
    this raises, also for a shard that cannot be read). With ``verify`` every
    shard is first checked against its manifest entry (size and sha256), so a
    shard cut short is refused rather than counted."""
    build = reader.locate(path, verify=verify)
    ids = TokenIds.from_manifest(build.manifest)
    acc = StatsAccumulator()
    for number, shard in enumerate(build.shards, 1):
        if progress is not None:
            progress(number, len(build.shards), shard)
        try:
            for sample in reader.iter_samples([shard], decode_images=False):
                acc.add(
                    sequence_values(sample.input_ids, sample.segment_ids, sample.documents, ids)
                )
        except (tarfile.TarError, KeyError, ValueError, OSError) as exc:
            raise reader.BuildInputError(f"unreadable shard {shard}: {exc}") from None
    return finalize(acc, build.manifest, build.whole)


def stats_json(stats: Mapping[str, Any]) -> str:
    return json.dumps(stats, indent=2, sort_keys=True) + "\n"
