"""The image store's Beam steps (the store itself is :mod:`corpora.store`).

The fetch stage (:class:`pipelines.transforms.FetchImages`) reads and writes
the store as it fetches; :class:`MarkComplete` then writes each input split's
completion marker once every fetch worker has committed its parts.
"""

from __future__ import annotations

import apache_beam as beam

from corpora.store import ImageStore
from corpora.store.settings import StoreSettings


def mark_complete(split: str, settings: StoreSettings) -> str:
    ImageStore.open(settings.uri).mark_complete(split)
    return split


class MarkComplete(beam.PTransform):
    """The splits a fetch stage saw (``splits``, repeated per bundle) → their
    markers, written after the last bundle: the grouping in ``Distinct`` waits
    for every bundle, and a bundle's parts are committed before its outputs
    are. A build that read images from a download (``--images-from``) leaves
    its splits unmarked: the images it took from there are not in the store."""

    def __init__(self, settings: StoreSettings):
        super().__init__()
        self._settings = settings

    def expand(self, splits):
        if self._settings.uri is None or self._settings.images_from is not None:
            return splits | "NoMarkers" >> beam.Filter(lambda _: False)
        return (
            splits
            | "OneEach" >> beam.Distinct()
            | "Mark" >> beam.Map(mark_complete, settings=self._settings)
        )
