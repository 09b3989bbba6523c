"""An img2dataset download (``output_format="webdataset"``) read as a store.

img2dataset writes, per shard ``{n:05d}`` (as many digits as its shard count
needs), ``{n}.tar`` with ``{key}.jpg`` (its ``encode_format``), ``{key}.txt``
and ``{key}.json`` members for each image it kept, ``{n}.parquet`` with one
row per input URL (``url``, ``caption``, ``key``, ``status``:
``success``/``failed_to_download``/``failed_to_resize``, ``error_message``,
``width``, ``height``, the input columns it was asked to keep …) and, once
the shard is done, ``{n}_stats.json``: img2dataset's own completion marker,
which it also reads to resume. A shard without it was cut short and is
skipped (:attr:`Img2DatasetOutput.incomplete`).

Its parquet's ``sha256`` is that of the body downloaded, before
img2dataset resized and re-encoded it; the tar holds the re-encoded image. So
indexing reads every tar once, to find each member's offset and hash what
is really there. Its images are as img2dataset resized them: a build packs
them through the fetch stage's resize like any stored image, and they equal
a direct fetch's only where img2dataset kept the originals.

Failures keep img2dataset's message as ``detail``, under the fetch reason
that names it (``http_404``, ``timeout``, ``opted_out`` …;
:func:`reason_from_img2dataset`).
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from typing import Any, Iterator

from corpora.store.files import Files
from corpora.store.index import StoreIndex
from corpora.store.keys import StoreError
from corpora.store.outcomes import Failed, ImageRef, Outcome, Stored
from corpora.store.writer import identify

IMAGE_EXTENSIONS = {"jpg": "JPEG", "jpeg": "JPEG", "png": "PNG", "webp": "WEBP"}  # encode_format
_HTTP = re.compile(r"HTTP Error (\d{3})")
_RESIZE_REASONS = {  # img2dataset's resizer messages
    "Image decoding error": "not_image",
    "image too small": "too_small",
    "image area too large": "too_many_pixels",
    "aspect ratio too large": "bad_aspect",
}
_DOWNLOAD_REASONS = (  # (what the message holds, reason), first match wins
    ("X-Robots-Tag", "opted_out"),
    ("timed out", "timeout"),
    ("unknown url type", "bad_scheme"),
    ("Name or service not known", "dns_error"),
    ("nodename nor servname", "dns_error"),
    ("No address associated", "dns_error"),
    ("Temporary failure in name resolution", "dns_error"),
    ("CERTIFICATE", "tls_error"),
    ("SSL", "tls_error"),
)


def reason_from_img2dataset(status: str, message: str | None) -> tuple[str, int | None]:
    """The fetch reason and HTTP status for an img2dataset failure; what it
    cannot name (a reset, a hash mismatch …) is a ``connection_error``, which
    ``--refetch-failures`` tries again.

    >>> reason_from_img2dataset("failed_to_download", "HTTP Error 404: Not Found")
    ('http_404', 404)
    >>> reason_from_img2dataset("failed_to_download", "HTTP Error 503: Service Unavailable")
    ('http_5xx', 503)
    >>> reason_from_img2dataset("failed_to_download", "<urlopen error timed out>")
    ('timeout', None)
    >>> reason_from_img2dataset("failed_to_resize", "image too small")
    ('too_small', None)
    """
    message = message or ""
    if status == "failed_to_resize":
        return _RESIZE_REASONS.get(message, "decode_error"), None
    found = _HTTP.search(message)
    if found:
        code = int(found.group(1))
        reason = "http_429" if code == 429 else "http_5xx" if code >= 500 else f"http_{code}"
        return reason, code
    for needle, reason in _DOWNLOAD_REASONS:
        if needle.lower() in message.lower():
            return reason, None
    return "connection_error", None


def _stem(name: str) -> str:
    return name.rsplit(".", 1)[0]


class Img2DatasetOutput:
    """The shards of an img2dataset webdataset output at ``root``."""

    def __init__(self, root: str):
        self.files = Files(root)
        names = set(self.files.names(""))
        tars = {_stem(n) for n in names if n.endswith(".tar")}
        parquets = {_stem(n) for n in names if n.endswith(".parquet")}
        done = {n[: -len("_stats.json")] for n in names if n.endswith("_stats.json")}
        self.shards = sorted(tars & parquets & done)
        # Cut short (no _stats.json) or half there: nothing in them is trusted.
        self.incomplete = sorted((tars | parquets) - set(self.shards))
        if not self.shards:
            found = "only incomplete shards" if self.incomplete else "no .tar + .parquet shards"
            raise StoreError(f"{root}: {found} of an img2dataset webdataset output")

    @property
    def root(self) -> str:
        return self.files.root

    def rows(self, shard: str) -> list[dict[str, Any]]:
        """The parquet rows of ``shard``: every column img2dataset wrote."""
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(io.BytesIO(self.files.read(f"{shard}.parquet")))
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError …
            raise StoreError(f"{self.root}/{shard}.parquet: unreadable ({exc})") from None
        missing = {"url", "key", "status"} - set(table.column_names)
        if missing:
            raise StoreError(
                f"{self.root}/{shard}.parquet: no {', '.join(sorted(missing))} column; "
                "not an img2dataset output"
            )
        return table.to_pylist()

    def members(self, shard: str) -> dict[str, tuple[ImageRef, str, int, int]]:
        """``key → (ref, format, width, height)`` of the images in ``shard``'s
        tar, format and size read from each image's header (with
        ``disable_all_reencoding`` a ``.jpg`` member may hold a PNG)."""
        found: dict[str, tuple[ImageRef, str, int, int]] = {}
        tar_url = self.files.url(f"{shard}.tar")  # one string shared by the shard's refs
        with self.files.fs.open(self.files.path(f"{shard}.tar"), "rb") as stream:
            with tarfile.open(fileobj=stream, mode="r|") as tar:
                for member in tar:
                    tar.members.clear()  # read once; keeping headers grows with the tar
                    key, _, extension = member.name.rsplit("/", 1)[-1].partition(".")
                    if extension.lower() not in IMAGE_EXTENSIONS or not member.isfile():
                        continue
                    data = tar.extractfile(member).read()  # type: ignore[union-attr]
                    ref = ImageRef(
                        tar_url, member.offset_data, member.size, hashlib.sha256(data).hexdigest()
                    )
                    header = identify(data)
                    if isinstance(header, str):
                        header = (IMAGE_EXTENSIONS[extension.lower()], 0, 0)
                    found[key] = (ref, *header)
        return found

    def entries(self, shard: str) -> Iterator[tuple[float, Outcome]]:
        """``(0.0, outcome)`` for every row of ``shard`` (a download has no times:
        among duplicates of a URL the first success, in shard order, wins)."""
        members = self.members(shard)
        tar_url = self.files.url(f"{shard}.tar")
        for row in self.rows(shard):
            url, key = row["url"], row["key"]
            if row["status"] == "success":
                if key not in members:
                    raise StoreError(
                        f"{tar_url}: no image member for key {key}, which its parquet "
                        "lists as a success"
                    )
                ref, kind, width, height = members[key]
                yield 0.0, Stored(url, key, ref, width, height, kind)
            else:
                message = row.get("error_message")
                reason, status = reason_from_img2dataset(row["status"], message)
                yield 0.0, Failed(url, reason, status, message or "")

    def index(self) -> StoreIndex:
        """URL → outcome over every complete shard."""
        return StoreIndex(row for shard in self.shards for row in self.entries(shard))
