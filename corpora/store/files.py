"""The store's files, local or through fsspec (``gs://``, ``s3://``, ``memory://``).

A file is committed by writing it under a fresh temporary name and renaming
it into place: locally an ``os.replace``, on an object store a copy to the
final key, which appears whole or not at all. A writer killed halfway leaves
only a temporary name (``….tmp-<uuid>``) that no reader takes for a file.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from corpora.store.keys import temp_name


def _is_local(root: str) -> bool:
    return "://" not in root or root.startswith("file://")


def reachable(root: str) -> str | None:
    """``None`` when fsspec can open ``root``'s file system here, else why not
    (``gs://`` needs gcsfs, ``s3://`` s3fs).

    >>> reachable("/tmp/store") is None
    True
    """
    if _is_local(root):
        return None
    import fsspec

    protocol = root.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        return str(exc).splitlines()[0]
    return None


class Files:
    """Paths relative to one root folder, the same way for every file system."""

    def __init__(self, root: str):
        import fsspec

        self.root = root.rstrip("/") or "/"
        self.local = _is_local(self.root)
        self.fs, self._base = fsspec.core.url_to_fs(self.root)
        self._base = self._base.rstrip("/")

    def path(self, relative: str) -> str:
        """The file system's path of ``relative``."""
        return f"{self._base}/{relative}" if relative else self._base

    def url(self, relative: str) -> str:
        """The user-facing URL of ``relative`` (a local path for local roots),
        the form an :class:`~corpora.store.outcomes.ImageRef` carries."""
        if self.local:
            return os.path.join(self._base, relative)
        return f"{self.root}/{relative}"

    def exists(self, relative: str) -> bool:
        return self.fs.exists(self.path(relative))

    def names(self, relative: str) -> list[str]:
        """File and folder names directly inside ``relative``, sorted; empty when absent."""
        try:
            entries = self.fs.ls(self.path(relative), detail=False)
        except FileNotFoundError:
            return []
        return sorted(entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries)

    def read(self, relative: str) -> bytes:
        return self.fs.cat_file(self.path(relative))

    def open_temp(self, final: str) -> tuple[BinaryIO, str]:
        """A stream to a new temporary file beside ``final`` and its name."""
        temporary = temp_name(final)
        self.fs.makedirs(self.path(final).rsplit("/", 1)[0], exist_ok=True)
        return self.fs.open(self.path(temporary), "wb"), temporary

    def commit(self, temporary: str, final: str) -> None:
        """Rename a closed temporary file into place (replacing ``final``)."""
        if self.local:
            os.replace(self.path(temporary), self.path(final))
        else:
            self.fs.mv(self.path(temporary), self.path(final))

    def write(self, relative: str, data: bytes) -> None:
        """Create or replace ``relative`` atomically."""
        stream, temporary = self.open_temp(relative)
        try:
            with stream:
                stream.write(data)
            self.commit(temporary, relative)
        except BaseException:
            self.remove(temporary)
            raise

    def remove(self, relative: str) -> None:
        try:
            self.fs.rm(self.path(relative))
        except FileNotFoundError:
            pass
