"""Writing a split of the store as images arrive.

A fetch stage hands each URL's outcome to a :class:`StoreWriter` as soon as
it has it: :meth:`~StoreWriter.add` with the body the server sent,
:meth:`~StoreWriter.add_failure` with the reason. Bodies stream into an open
tar under a temporary name; only the small row per URL stays in memory until
the part is committed (every ``max_part_images`` rows or ``max_part_bytes``),
so memory is flat however many images a split holds.

A part is committed in two steps: its tar is renamed into place, then its
parquet is written (atomically). The parquet is the commit: a tar without
one, like a temporary name, belongs to a writer that was killed, and readers
ignore it, so its URLs are fetched again.

Tar members follow WebDataset: ``{key}.{ext}`` holds the image and
``{key}.json`` its URL, SHA-256 and size, so a tar can be read without the
store (``webdataset.WebDataset("…/part-….tar")``). Member headers carry fixed
metadata (mtime 0, mode 0444), as the shards do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
import time
import warnings
from typing import Any, Callable

from corpora.record import open_image
from corpora.shards.writing import fixed_tarinfo
from corpora.store.files import Files
from corpora.store.keys import StoreError, image_key, new_writer_id, part_name, split_dir
from corpora.store.outcomes import Failed, ImageRef, Stored

_EXTENSIONS = {
    "JPEG": "jpg",
    "MPO": "jpg",
    "PNG": "png",
    "WEBP": "webp",
    "GIF": "gif",
    "TIFF": "tif",
}
ROW_COLUMNS = (
    "key",
    "url",
    "status",  # "success" or "failed", as img2dataset's parquet says
    "member",
    "offset",
    "size",
    "sha256",
    "width",
    "height",
    "format",
    "reason",
    "http_status",
    "detail",
    "time",  # seconds since the epoch when the row was recorded (resolve() orders by it)
)


@dataclasses.dataclass(frozen=True)
class StoreSpec:
    """What a store holds: the bodies as served (``image_size=None``, the
    default), or images resized so that their shorter side is at most
    ``image_size`` (aspect kept, never enlarged) and re-encoded as JPEG.

    Only originals rebuild the bytes a direct fetch gives at any
    ``--image-size``/``--resize-mode``; a resized store saves space and serves
    any build whose ``--image-size`` is at most its ``image_size``.

    >>> StoreSpec().describe(), StoreSpec(512).describe()["image_size"]
    ({'images': 'original'}, 512)
    >>> StoreSpec(512).check_image_size(768)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    corpora.store.keys.StoreError: the image store holds images resized to 512 px;
    it cannot serve --image-size 768
    """

    image_size: int | None = None
    jpeg_quality: int = 95

    def __post_init__(self) -> None:
        if self.image_size is not None and self.image_size < 1:
            raise StoreError(f"store image size must be at least 1, got {self.image_size}")

    def describe(self) -> dict[str, Any]:
        if self.image_size is None:
            return {"images": "original"}
        return {
            "images": "resized",
            "image_size": self.image_size,
            "resize_mode": "keep_ratio",
            "jpeg_quality": self.jpeg_quality,
        }

    @classmethod
    def from_description(cls, description: dict[str, Any]) -> "StoreSpec":
        if description.get("images") == "original":
            return cls()
        return cls(int(description["image_size"]), int(description["jpeg_quality"]))

    def check_image_size(self, image_size: int) -> None:
        """Raise :class:`StoreError` when a build needs larger images than stored."""
        if self.image_size is not None and image_size > self.image_size:
            raise StoreError(
                f"the image store holds images resized to {self.image_size} px; "
                f"it cannot serve --image-size {image_size}"
            )

    def fetch_settings(self):
        from corpora.fetch import FetchSettings

        return FetchSettings(
            image_size=self.image_size or 0,
            resize_mode="keep_ratio",
            resize_only_if_bigger=True,
            jpeg_quality=self.jpeg_quality,
        )


def identify(data: bytes) -> tuple[str, int, int] | str:
    """``(format, width, height)`` from an image's header, or the reason the
    fetch stage gives a body that is not one (``empty_body``, ``not_image``,
    ``too_many_pixels``, ``decode_error``), so that a build from the store
    names a body as a direct fetch does. Nothing is decoded.

    >>> identify(b""), identify(b"<html></html>")
    ('empty_body', 'not_image')
    """
    from PIL import Image

    if not data:
        return "empty_body"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with open_image(data) as image:
                width, height = image.size
                kind = image.format or "unknown"
    except Image.DecompressionBombError:
        return "too_many_pixels"
    except Exception:  # Pillow raises many types for non-images
        return "not_image"
    if width < 1 or height < 1:
        return "decode_error"
    return kind, width, height


class _Counting:
    """A write-only stream that knows its position (tarfile asks ``tell()``)."""

    def __init__(self, stream):
        self._stream = stream
        self.position = 0

    def write(self, data) -> int:
        self._stream.write(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position


@dataclasses.dataclass
class _OpenPart:
    name: str
    temporary: str
    stream: Any
    counting: _Counting
    tar: tarfile.TarFile
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> int:
    """Append a member; the offset of its data in the tar."""
    info = fixed_tarinfo(name, len(data))
    offset = tar.offset + len(info.tobuf(tar.format, tar.encoding, tar.errors))
    tar.addfile(info, io.BytesIO(data))
    tar.members.clear()  # tarfile keeps every header otherwise: memory would grow with the part
    return offset


class StoreWriter:
    """Writes one split's outcomes into parts ``part-{writer}-{n:05d}``.

    Used by one thread. Several writers may write one split at once (Beam
    bundles of one input file): each names its parts after its own id. A
    ``with`` block commits the open part on a normal exit and discards it
    when the block raises.
    """

    def __init__(
        self,
        files: Files,
        split: str,
        spec: StoreSpec,
        max_part_images: int = 10_000,
        max_part_bytes: int = 1 << 30,
        clock: Callable[[], float] = time.time,
        writer_id: str | None = None,
    ):
        if max_part_images < 1 or max_part_bytes < 1:
            raise StoreError("a part must hold at least one image and one byte")
        self.split = split
        self._files = files
        self._dir = split_dir(split)
        self._spec = spec
        self._max_images = max_part_images
        self._max_bytes = max_part_bytes
        self._clock = clock
        self._id = writer_id or new_writer_id()
        self._sequence = 0
        self._part: _OpenPart | None = None
        self.committed: list[str] = []  # part names, in commit order

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()

    def add(self, url: str, body: bytes, status: int | None = 200) -> Stored | Failed:
        """Store the body a server sent for ``url``. A body that is no image
        is recorded as the failure the fetch stage would name."""
        if self._spec.image_size is not None:
            from corpora.fetch import process_image

            result = process_image(body, self._spec.fetch_settings())
            if result.reason is not None:
                return self.add_failure(url, result.reason, status, result.detail)
            body, kind, width, height = result.data, "JPEG", result.width, result.height
        else:
            identified = identify(body)
            if isinstance(identified, str):
                return self.add_failure(url, identified, status)
            kind, width, height = identified
        return self.put(url, body, kind, width, height, status)

    def put(
        self, url: str, body: bytes, kind: str, width: int, height: int, status: int | None = None
    ) -> Stored:
        """Store ``body`` as given, its format and size named by the caller
        (the build's stash keeps the fetch stage's JPEGs this way, unchecked)."""
        part = self._open()
        key = image_key(url)
        sha256 = hashlib.sha256(body).hexdigest()
        member = f"{key}.{_EXTENSIONS.get(kind, kind.lower())}"
        offset = _member(part.tar, member, body)
        about = {"url": url, "sha256": sha256, "width": width, "height": height}
        _member(part.tar, f"{key}.json", json.dumps(about, sort_keys=True).encode("utf-8"))
        row = {
            "key": key,
            "url": url,
            "status": "success",
            "member": member,
            "offset": offset,
            "size": len(body),
            "sha256": sha256,
            "width": width,
            "height": height,
            "format": kind,
            "http_status": status,
        }
        self._record(part, row)
        ref = ImageRef(self._files.url(f"{self._dir}/{part.name}.tar"), offset, len(body), sha256)
        return Stored(url, key, ref, width, height, kind, status)

    def add_failure(
        self, url: str, reason: str, status: int | None = None, detail: str = ""
    ) -> Failed:
        """Record that ``url`` failed with ``reason`` (a fetch reason)."""
        part = self._open()
        row = {
            "key": image_key(url),
            "url": url,
            "status": "failed",
            "reason": reason,
            "http_status": status,
            "detail": detail,
        }
        self._record(part, row)
        return Failed(url, reason, status, detail)

    def _record(self, part: _OpenPart, row: dict[str, Any]) -> None:
        row["time"] = self._clock()
        part.rows.append(row)
        if len(part.rows) >= self._max_images or part.counting.position >= self._max_bytes:
            self.flush()

    def _open(self) -> _OpenPart:
        if self._part is None:
            name = part_name(self._id, self._sequence)
            self._sequence += 1
            stream, temporary = self._files.open_temp(f"{self._dir}/{name}.tar")
            counting = _Counting(stream)
            tar = tarfile.open(fileobj=counting, mode="w", format=tarfile.USTAR_FORMAT)  # type: ignore[call-overload]
            self._part = _OpenPart(name, temporary, stream, counting, tar)
        return self._part

    def flush(self) -> str | None:
        """Commit the open part; its name, or ``None`` when none was open."""
        part, self._part = self._part, None
        if part is None:
            return None
        final = f"{self._dir}/{part.name}"
        try:
            part.tar.close()
            part.stream.close()
            self._files.commit(part.temporary, f"{final}.tar")
        except BaseException:
            self._files.remove(part.temporary)
            raise
        self._files.write(f"{final}.parquet", rows_to_parquet(part.rows))
        self.committed.append(part.name)
        return part.name

    def close(self) -> list[str]:
        """Commit the open part; every part this writer committed."""
        self.flush()
        return list(self.committed)

    def abort(self) -> None:
        """Discard the open part: its URLs stay unknown."""
        part, self._part = self._part, None
        if part is not None:
            try:
                part.stream.close()
            finally:
                self._files.remove(part.temporary)


def _text(value: str | None) -> str | None:
    """``value`` as parquet can hold it: a lone surrogate (from JSON input) becomes U+FFFD."""
    if value is None:
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _schema():
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.string()),
            ("url", pa.string()),
            ("status", pa.string()),
            ("member", pa.string()),
            ("offset", pa.int64()),
            ("size", pa.int64()),
            ("sha256", pa.string()),
            ("width", pa.int32()),
            ("height", pa.int32()),
            ("format", pa.string()),
            ("reason", pa.string()),
            ("http_status", pa.int32()),
            ("detail", pa.string()),
            ("time", pa.float64()),
        ]
    )


def rows_to_parquet(rows: list[dict[str, Any]]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {name: [row.get(name) for row in rows] for name in ROW_COLUMNS}
    for name in ("url", "detail"):
        columns[name] = [_text(value) for value in columns[name]]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pydict(columns, schema=_schema()), buffer)
    return buffer.getvalue()
