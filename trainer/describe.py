"""Readable views of batches and of a blend's mix (``corpora train data``).

A row of a batch is shown by document: which build and sample it came from,
where each document's tokens and image slots lie, where its loss falls (VILA)
or where the encoder/decoder cut falls (PrefixLM), and which image fills
which slot of ``images``. Positions are inclusive ranges:

    >>> ranges([0, 1, 2, 5, 7, 8])
    '0-2, 5, 7-8'
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from corpora import reader
from trainer.blend import DataSpec, Source
from trainer.features import IGNORE, document_runs


def ranges(indices: Sequence[int] | np.ndarray) -> str:
    """Sorted positions as inclusive ranges; ``-`` when there are none."""
    values = [int(i) for i in indices]
    if not values:
        return "-"
    out, start, last = [], values[0], values[0]
    for value in values[1:] + [None]:  # type: ignore[list-item]
        if value is not None and value == last + 1:
            last = value
            continue
        out.append(str(start) if start == last else f"{start}-{last}")
        if value is not None:
            start = last = value
    return ", ".join(out)


def describe_spec(spec: DataSpec, sources: Sequence[Source], unit: str, image_size) -> str:
    """The blend's shared settings and each build, with the weights."""
    if spec.image_token_id is None:
        images = "text only"
    else:
        h, w = spec.image_size or (0, 0)
        images = (
            f"image token {spec.image_token_id} x {spec.tokens_per_image} slots, "
            f"stored {h}x{w}, batched {image_size[0]}x{image_size[1]}, "
            f"at most {spec.max_images} a sample"
        )
    lines = [
        f"Blend of {len(sources)} build(s) by {unit}: seq_len {spec.seq_len}, "
        f"pad_id {spec.pad_id}, vocab {spec.vocab_size}, {images}"
    ]
    for source in sources:
        totals = source.manifest["totals"]
        lines.append(
            f"  weight {source.weight:g}  {source.location}  ({source.manifest['corpus']}: "
            f"{len(source.shards)} shards, {totals['samples']} samples, {totals['images']} images)"
        )
    return "\n".join(lines)


def describe_batch(
    number: int,
    batch: dict[str, np.ndarray],
    picks: Sequence[tuple[int, reader.Sample]],
    spec: DataSpec,
    names: Sequence[str],
) -> str:
    """One batch, row by row (see the module docstring)."""
    real = int((batch["segment_ids"] > 0).sum())
    lines = [
        f"Batch {number}: {real} of {batch['segment_ids'].size} tokens real, "
        f"{int(batch['image_mask'].sum())} of {batch['image_mask'].size} image slots filled"
    ]
    if number == 0:  # the shapes never change
        shapes = [f"{k} {list(v.shape)} {v.dtype}" for k, v in batch.items()]
        lines += ["  " + ", ".join(shapes[i : i + 3]) for i in range(0, len(shapes), 3)]
    for row, (source, sample) in enumerate(picks):
        lines.append(f"  row {row}: {sample.key} from {names[source]}")
        lines += _describe_row(batch, row, sample, spec)
    return "\n".join(lines)


def _describe_row(
    batch: dict[str, np.ndarray], row: int, sample: reader.Sample, spec: DataSpec
) -> list[str]:
    ids, segments = batch["input_ids"][row], batch["segment_ids"][row]
    entries = {entry.get("segment"): entry for entry in sample.documents}
    lines: list[str] = []
    image = 0
    for segment, start, end in document_runs(segments):
        entry: dict[str, Any] = entries.get(segment, {})
        slots = (
            np.flatnonzero(ids[start:end] == spec.image_token_id) + start
            if spec.image_token_id is not None
            else np.array([], int)
        )
        count = len(slots) // spec.tokens_per_image if spec.tokens_per_image else 0
        held = ""
        if count:
            which = f"image {image}" if count == 1 else f"images {image}-{image + count - 1}"
            held = f", {which} at {ranges(slots)}"
        image += count
        lines.append(f"    doc {segment} {entry.get('id', '?')}: tokens {start}-{end - 1}{held}")
        if "labels" in batch:
            targets = np.flatnonzero(batch["labels"][row][start:end] != IGNORE) + start
            lines.append(f"      labels (next text token) at {ranges(targets)}")
        if "encoder_segment_ids" in batch:
            prefix = int((batch["encoder_segment_ids"][row] == segment).sum())
            rest = int((batch["decoder_segment_ids"][row] == segment).sum())
            cut = start + prefix
            encoder = f"encoder {ranges(range(start, cut))} ({prefix} tokens, bidirectional)"
            decoder = f"decoder {ranges(range(cut, end))} ({rest} target{'s' * (rest != 1)})"
            lines.append(f"      {encoder}, {decoder if rest else 'decoder: nothing'}")
    padding = np.flatnonzero(segments == 0)
    if padding.size:
        lines.append(f"    padding {ranges(padding)}")
    described = []
    stored = [image for entry in sorted(sample.documents, key=lambda e: e.get("segment", 0))
              for image in entry.get("images", [])]  # fmt: skip
    for slot, filled in enumerate(batch["image_mask"][row]):
        if filled:
            name = stored[slot]["url"].rsplit("/", 1)[-1] if slot < len(stored) else "?"
            described.append(f"[{slot}] {name}")
        else:
            described.append(f"[{slot}] empty")
    if described:
        lines.append("    images: " + " ".join(described))
    return lines


def describe_mix(
    counts: dict[str, dict[str, int]], sources: Sequence[Source], unit: str, samples: int
) -> str:
    """The measured mix: each build's share in ``unit`` against the asked
    one, then its share and count in every unit (examples are samples).

    >>> from trainer.blend import Source
    >>> sources = [Source("pairs", 8.0, {}, ()), Source("c4", 1.0, {}, ())]
    >>> counts = {"pairs": {"samples": 3, "documents": 80, "images": 80, "tokens": 1800},
    ...           "c4": {"samples": 7, "documents": 10, "images": 0, "tokens": 4400}}
    >>> print(describe_mix(counts, sources, "documents", 10))
    Mix over 10 samples (by documents):
      build                                     share   asked
      pairs                                     88.9%   88.9%
      c4                                        11.1%   11.1%
    The same samples in every unit (share, count):
      build                                    samples documents    images    tokens
      pairs                                      30.0%     88.9%    100.0%     29.0%
                                                     3        80        80      1800
      c4                                         70.0%     11.1%      0.0%     71.0%
                                                     7        10         0      4400
    """
    keys = {"examples": "samples", "documents": "documents", "images": "images", "tokens": "tokens"}
    totals = {key: sum(counts[s.location][key] for s in sources) for key in keys.values()}
    total_weight = sum(s.weight for s in sources)

    def share(location: str, key: str) -> float:
        return counts[location][key] / totals[key] if totals[key] else 0.0

    lines = [
        f"Mix over {samples} samples (by {unit}):",
        f"  {'build':40} {'share':>6} {'asked':>7}",
    ]
    for source in sources:
        lines.append(
            f"  {source.location[-40:]:40} {share(source.location, keys[unit]):>6.1%} "
            f"{source.weight / total_weight:>7.1%}"
        )
    lines += [
        "The same samples in every unit (share, count):",
        f"  {'build':38} " + " ".join(f"{key:>9}" for key in keys.values()),
    ]
    for source in sources:
        lines.append(
            f"  {source.location[-38:]:38} "
            + " ".join(f"{share(source.location, key):>9.1%}" for key in keys.values())
        )
        lines.append(
            f"  {'':38} " + " ".join(f"{counts[source.location][key]:>9}" for key in keys.values())
        )
    return "\n".join(lines)


STREAM_BATCHES = 20  # batches over which `corpora train data` measures PrefixLM's padding


def stream_fill(batches) -> dict[str, tuple[int, int]]:
    """``(real, all)`` positions of PrefixLM's encoder and decoder streams over ``batches``.

    >>> batch = {"encoder_segment_ids": np.array([[1, 1, 2, 0]]),
    ...          "decoder_segment_ids": np.array([[1, 2, 0, 0]])}
    >>> stream_fill([batch, batch])
    {'encoder': (6, 8), 'decoder': (4, 8)}
    """
    fill = {}
    batches = list(batches)
    for stream in ("encoder", "decoder"):
        segments = [np.asarray(batch[f"{stream}_segment_ids"]) for batch in batches]
        fill[stream] = (
            sum(int((s > 0).sum()) for s in segments),
            sum(int(s.size) for s in segments),
        )
    return fill


def suggest_lengths(prefix_tokens: int, target_tokens: int, seq_len: int) -> tuple[int, int]:
    """Encoder and decoder lengths that share ``seq_len`` as the documents' prefixes and
    targets share their tokens (the encoder's a multiple of 8), so neither stream pads much
    when packed.

    >>> suggest_lengths(98388, 80030, 640)  # pairs + C4 8:1 by documents, the tests' builds
    (352, 288)
    """
    share = prefix_tokens / max(1, prefix_tokens + target_tokens)
    encoder = min(seq_len - 8, max(8, 8 * round(seq_len * share / 8)))
    return encoder, seq_len - encoder


def describe_streams(loader, count: int = STREAM_BATCHES) -> str:
    """PrefixLM's two streams over ``count`` batches of ``loader``'s first worker: how much
    of each is real one sample a row, then packed to the loader's ``encoder_len`` and
    ``decoder_len`` (unset: to :func:`suggest_lengths` of the unpacked batches)."""
    import dataclasses

    from trainer.loader import Loader

    def measure(**lengths) -> dict[str, tuple[int, int]]:
        config = dataclasses.replace(loader.config, num_workers=0, **lengths)
        one = Loader(config, rank=loader.rank, world_size=loader.world_size)
        return stream_fill(batch for _, batch in zip(range(count), one))

    def line(fill) -> str:
        return ", ".join(f"{s} {fill[s][0] / max(1, fill[s][1]):.1%} real" for s in fill)

    unpacked = measure(encoder_len=None, decoder_len=None)
    seq_len = loader.spec.seq_len
    lines = [
        f"PrefixLM streams over {count} batches:",
        f"  one sample a row ({seq_len} + {seq_len}): {line(unpacked)}",
    ]
    encoder_len, decoder_len = loader.config.encoder_len, loader.config.decoder_len
    how = "packed to"
    if encoder_len is None:
        encoder_len, decoder_len = suggest_lengths(
            unpacked["encoder"][0], unpacked["decoder"][0], seq_len
        )
        how = "packed to the suggested"
    packed = measure(encoder_len=encoder_len, decoder_len=decoder_len)
    lines.append(f"  {how} --encoder-len {encoder_len} --decoder-len {decoder_len}: {line(packed)}")
    return "\n".join(lines)
