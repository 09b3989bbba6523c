"""The image store's Beam steps (the store itself is :mod:`corpora.store`).

The fetch stage (:class:`pipelines.transforms.FetchImages`) reads and writes
the store as it fetches; :class:`MarkComplete` then writes each input split's
completion marker once every fetch worker has committed its parts.
:func:`pipelines.build.fetch_pipeline` is ``corpora fetch``: the download alone.
"""

from __future__ import annotations

import apache_beam as beam

from corpora.store import ImageStore, Img2DatasetOutput
from corpora.store.files import Files, reachable
from corpora.store.outcomes import ImageRef
from corpora.store.reader import ImageReader
from corpora.store.settings import StoreSettings
from corpora.store.stash import STASHES, BlobWriter, read_blob, unstash_piece


def stash_files(output: str, folder: str) -> Files | None:
    """The stash folder ``folder`` (:data:`corpora.store.stash.STASHES`) of the
    build at ``output``; ``None`` where fsspec cannot reach it here (gs://
    needs gcsfs, s3:// s3fs): the values then travel in the elements."""
    root = output.rstrip("/") + "/" + folder
    return Files(root) if reachable(root) is None else None


def reference(ref: ImageRef) -> tuple[str, int, int, str]:
    """The form a stash reference crosses between workers in: a plain tuple
    pickles several times faster than the dataclass, and Beam pickles every
    element at every crossing."""
    return ref.tar, ref.offset, ref.size, ref.sha256


def stashed(files: Files | None, batch: list):
    """``batch`` written to the stash ``files`` and its :func:`reference`, or
    the batch itself where nothing can be stashed (``files`` is ``None``).
    The blob is flushed before the reference leaves the bundle."""
    if files is None:
        return batch
    writer = BlobWriter(files)
    ref = writer.put(batch)
    writer.flush()
    return reference(ref)


class StashReader:
    """Values by :func:`reference` (:func:`corpora.store.stash.read_blob`),
    or the value itself where nothing was stashed (a record batch is a list,
    a document a :class:`~corpora.tokens.tokenizer.TokenizedDocument`); images put
    back into pieces."""

    def __init__(self):
        self._reader = ImageReader()

    def get(self, value):
        return read_blob(ImageRef(*value), self._reader) if isinstance(value, tuple) else value

    def piece(self, piece):
        return unstash_piece(piece, self._reader)

    def close(self) -> None:
        self._reader.close()


def remove_stash(_, output: str) -> None:
    """Delete the build's stash once the manifest is written (the shards hold
    its records, documents and images)."""
    for folder in STASHES:
        files = stash_files(output, folder)
        if files is None:
            return  # nothing was stashed
        try:
            files.fs.rm(files.path(""), recursive=True)
        except FileNotFoundError:
            pass


def check_store(settings: StoreSettings) -> None:
    """Before a build starts: an ``--images-from`` that is no img2dataset
    download, or an ``--image-store`` folder that is no store (an img2dataset
    download given there, an unreadable ``store.json``), raise
    :class:`corpora.store.StoreError` (one line). A store that does not exist
    yet is left to the first worker that needs it, so a build without images
    leaves none behind; one in a bucket is left to the workers too (a dry run
    touches nothing)."""
    if settings.images_from is not None:
        Img2DatasetOutput(settings.images_from)
    if settings.uri is not None and "://" not in settings.uri and Files(settings.uri).names(""):
        ImageStore.open(settings.uri)


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
