"""Reading stored images back by reference.

The shard writer holds :class:`~corpora.store.outcomes.ImageRef` values (tar,
offset, size, SHA-256), not bytes; :class:`ImageReader` reads each with one
ranged read (a seek in a local tar kept open, a ranged GET on an object
store) and checks its SHA-256, so a damaged or replaced tar is named instead
of packed. :meth:`ImageReader.image` then resizes through the fetch stage's
own :func:`corpora.fetch.process_image`: from an originals store, the bytes
are those a direct fetch gives with the same settings.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any, BinaryIO

from corpora.store.keys import StoreError
from corpora.store.outcomes import ImageRef


def _split_url(url: str) -> tuple[Any, str] | None:
    """``(file system, path)`` for a remote URL; ``None`` for a local path."""
    if url.startswith("file://"):
        return None
    if "://" not in url:
        return None
    import fsspec

    return fsspec.core.url_to_fs(url)


class ImageReader:
    """Ranged reads of stored images; keeps up to ``max_open`` local tars open.

    Used by one thread (a Beam DoFn instance holds one).
    """

    def __init__(self, max_open: int = 64):
        self._open: collections.OrderedDict[str, BinaryIO] = collections.OrderedDict()
        self._max_open = max_open

    def __enter__(self) -> "ImageReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def _local(self, path: str) -> BinaryIO:
        handle = self._open.pop(path, None)
        if handle is None:
            if len(self._open) >= self._max_open:
                self._open.popitem(last=False)[1].close()
            try:
                handle = open(path, "rb")
            except OSError as exc:
                raise StoreError(f"{path}: cannot open the stored tar ({exc.strerror})") from None
        self._open[path] = handle  # most recently used last
        return handle

    def read(self, ref: ImageRef) -> bytes:
        """The image's bytes; :class:`StoreError` when they are missing or
        differ from what was stored."""
        remote = _split_url(ref.tar)
        if remote is None:
            handle = self._local(ref.tar.removeprefix("file://"))
            handle.seek(ref.offset)
            data = handle.read(ref.size)
        else:
            fs, path = remote
            try:
                # by keyword: s3fs's second parameter is version_id, not start
                data = fs.cat_file(path, start=ref.offset, end=ref.offset + ref.size)
            except FileNotFoundError:
                raise StoreError(f"{ref.tar}: the stored tar is gone") from None
        if len(data) != ref.size:
            raise StoreError(
                f"{ref.tar}: {len(data)} bytes at offset {ref.offset}, the store recorded "
                f"{ref.size}: the tar is truncated"
            )
        digest = hashlib.sha256(data).hexdigest()
        if digest != ref.sha256:
            raise StoreError(
                f"{ref.tar}: the image at offset {ref.offset} has sha256 {digest[:16]}…, "
                f"the store recorded {ref.sha256[:16]}…: the tar was changed"
            )
        return data

    def image(self, ref: ImageRef, settings):
        """The image decoded, checked and resized for a build with ``settings``
        (a :class:`corpora.fetch.FetchSettings`): the fetch stage's
        :class:`~corpora.fetch.ImageResult`, success or reason."""
        from corpora.fetch import process_image

        return process_image(self.read(ref), settings)
