"""The bundled samples, so that a build and a blend run offline: five MMC4
documents with nine images, one of which is absent on purpose
(``corpora/data/sample/README.md``), and 300 short C4 documents of text
written for the project (``corpora/data/sample/c4/README.md``).

>>> import tempfile
>>> sample_contents(materialize_sample(tempfile.mkdtemp()))
'5 MMC4 documents with 9 images; missing.jpg is absent on purpose, dropped as file_not_found'
>>> sample_contents(c4_sample(tempfile.mkdtemp()))
'300 C4 documents of text written for this project'
"""  # noqa: E501

from __future__ import annotations

import contextlib
import gzip
import json
import os
import pathlib

PACKAGE_DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")
SAMPLE_TOKENIZER = os.path.join(PACKAGE_DATA, "sample.model")  # the sample's tokenizer

SAMPLE_DIR = os.path.join(PACKAGE_DATA, "sample")
# The sample's images, the one folder whose local files its build may read.
SAMPLE_IMAGES = os.path.realpath(os.path.join(SAMPLE_DIR, "images"))
C4_SAMPLE = os.path.join(SAMPLE_DIR, "c4", "c4-train.00000-of-00001.json.gz")


def sample_contents(path: str) -> str:
    """What the sample at ``path`` (as a build without ``--input`` reads it)
    holds, counted from it, as that build announces."""
    if path == C4_SAMPLE:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            count = sum(1 for line in handle if line.strip())
        return f"{count} C4 documents of text written for this project"
    with open(path, encoding="utf-8") as handle:
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


def c4_sample(directory: str) -> str:
    """The C4 sample's file: read where the package holds it (``directory``,
    where the MMC4 sample is written, is not needed)."""
    return C4_SAMPLE


def materialize_sample(directory: str, images: str = SAMPLE_IMAGES) -> str:
    """Write the sample MMC4 documents with ``file://`` URLs of the images in
    ``images`` into ``directory`` and return the path of the ``.jsonl`` file.

    The file's name carries a digest of its text, which names the images'
    folder: builds of one installation read one file, which is written whole
    (a temporary file renamed) and never rewritten under a build that reads
    it, and an installation elsewhere writes a file of its own beside it
    (a shared fixed path let one build's sample point at another's images).

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> here = materialize_sample(folder)
    >>> here == materialize_sample(folder), here == materialize_sample(folder, "/opt/other")
    (True, False)
    >>> os.path.basename(here).startswith("mmc4-sample-")
    True
    """
    import hashlib
    import tempfile

    uri = pathlib.Path(images).as_uri()
    with open(os.path.join(SAMPLE_DIR, "docs.jsonl.template"), encoding="utf-8") as handle:
        text = handle.read().replace("{SAMPLE_IMAGES}", uri)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"mmc4-sample-{digest}.jsonl")
    if os.path.exists(path):
        return path
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".mmc4-sample-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return path
