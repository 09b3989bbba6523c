"""The bundled sample corpus (see ``corpora/data/sample/README.md``): five
MMC4 documents with nine images, one of which is absent on purpose.

>>> sample_contents()
'5 MMC4 documents with 9 images; missing.jpg is absent on purpose, dropped as file_not_found'
"""  # noqa: E501

from __future__ import annotations

import json
import os
import pathlib

from corpora.settings import PACKAGE_DATA

SAMPLE_DIR = os.path.join(PACKAGE_DATA, "sample")
# The sample's images, the one folder whose local files its build may read.
SAMPLE_IMAGES = os.path.realpath(os.path.join(SAMPLE_DIR, "images"))


def sample_contents() -> str:
    """What the sample holds, counted from it, as a build of it announces."""
    with open(os.path.join(SAMPLE_DIR, "docs.jsonl.template"), encoding="utf-8") as handle:
        documents = [json.loads(line) for line in handle if line.strip()]
    images = [info["image_name"] for doc in documents for info in doc["image_info"]]
    # absent on purpose: each one's pair or image shows a drop in the funnel
    absent = [name for name in images if not os.path.exists(os.path.join(SAMPLE_IMAGES, name))]
    verb = "is" if len(absent) == 1 else "are"
    return f"{len(documents)} MMC4 documents with {len(images)} images" + (
        f"; {', '.join(absent)} {verb} absent on purpose, dropped as file_not_found"
        if absent
        else ""
    )


def sample_directory() -> str:
    """Where a build without ``--input`` writes the sample: this user's cache
    (``$XDG_CACHE_HOME/corpora/sample``, else ``~/.cache/corpora/sample``),
    the same on every run, so running the command again resumes the build,
    and never a folder that other users of the machine share (a fixed path
    under ``/tmp`` was theirs to create first).

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"XDG_CACHE_HOME": "/home/ada/.cache"}):
    ...     sample_directory()
    '/home/ada/.cache/corpora/sample'
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "corpora", "sample")


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
