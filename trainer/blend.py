"""Blends: several builds mixed by weight, their manifests checked first.

The seed papers train on mixtures: VILA on MMC4-core and COYO at about 1:1
**by images**, SimVLM on image-text pairs and C4 text at 8:1 **by examples**.
A blend is a list of ``(build, weight)`` and a unit: ``examples`` (packed
samples), ``documents`` (the documents they hold: each packed segment, the
piece of a split document included), ``images`` or ``tokens`` (non-padding
tokens). SimVLM's 8:1 is by documents: a packed sample of pairs holds many
more documents than a packed sample of C4 text, so 8:1 by samples is about
12:1 by documents on a pairs + C4 blend.

**The mix is exact, not sampled.** Each consumer (loader worker) takes the
next sample from the source that is furthest behind its share: the one with
the least ``delivered / weight``, ties to the earlier source. Every prefix of
the stream is then within one sample's worth of the asked ratio, where
drawing sources at random would be off by several percent over a few
thousand samples. By examples at 2:1:

    >>> mix, picks = Mix(weights=[2.0, 1.0]), []
    >>> for _ in range(6):
    ...     source = mix.pick()
    ...     mix.add(source, 1)  # by images or tokens: what the sample held
    ...     picks.append(source)
    >>> picks
    [0, 1, 0, 0, 1, 0]

**Cross-checks.** Before the first batch, :func:`check_blend` compares the
builds' manifests: ``seq_len``, ``pad_id`` and the tokenizer's sha256 must
agree among all of them; ``tokens_per_image``, ``image_token_id`` and
``image_size`` among the builds that hold images (a text-only C4 build blends
with any of them). A mismatch raises :class:`BlendError`, one line naming the
two builds and the field. The result is the :class:`DataSpec` a model is
built from.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator, Sequence

import fsspec

from corpora import reader
from corpora.dedup.index import INDEX, Seen, overlap, read_index
from trainer.config import WEIGHT_UNITS
from trainer.stream import DataError, Shard, ShardStream

FORMAT = "corpora-shards/1"
UNITS = WEIGHT_UNITS


class BlendError(DataError):
    """The builds of a blend (or a build and the model) disagree on a setting."""


@dataclasses.dataclass(frozen=True)
class DataSpec:
    """What the model must agree with, derived from the blend's manifests."""

    seq_len: int
    pad_id: int
    image_token_id: int | None  # None for a text-only blend
    tokens_per_image: int
    image_size: tuple[int, int] | None  # (H, W) the builds resized images to; None if text-only
    max_images: int  # the most images a sample holds, over the builds
    tokenizer_sha256: str
    vocab_size: int | None  # the tokenizer's piece count, when the manifest says so

    def check_model(self, name: str = "the model", **settings: Any) -> None:
        """Raise :class:`BlendError` where the model's ``settings`` (any of
        this spec's fields) differ from the data's.

        >>> spec = DataSpec(64, 0, 300, 8, (32, 32), 2, "ab", 300)
        >>> spec.check_model(seq_len=64, tokens_per_image=8)
        >>> spec.check_model("prefixlm", seq_len=128)
        Traceback (most recent call last):
        ...
        trainer.blend.BlendError: prefixlm has seq_len 128, the blend's builds have 64
        """
        for field, value in settings.items():
            if not hasattr(self, field):
                raise TypeError(f"DataSpec has no field {field}")
            ours = getattr(self, field)
            if value is not None and ours is not None and value != ours:
                raise BlendError(f"{name} has {field} {value}, the blend's builds have {ours}")


@dataclasses.dataclass(frozen=True)
class Source:
    """One build of a blend: where it is, its weight, its manifest, its shards."""

    location: str
    weight: float
    manifest: dict[str, Any] = dataclasses.field(repr=False)
    shards: tuple[Shard, ...] = dataclasses.field(repr=False)

    @property
    def holds_images(self) -> bool:
        return int(self.manifest.get("max_images_per_sample") or 0) > 0

    @property
    def name(self) -> str:
        return self.location


def _dirname(url: str) -> str:
    return url.rsplit("/", 1)[0] if "://" in url else os.path.dirname(url) or "."


def _basename(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def _load(location: str, base: str) -> dict[str, Any]:
    try:
        manifest = reader.load_manifest(base)
    except FileNotFoundError:
        raise DataError(
            f"{location}: no manifest.json in {base} (point at a build made by corpora build)"
        ) from None
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{location}: cannot read the manifest in {base} ({first})") from None
    if manifest.get("format") != FORMAT:
        raise DataError(f"{location}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


def resolve_source(location: str, weight: float = 1.0) -> Source:
    """A build directory (local or a URL), its ``manifest.json``, or shard
    URLs / brace patterns inside a build (their manifest is the one beside them)."""
    if not 0 < weight < float("inf"):
        raise BlendError(f"{location}: weight must be a positive number, got {weight}")
    if location.endswith(".tar") or "{" in location:
        urls = reader.expand_urls(location)
        base = _dirname(urls[0])
        manifest = _load(location, base)
        entries = {entry["path"]: entry for entry in manifest["shards"]}
        shards = []
        for url in urls:
            if _dirname(url) != base:
                raise DataError(f"{location}: the shards of one source must share a directory")
            entry = entries.get(_basename(url))
            if entry is None:
                raise DataError(
                    f"{location}: {_basename(url)} is not a shard of the build in {base}"
                )
            shards.append(Shard.of(url, entry))
    else:
        base = _dirname(location) if location.endswith(".json") else location.rstrip("/")
        manifest = _load(location, location if location.endswith(".json") else base)
        shards = [
            Shard.of(url, entry)
            for url, entry in zip(reader.shard_urls(base, manifest), manifest["shards"])
        ]
    if not shards:
        raise DataError(f"{location}: the build holds no shards")
    return Source(location, float(weight), manifest, tuple(shards))


def _image_size(manifest: dict[str, Any]) -> tuple[int, int]:
    size = manifest["image_size"]
    return (int(size), int(size)) if isinstance(size, int) else (int(size[0]), int(size[1]))


def _fields(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "seq_len": manifest["seq_len"],
        "pad_id": manifest["pad_id"],
        "tokenizer sha256": manifest["tokenizer"]["sha256"],
        "tokens_per_image": manifest["tokens_per_image"],
        "image_token_id": manifest["image_token_id"],
        "image_size": _image_size(manifest),
    }


def check_blend(sources: Sequence[Source], unit: str = "examples") -> DataSpec:
    """Cross-check the builds of a blend; their :class:`DataSpec`."""
    if not sources:
        raise BlendError("a blend needs at least one build")
    if unit not in UNITS:
        raise BlendError(f"weight unit must be one of {', '.join(UNITS)}, got {unit!r}")
    first = sources[0]
    for other in sources[1:]:
        a, b = _fields(first.manifest), _fields(other.manifest)
        for field in ("seq_len", "pad_id", "tokenizer sha256"):
            if a[field] != b[field]:
                raise BlendError(
                    f"{first.location} and {other.location} differ in {field}: "
                    f"{a[field]} vs {b[field]}"
                )
    with_images = [s for s in sources if s.holds_images]
    for other in with_images[1:]:
        a, b = _fields(with_images[0].manifest), _fields(other.manifest)
        for field in ("tokens_per_image", "image_token_id", "image_size"):
            if a[field] != b[field]:
                raise BlendError(
                    f"{with_images[0].location} and {other.location} differ in {field}: "
                    f"{a[field]} vs {b[field]}"
                )
    if unit == "images":
        for source in sources:
            if not source.holds_images:
                raise BlendError(
                    f"{source.location} holds no images: it cannot be weighted by images"
                )
    reference = (with_images or list(sources))[0].manifest
    return DataSpec(
        seq_len=int(first.manifest["seq_len"]),
        pad_id=int(first.manifest["pad_id"]),
        image_token_id=int(reference["image_token_id"]) if with_images else None,
        tokens_per_image=int(reference["tokens_per_image"]),
        image_size=_image_size(reference) if with_images else None,
        max_images=max(int(s.manifest.get("max_images_per_sample") or 0) for s in sources),
        tokenizer_sha256=first.manifest["tokenizer"]["sha256"],
        vocab_size=_vocab_size(first.manifest),
    )


def blend_overlaps(sources: Sequence[Source]) -> list[str]:
    """One line for each two builds of a blend that kept the same images or texts,
    read from their hash indexes (``dedup_index.parquet``, corpora.dedup.index);
    a build made before the index (none beside its manifest) is left out. Build
    the second with ``--exclude-seen FIRST`` so a blend shares nothing."""
    indexes = []
    for source in sources:
        seen = _read_seen(_dirname(source.shards[0].url))
        if seen is not None:
            indexes.append((source.location, seen))
    lines = []
    for i, (one, one_seen) in enumerate(indexes):
        for two, two_seen in indexes[i + 1 :]:
            shared = overlap(one_seen, two_seen)
            if any(shared.values()):
                counts = ", ".join(f"{n} {kind}" for kind, n in shared.items() if n)
                lines.append(
                    f"{one} and {two} overlap: {counts} kept by both "
                    f"(build one with --exclude-seen the other)"
                )
    return lines


def _read_seen(base: str) -> Seen | None:
    path = f"{base.rstrip('/')}/{INDEX}"
    try:
        with fsspec.open(path, "rb") as stream:
            return Seen.from_rows(read_index(stream))
    except FileNotFoundError:
        return None


def _vocab_size(manifest: dict[str, Any]) -> int | None:
    if manifest.get("vocab_size") is not None:
        return int(manifest["vocab_size"])
    path = manifest.get("tokenizer", {}).get("path")
    if path and os.path.isfile(path):
        import sentencepiece as spm

        return int(spm.SentencePieceProcessor(model_file=path).get_piece_size())
    return None


def unit_mass(sample: reader.Sample, unit: str) -> int:
    """How much of ``unit`` a sample carries."""
    if unit == "images":
        return len(sample.images)
    if unit == "tokens":
        return sample.tokens
    if unit == "documents":
        return len(sample.documents)
    return 1


def empty_counts() -> dict[str, int]:
    """What a blend counts per source, in every unit (``examples`` as ``samples``)."""
    return {"samples": 0, "documents": 0, "images": 0, "tokens": 0}


def sample_counts(sample: reader.Sample) -> dict[str, int]:
    return {
        "samples": 1,
        "documents": len(sample.documents),
        "images": len(sample.images),
        "tokens": sample.tokens,
    }


class Mix:
    """The exact weighted interleave: :meth:`pick` the source furthest behind,
    then :meth:`add` what its sample carried."""

    def __init__(self, weights: Sequence[float]) -> None:
        self.weights = [float(w) for w in weights]
        self.delivered = [0] * len(self.weights)

    def pick(self) -> int:
        return min(range(len(self.weights)), key=lambda i: (self.delivered[i] / self.weights[i], i))

    def add(self, source: int, mass: int) -> None:
        self.delivered[source] += mass


# A source picked this many times in a row without adding to its unit would be picked forever.
MAX_EMPTY_PICKS = 10_000


class Blend:
    """The samples of several :class:`~trainer.stream.ShardStream`\\ s, mixed
    by weight in ``unit``; yields ``(source index, sample)``."""

    def __init__(
        self,
        streams: Sequence[ShardStream],
        weights: Sequence[float],
        unit: str = "examples",
        names: Sequence[str] | None = None,
    ) -> None:
        if unit not in UNITS:
            raise BlendError(f"weight unit must be one of {', '.join(UNITS)}, got {unit!r}")
        self.streams = list(streams)
        self.unit = unit
        self.names = list(names) if names is not None else [s.name for s in self.streams]
        self.mix = Mix(weights)
        self.counts = [empty_counts() for _ in self.streams]
        self._empty = [0] * len(self.streams)

    def __iter__(self) -> Iterator[tuple[int, reader.Sample]]:
        return self

    def __next__(self) -> tuple[int, reader.Sample]:
        source = self.mix.pick()
        sample = next(self.streams[source])
        mass = unit_mass(sample, self.unit)
        self.mix.add(source, mass)
        self._empty[source] = 0 if mass else self._empty[source] + 1
        if self._empty[source] >= MAX_EMPTY_PICKS:
            raise DataError(
                f"{self.names[source]}: {MAX_EMPTY_PICKS} samples in a row hold no {self.unit}"
            )
        for key, value in sample_counts(sample).items():
            self.counts[source][key] += value
        return source, sample

    def retract(self, source: int, sample: reader.Sample) -> None:
        """Take back a sample the batcher could not use, so that the mix and
        the counts hold what the batches hold."""
        self.mix.add(source, -unit_mass(sample, self.unit))
        for key, value in sample_counts(sample).items():
            self.counts[source][key] -= value

    def close(self) -> None:
        for stream in self.streams:
            stream.close()

    def state_dict(self) -> dict[str, Any]:
        return {
            "delivered": list(self.mix.delivered),
            "counts": [dict(c) for c in self.counts],
            "empty": list(self._empty),
            "streams": [s.state_dict() for s in self.streams],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["streams"]) != len(self.streams):
            raise ValueError(
                f"the state has {len(state['streams'])} sources, the blend {len(self.streams)}"
            )
        self.mix.delivered = [int(d) for d in state["delivered"]]
        self.counts = [{**empty_counts(), **c} for c in state["counts"]]
        self._empty = [int(e) for e in state["empty"]]
        for stream, stream_state in zip(self.streams, state["streams"]):
            stream.load_state_dict(stream_state)
