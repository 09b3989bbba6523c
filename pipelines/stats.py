"""Statistics during the build: no second pass over the shards.

Each packed sequence is reduced to its :class:`corpora.stats.figures.SequenceValues`
on the way to its shard (a text build's where it is packed, a group's summed
into one :class:`~corpora.stats.figures.StatsAccumulator`), a CombineFn
merges them (integer counts, so the order Beam merges in does not matter),
and once the manifest is written, ``stats.json`` is written beside it from
the combined counts and the funnel.
Beam counters and distributions give live figures in a runner's UI.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from corpora.stats import figures as stats
from corpora.tokens.tokenizer import TokenizerInfo
from pipelines import storage
from pipelines.transforms import NAMESPACE


def token_ids(info: TokenizerInfo) -> stats.TokenIds:
    return stats.TokenIds(info.image_token_id, info.bos_id, info.eos_id, info.tokens_per_image)


class SequenceStats(beam.DoFn):
    """Live Beam metrics from each sequence's statistics values (computed by
    ``WriteShard`` as it writes the sequence)."""

    def setup(self) -> None:
        self._text = Metrics.distribution(NAMESPACE, "stats.text_tokens_per_piece")
        self._images = Metrics.distribution(NAMESPACE, "stats.images_per_piece")
        self._padding = Metrics.distribution(NAMESPACE, "stats.padding_tokens_per_sequence")
        self._text_tokens = Metrics.counter(NAMESPACE, "stats.text_tokens")
        self._image_tokens = Metrics.counter(NAMESPACE, "stats.image_tokens")

    def process(self, values: stats.SequenceValues | stats.StatsAccumulator):
        if isinstance(values, stats.StatsAccumulator):  # a packing group's, summed
            self._text_tokens.inc(values.text_tokens)
            self._image_tokens.inc(values.image_tokens)
            yield values
            return
        self._padding.update(values.padding_tokens)
        for piece in values.pieces:
            self._text.update(piece.text_tokens)
            self._images.update(piece.images)
            self._text_tokens.inc(piece.text_tokens)
            self._image_tokens.inc(piece.image_tokens)
        yield values


class CombineStats(beam.CombineFn):
    def create_accumulator(self) -> stats.StatsAccumulator:
        return stats.StatsAccumulator()

    def add_input(
        self,
        accumulator: stats.StatsAccumulator,
        values: stats.SequenceValues | stats.StatsAccumulator,
    ):
        if isinstance(values, stats.StatsAccumulator):  # a text packing group's sequences
            return accumulator.merge(values)
        return accumulator.add(values)

    def merge_accumulators(self, accumulators):
        accumulators = iter(accumulators)
        merged = next(accumulators)
        for other in accumulators:
            merged.merge(other)
        return merged

    def extract_output(self, accumulator: stats.StatsAccumulator) -> stats.StatsAccumulator:
        return accumulator


def write_stats(
    manifest: dict[str, Any], accumulator: stats.StatsAccumulator, output: str
) -> dict[str, Any]:
    """Write ``stats.json`` beside the manifest, whole or not at all."""
    document = stats.finalize(accumulator, manifest)
    storage.write_atomically(
        FileSystems.join(output, stats.STATS), stats.stats_json(document).encode("utf-8")
    )
    return document


class WriteStats(beam.PTransform):
    """``manifest | WriteStats(sequence_stats, output)``: the build's ``stats.json``."""

    def __init__(self, sequence_stats: beam.PCollection, output: str):
        super().__init__()
        self._sequence_stats = sequence_stats
        self._output = output

    def expand(self, manifest: beam.PCollection) -> beam.PCollection:
        combined = (
            self._sequence_stats
            | "SequenceStats" >> beam.ParDo(SequenceStats())
            | "CombineStats" >> beam.CombineGlobally(CombineStats())
        )
        return manifest | "WriteStatsJson" >> beam.Map(
            write_stats, accumulator=beam.pvalue.AsSingleton(combined), output=self._output
        )
