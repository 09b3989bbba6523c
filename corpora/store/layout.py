"""The store on disk, and the questions a build asks it.

::

    {root}/store.json                          what it holds (originals or a size), key scheme
    {root}/splits/{split}/part-{w}-{n}.tar     WebDataset tar: {key}.jpg|png|… + {key}.json
    {root}/splits/{split}/part-{w}-{n}.parquet one row per URL: its outcome (the part's commit)
    {root}/splits/{split}/complete.json        the split's marker: every URL of it is recorded
    {root}/robots/{key}.json                   a host's robots.txt answer and when it came

A split is one input file (:func:`~corpora.store.keys.split_name`). Its
state is ``complete`` (the marker exists: a build neither reads its URLs
for fetching nor fetches any, and trusts the parts the marker lists),
``partial`` (committed parts exist: what they hold is trusted, the rest is
fetched) or ``absent``.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from corpora.store.files import Files
from corpora.store.index import StoreIndex, read_part
from corpora.store.keys import (
    KEY_HEX_DIGITS,
    MARKER,
    SPLITS,
    STORE_FILE,
    StoreError,
    is_temp,
    split_dir,
)
from corpora.store.outcomes import Outcome, Stored
from corpora.store.robots import RobotsFiles
from corpora.store.writer import StoreSpec, StoreWriter

FORMAT = "corpora-image-store"
VERSION = 1


class ImageStore:
    """A fetched-image store at ``root`` (a local folder, ``gs://…``, ``s3://…``)."""

    def __init__(self, files: Files, spec: StoreSpec):
        self.files = files
        self.spec = spec

    @property
    def root(self) -> str:
        return self.files.root

    @classmethod
    def open(cls, root: str, spec: StoreSpec | None = None) -> "ImageStore":
        """The store at ``root``, created (holding ``spec``, originals by
        default) when there is none. A store holding something else than
        ``spec`` asks for is refused."""
        files = Files(root)
        if files.exists(STORE_FILE):
            try:
                recorded = StoreSpec.from_description(json.loads(files.read(STORE_FILE)))
            except (ValueError, KeyError, TypeError) as exc:
                raise StoreError(f"{root}/{STORE_FILE} is unreadable ({exc})") from None
            if spec is not None and spec != recorded:
                raise StoreError(
                    f"{root} holds {_say(recorded)}; this build asks for {_say(spec)}: "
                    "use another --image-store"
                )
            return cls(files, recorded)
        found = files.names("")
        if any(name.endswith((".tar", ".parquet")) for name in found):
            raise StoreError(
                f"{root} holds tars but no {STORE_FILE}: an img2dataset download is read "
                "with --images-from, not used as an --image-store"
            )
        spec = spec or StoreSpec()
        description = {"format": FORMAT, "version": VERSION, "key": _KEY, **spec.describe()}
        files.write(STORE_FILE, json.dumps(description, indent=2, sort_keys=True).encode())
        return cls(files, spec)

    def writer(self, split: str, **options: Any) -> StoreWriter:
        """A writer for ``split`` (options: ``max_part_images``, ``max_part_bytes``, ``clock``)."""
        return StoreWriter(self.files, split, self.spec, **options)

    def robots(self) -> RobotsFiles:
        """The hosts' robots.txt answers this store keeps."""
        return RobotsFiles(self.files)

    def splits(self) -> list[str]:
        return [name for name in self.files.names(SPLITS) if not is_temp(name)]

    def parts(self, split: str) -> list[str]:
        """Committed parts of ``split`` (a tar and its parquet), sorted."""
        names = set(self.files.names(split_dir(split)))
        return sorted(
            name[: -len(".parquet")]
            for name in names
            if name.endswith(".parquet") and name[: -len(".parquet")] + ".tar" in names
        )

    def strays(self, split: str) -> list[str]:
        """Files of ``split`` no reader trusts: temporary names and tars
        without a parquet, left by writers that were killed."""
        names = self.files.names(split_dir(split))
        committed = set(self.parts(split))
        return [
            name
            for name in names
            if is_temp(name) or (name.endswith(".tar") and name[: -len(".tar")] not in committed)
        ]

    def remove_strays(self, split: str) -> list[str]:
        """Delete :meth:`strays`. Only while no writer is writing ``split``:
        a live writer's open part is a stray too."""
        strays = self.strays(split)
        for name in strays:
            self.files.remove(f"{split_dir(split)}/{name}")
        return strays

    def marker(self, split: str) -> dict[str, Any] | None:
        path = f"{split_dir(split)}/{MARKER}"
        if not self.files.exists(path):
            return None
        return json.loads(self.files.read(path))

    def state(self, split: str) -> str:
        """``complete``, ``partial`` or ``absent``."""
        if self.marker(split) is not None:
            return "complete"
        return "partial" if self.parts(split) else "absent"

    def mark_complete(self, split: str) -> dict[str, Any]:
        """Record that every URL of ``split`` has an outcome in its committed
        parts; call it once the split's writers have all closed."""
        parts = self.parts(split)
        index = StoreIndex(
            row for part in parts for row in read_part(self.files, split_dir(split), part)
        )
        marker = {"split": split, "parts": parts, "urls": len(index), **index.counts()}
        self.files.write(
            f"{split_dir(split)}/{MARKER}", json.dumps(marker, indent=2, sort_keys=True).encode()
        )
        return marker

    def trusted_parts(self, split: str) -> list[str]:
        """The parts a build reads: the marker's for a complete split (a part
        written after it, by a duplicate run, is ignored), else every committed one."""
        marker = self.marker(split)
        if marker is None:
            return self.parts(split)
        missing = sorted(set(marker["parts"]) - set(self.parts(split)))
        if missing:
            raise StoreError(
                f"{self.root}: split {split} is marked complete but its part "
                f"{missing[0]} is missing; delete {split_dir(split)}/{MARKER} to fetch again"
            )
        return list(marker["parts"])

    def entries(self, split: str) -> Iterator[tuple[float, Outcome]]:
        """Every trusted row of ``split`` as ``(time recorded, outcome)``,
        part by part: the input of a join by URL when an index does not fit."""
        for part in self.trusted_parts(split):
            yield from read_part(self.files, split_dir(split), part)

    def index(self, splits: Iterable[str] | None = None) -> StoreIndex:
        """URL → outcome over ``splits`` (every split when ``None``)."""
        chosen = self.splits() if splits is None else list(splits)
        return StoreIndex(row for split in chosen for row in self.entries(split))

    def stored_bytes(self, split: str) -> int:
        """Bytes of images in the trusted parts of ``split``."""
        return sum(
            outcome.ref.size for _, outcome in self.entries(split) if isinstance(outcome, Stored)
        )


_KEY = f"sha256(url utf-8)[:{KEY_HEX_DIGITS}] hex"


def _say(spec: StoreSpec) -> str:
    if spec.image_size is None:
        return "original images"
    return f"images resized to {spec.image_size} px"
