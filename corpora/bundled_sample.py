"""The bundled sample corpus (see ``corpora/data/sample/README.md``)."""

from __future__ import annotations

import os
import pathlib

from corpora.settings import PACKAGE_DATA

SAMPLE_DIR = os.path.join(PACKAGE_DATA, "sample")
# The sample's images, the one folder whose local files its build may read.
SAMPLE_IMAGES = os.path.realpath(os.path.join(SAMPLE_DIR, "images"))


def materialize_sample(directory: str) -> str:
    """Write the sample MMC4 documents with ``file://`` image URLs into
    ``directory`` and return the path of the ``.jsonl`` file."""
    images = pathlib.Path(SAMPLE_IMAGES).as_uri()
    with open(os.path.join(SAMPLE_DIR, "docs.jsonl.template"), encoding="utf-8") as handle:
        text = handle.read().replace("{SAMPLE_IMAGES}", images)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "mmc4-sample.jsonl")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path
