"""Where a build's images come from besides the network: :class:`StoreSettings`.

``uri`` names the image store a build reads and writes (``None``: none, every
image is fetched and nothing is kept). ``images_from`` names an img2dataset
download read before the store; ``absent`` says what becomes of the URLs it
does not hold: ``fetch`` them, or ``drop`` them with the reason
:data:`ABSENT_REASON`.

These settings say where images are found, not what a build writes: a
resumed build may add or change them (``corpora/shards/resume.py`` leaves
them out of the fingerprint).

    >>> StoreSettings("/data/images", refetch_failures=True).refetch_failures
    True
    >>> StoreSettings(absent="keep")
    Traceback (most recent call last):
    ...
    ValueError: absent images are fetched or dropped (fetch, drop), not 'keep'
"""

from __future__ import annotations

import dataclasses

ABSENT_CHOICES = ("fetch", "drop")
# The reason of an image that --images-from's download lacks, with --images-absent drop.
ABSENT_REASON = "not_in_download"
STORE_FOLDER = "image-store"  # the default store: a folder of the build's output


@dataclasses.dataclass(frozen=True)
class StoreSettings:
    uri: str | None = None
    refetch_failures: bool = False  # fetch again the retryable failures the store records
    images_from: str | None = None  # an img2dataset webdataset output
    absent: str = "fetch"  # what images_from's missing URLs become
    off: str | None = None  # why a build that would keep a store keeps none (said, and recorded)

    def __post_init__(self) -> None:
        if self.absent not in ABSENT_CHOICES:
            raise ValueError(
                f"absent images are fetched or dropped ({', '.join(ABSENT_CHOICES)}), "
                f"not {self.absent!r}"
            )

    @property
    def used(self) -> bool:
        """Whether the fetch stage goes through a store or a download at all."""
        return self.uri is not None or self.images_from is not None
