"""Reading built shards: the one reading of a build that the trainer,
``corpora inspect``, ``corpora stats`` and ``corpora report`` share (its public
names are importable as :mod:`corpora.reader`).

    >>> from corpora.reader import iter_samples, load_manifest, shard_urls
    >>> manifest = load_manifest("corpora-out/mmc4-pairs")            # doctest: +SKIP
    >>> for sample in iter_samples(shard_urls("corpora-out/mmc4-pairs")):  # doctest: +SKIP
    ...     sample.input_ids, sample.segment_ids, sample.positions   # int32 [seq_len]
    ...     sample.images       # PIL images, in slot order
    ...     sample.documents    # the json entry of each packed document

URLs are local paths, ``file://`` URLs, or anything ``fsspec`` opens
(``gs://``, ``s3://``, ``hf://``); brace patterns such as
``mmc4-{000000..000041}.tar`` (the manifest's ``shard_pattern``) expand.
:func:`locate` turns what a user names on the command line (a build
directory, its ``manifest.json``, or one shard) into the manifest and shards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tarfile
import zlib
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

import numpy as np

from corpora import MAX_IMAGE_SIZE, MAX_SEQ_LEN
from corpora.record import open_image
from corpora.shards.manifest import MANIFEST
from corpora.shards.writing import ARRAYS

# What a reader accepts from a build, whatever its manifest says: a shard
# member is a regular file of at most MAX_MEMBER_BYTES (the largest a build
# writes is a sample's json or one resized JPEG); arrays are one-dimensional,
# of an integer type, at most MAX_SEQ_LEN long (positions are int32; no
# model's context comes near); a stored image decodes to at most
# MAX_IMAGE_PIXELS. Anything else is refused with a ValueError before it is
# allocated.
MAX_MEMBER_BYTES = 64 << 20
MAX_IMAGE_PIXELS = 1 << 26


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(data: bytes | str) -> Any:
    """JSON as a build writes it: no NaN or Infinity, no nesting deep enough
    to exhaust the stack (``ValueError`` for either)."""
    try:
        return json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _array(data: bytes, name: str) -> np.ndarray:
    """A ``.npy`` member, its header checked before anything is allocated."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read(stream)
    except Exception as exc:
        raise ValueError(f"{name} is not an array ({exc})") from None
    if len(shape) != 1 or dtype.kind not in "iu" or not 0 < shape[0] <= MAX_SEQ_LEN:
        raise ValueError(f"{name} has shape {shape} and type {dtype}, not [seq_len] integers")
    if len(data) - stream.tell() != shape[0] * dtype.itemsize:
        raise ValueError(f"{name} holds {len(data) - stream.tell()} bytes for shape {shape}")
    return np.load(io.BytesIO(data), allow_pickle=False)


def check_member(member: tarfile.TarInfo) -> None:
    """Raise ``ValueError`` for a shard member a build never writes: one that
    is not a regular file (a link, a device, a sparse file declaring more
    than it holds) or is larger than :data:`MAX_MEMBER_BYTES`."""
    if not member.isfile() or member.issparse():
        raise ValueError(f"member {member.name!r} is not a regular file")
    if member.size > MAX_MEMBER_BYTES:
        raise ValueError(f"member {member.name!r} declares {member.size} bytes")


def iter_tar_samples(stream: BinaryIO) -> Iterator[dict[str, Any]]:
    """Read a shard back: one dict per sample with ``__key__``, the arrays,
    ``images`` (list of JPEG bytes in slot order) and ``json``. A member
    that is not a regular file, or is larger than :data:`MAX_MEMBER_BYTES`,
    and an array or json that a build would not write raise ``ValueError``."""
    current: dict[str, Any] | None = None
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        while (member := tar.next()) is not None:
            tar.members.clear()  # a stream is read once; keeping headers would grow with the shard
            check_member(member)
            key, _, extension = member.name.rpartition("/")[2].partition(".")
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            if current is None or current["__key__"] != key:
                if current is not None:
                    yield current
                current = {"__key__": key, "images": []}
            if extension.endswith(".npy"):
                current[extension[:-4]] = _array(data, member.name)
            elif extension.startswith("img"):
                current["images"].append(data)
            elif extension == "json":
                current["json"] = strict_json(data)
    if current is not None:
        yield current


class ShardMismatch(ValueError):
    """A shard does not match its manifest entry (count or sha256)."""


@dataclasses.dataclass
class Sample:
    """One packed sequence read back from a shard."""

    key: str
    url: str
    input_ids: np.ndarray
    segment_ids: np.ndarray
    positions: np.ndarray
    images: list[Any]  # PIL images (decoded) or JPEG bytes, in slot order
    documents: list[dict[str, Any]]

    @property
    def tokens(self) -> int:
        """Non-padding tokens."""
        return int((self.segment_ids > 0).sum())


def expand_urls(urls: str | Sequence[str]) -> list[str]:
    """Expand brace patterns: ``a-{000..002}.tar`` → three URLs.

    >>> expand_urls(["s/c-{000000..000002}.tar", "t/x.tar"])
    ['s/c-000000.tar', 's/c-000001.tar', 's/c-000002.tar', 't/x.tar']
    """
    from braceexpand import braceexpand

    if isinstance(urls, str):
        urls = [urls]
    return [expanded for url in urls for expanded in braceexpand(url)]


def _join(base: str, name: str) -> str:
    if "://" in base:
        return base.rstrip("/") + "/" + name
    return os.path.join(base, name)


def open_url(url: str) -> BinaryIO:
    """A binary stream for a local path, ``file://`` URL or fsspec URL."""
    if url.startswith("file://"):
        url = url[len("file://") :]
    if "://" not in url:
        return open(url, "rb")
    import fsspec

    return fsspec.open(url, "rb").open()


class BuildInputError(ValueError):
    """A path that is not a build, its manifest or one of its shards, or a
    shard that does not match its manifest; the message is one line for the user."""


def load_manifest(location: str) -> dict[str, Any]:
    """The manifest of a build: ``location`` is its directory or the file.
    Raises :class:`BuildInputError` for one that is not a corpora manifest
    (:func:`check_manifest`), ``FileNotFoundError`` where there is none."""
    named = location.endswith(".json") or ("://" not in location and os.path.isfile(location))
    url = location if named else _join(location, MANIFEST)
    with open_url(url) as stream:
        data = stream.read(MAX_MEMBER_BYTES + 1)
    try:
        if len(data) > MAX_MEMBER_BYTES:
            raise ValueError(f"larger than {MAX_MEMBER_BYTES} bytes")
        manifest = strict_json(data)
        check_manifest(manifest)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BuildInputError(f"not a corpora manifest: {url} ({exc})") from None
    return manifest


def shard_url(location: str, path: Any) -> str:
    """The URL of the shard a manifest lists as ``path``, in the build at
    ``location``. A build writes its shards beside its manifest, so ``path``
    is a file name; anything that leads elsewhere (``..``, an absolute path,
    a URL, a folder, a link out of the build) is refused with
    :class:`BuildInputError`.

    >>> shard_url("out", "coyo-000000.tar")
    'out/coyo-000000.tar'
    >>> shard_url("out", "../../etc/passwd")
    Traceback (most recent call last):
    ...
    corpora.shards.reading.BuildInputError: shard path outside the build: '../../etc/passwd' in out
    """
    plain = (
        isinstance(path, str)
        and path not in ("", ".", "..")
        and not any(mark in path for mark in ("/", "\\", ":", "\0"))  # folders, drives, URLs
    )
    if not plain:
        raise BuildInputError(f"shard path outside the build: {path!r} in {location}")
    url = _join(location, path)
    local = location[len("file://") :] if location.startswith("file://") else location
    if "://" not in local and os.path.islink(os.path.join(local, path)):
        inside = os.path.realpath(os.path.join(local, path))
        if os.path.dirname(inside) != os.path.realpath(local):
            raise BuildInputError(f"shard path outside the build: {path!r} in {location} (a link)")
    return url


def shard_urls(location: str, manifest: dict[str, Any] | None = None) -> list[str]:
    """The URLs of a build's shards, in order (:func:`shard_url`)."""
    manifest = manifest if manifest is not None else load_manifest(location)
    return [shard_url(location, shard["path"]) for shard in manifest["shards"]]


@dataclasses.dataclass(frozen=True)
class BuildFiles:
    """What a path names: the build's manifest (``None`` for a shard given
    without one beside it) and shard paths, in order."""

    manifest: dict[str, Any] | None
    shards: list[str]
    whole: bool  # every shard of the build, not one shard given alone


_MANIFEST_KEYS = ("image_token_id", "bos_id", "eos_id", "pad_id")
_SHARD_KEYS = {"path": str, "samples": int, "bytes": int, "sha256": str}


def _integer(manifest: dict[str, Any], key: str, low: int, high: int) -> int:
    value = manifest.get(key)
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{key} is {value!r}, not an integer in [{low}, {high}]")
    return value


def check_manifest(manifest: Any) -> None:
    """Raise ``ValueError`` naming the first field of a manifest whose type or
    range is wrong: every field a reader uses is checked here, once, for
    ``stats``, ``report``, ``inspect``, ``train data`` and ``energon-prepare``.

    >>> check_manifest({"seq_len": 64, "tokens_per_image": 0})
    Traceback (most recent call last):
    ...
    ValueError: tokens_per_image is 0, not an integer in [1, 64]
    """
    if not isinstance(manifest, dict):
        raise ValueError("not a JSON object")
    seq_len = _integer(manifest, "seq_len", 1, MAX_SEQ_LEN)
    _integer(manifest, "tokens_per_image", 1, seq_len)
    for key in _MANIFEST_KEYS:
        _integer(manifest, key, -1, (1 << 31) - 1)
    if "max_images_per_sample" in manifest:
        _integer(manifest, "max_images_per_sample", 0, seq_len)
    size = manifest.get("image_size", 1)
    sides = size if isinstance(size, list) and len(size) == 2 else [size]
    if not all(type(side) is int and 0 < side <= MAX_IMAGE_SIZE for side in sides):
        raise ValueError(f"image_size is {size!r}")
    for key in ("format", "corpus"):
        if key in manifest and not isinstance(manifest[key], str):
            raise ValueError(f"{key} is {manifest[key]!r}, not a string")
    tokenizer = manifest.get("tokenizer")
    if tokenizer is not None and not (
        isinstance(tokenizer, dict)
        and isinstance(tokenizer.get("path", ""), (str, type(None)))
        and isinstance(tokenizer.get("sha256", ""), (str, type(None)))
    ):
        raise ValueError(f"tokenizer is {tokenizer!r}")
    if not isinstance(manifest.get("shards"), list):
        raise ValueError(f"shards is {manifest.get('shards')!r}, not a list")
    for number, shard in enumerate(manifest["shards"]):
        if not isinstance(shard, dict):
            raise ValueError(f"shard {number} is {shard!r}")
        for key, kind in _SHARD_KEYS.items():
            if type(shard.get(key)) is not kind:
                raise ValueError(f"shard {number}'s {key} is {shard.get(key)!r}")


def locate(path: str, need_manifest: bool = True, verify: bool = False) -> BuildFiles:
    """The manifest and shards of a build directory, a ``manifest.json``, or one
    shard (whose build's manifest sits beside it, if ``need_manifest``).

    Raises :class:`BuildInputError` for a path that is none of these, a manifest
    that is not a corpora manifest (a field of the wrong type among them), a
    listed shard that is missing or outside the build, and, with ``verify``,
    a shard that does not match its manifest entry (:func:`check_shard`).
    """
    if os.path.isdir(path):
        manifest_path, given = os.path.join(path, MANIFEST), None
    elif os.path.isfile(path) and path.endswith(".tar"):
        manifest_path, given = os.path.join(os.path.dirname(os.path.abspath(path)), MANIFEST), path
    elif os.path.isfile(path):
        manifest_path, given = path, None
    else:
        raise BuildInputError(f"not found: {path}")
    if not os.path.isfile(manifest_path):
        if given is not None and not need_manifest:
            return BuildFiles(None, [given], whole=False)
        raise BuildInputError(f"no {MANIFEST} in {os.path.dirname(manifest_path) or '.'}")
    manifest = load_manifest(manifest_path)
    listed = [shard["path"] for shard in manifest["shards"]]
    if given is not None:
        build = BuildFiles(manifest, [given], whole=[os.path.basename(given)] == listed)
    else:
        shards = shard_urls(os.path.dirname(os.path.abspath(manifest_path)), manifest)
        for shard in shards:
            if not os.path.isfile(shard):
                raise BuildInputError(f"shard listed in the manifest is missing: {shard}")
        build = BuildFiles(manifest, shards, whole=True)
    if verify:
        for shard in build.shards:
            check_shard(shard, manifest)
    return build


def check_shard(url: str, manifest: dict[str, Any]) -> None:
    """Check the shard at ``url`` against its entry in ``manifest`` (size, then
    sha256 and sample count: :func:`verify_shard`); :class:`BuildInputError`
    in one line naming the shard, also for a shard the manifest does not list."""
    name = url.rsplit("/", 1)[-1]
    entry = next((s for s in manifest["shards"] if s["path"] == name), None)
    if entry is None:
        raise BuildInputError(f"{url} is not listed in its build's {MANIFEST}")
    try:
        verify_shard(url, entry)
    except ShardMismatch as exc:
        raise BuildInputError(f"shard does not match the manifest: {exc}") from None
    except OSError as exc:
        raise BuildInputError(f"unreadable shard {url}: {exc}") from None


def _decode_image(data: bytes, url: str, key: str):
    try:
        image = open_image(data)
        if image.width * image.height > MAX_IMAGE_PIXELS:
            raise ValueError(f"a stored image of {image.width}x{image.height} pixels")
        image.load()
    except Exception as exc:  # Pillow raises many types for data that is no image
        raise ValueError(f"{url}: sample {key}: an image that does not decode ({exc})") from None
    return image


def to_sample(raw: dict[str, Any], url: str, decode_images: bool = True) -> Sample:
    missing = [name for name in ARRAYS if name not in raw]
    if missing:
        raise ValueError(f"{url}: sample {raw['__key__']} has no {', '.join(missing)}")
    shapes = {raw[name].shape for name in ARRAYS}
    if len(shapes) != 1:
        raise ValueError(f"{url}: sample {raw['__key__']} has arrays of shapes {sorted(shapes)}")
    images = raw["images"]
    described = raw.get("json", {})
    documents = described.get("documents", []) if isinstance(described, dict) else None
    if not isinstance(documents, list) or not all(isinstance(d, dict) for d in documents):
        raise ValueError(f"{url}: sample {raw['__key__']} has no list of documents in its json")
    return Sample(
        key=raw["__key__"],
        url=url,
        input_ids=raw["input_ids"],
        segment_ids=raw["segment_ids"],
        positions=raw["positions"],
        images=[_decode_image(data, url, raw["__key__"]) for data in images]
        if decode_images
        else list(images),
        documents=list(documents),
    )


def iter_samples(urls: str | Iterable[str], decode_images: bool = True) -> Iterator[Sample]:
    """The samples of the shards at ``urls`` (brace patterns expand), in order."""
    for url in expand_urls(list(urls) if not isinstance(urls, str) else urls):
        with open_url(url) as stream:
            for raw in iter_tar_samples(stream):
                yield to_sample(raw, url, decode_images)


class _Hashing(io.RawIOBase):
    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        self.sha256.update(data)
        self.size += len(data)
        return len(data)


def _local_size(url: str) -> int | None:
    path = url[len("file://") :] if url.startswith("file://") else url
    return os.path.getsize(path) if "://" not in path else None


def verify_shard(url: str, entry: dict[str, Any]) -> None:
    """Check a shard against its manifest entry: its size (``bytes``), its
    sha256 and its sample count, each where the entry gives it. Raises
    :class:`ShardMismatch` naming the shard and what differs; a shard cut
    short, at a member boundary or not, differs in size."""
    expected = entry.get("bytes")
    size = _local_size(url)
    if expected is not None and size is not None and size != expected:  # without reading it
        raise ShardMismatch(f"{url}: {size} bytes, the manifest says {expected}")
    with open_url(url) as stream:
        hashing = _Hashing(stream)
        try:
            count: int | None = sum(
                1
                for _ in iter_tar_samples(io.BufferedReader(hashing, 1 << 20))  # type: ignore[arg-type]
            )
            problem = None
        except (tarfile.TarError, ValueError, EOFError, zlib.error) as exc:
            count, problem = None, exc
        while hashing.readinto(bytearray(1 << 20)):  # tar padding after the last member
            pass
    if expected is not None and hashing.size != expected:
        raise ShardMismatch(f"{url}: {hashing.size} bytes, the manifest says {expected}")
    digest = hashing.sha256.hexdigest()
    if entry.get("sha256") is not None and digest != entry["sha256"]:
        raise ShardMismatch(f"{url}: sha256 {digest}, the manifest says {entry['sha256']}")
    if problem is not None:
        raise ShardMismatch(f"{url}: unreadable shard ({problem})")
    if entry.get("samples") is not None and count != entry["samples"]:
        raise ShardMismatch(f"{url}: {count} samples, the manifest says {entry['samples']}")


def verify_build(location: str) -> list[str]:
    """Check every shard of a build against its manifest; the problems found
    (missing, mismatched or outside the build), empty when the build is intact."""
    problems = []
    try:
        manifest = load_manifest(location)
        urls = shard_urls(location, manifest)
    except BuildInputError as exc:
        return [str(exc)]
    for url, entry in zip(urls, manifest["shards"]):
        try:
            verify_shard(url, entry)
        except (OSError, ShardMismatch) as exc:
            problems.append(str(exc) if isinstance(exc, ShardMismatch) else f"{url}: {exc}")
        except Exception as exc:  # a manifest entry of the wrong types
            problems.append(f"{url}: unreadable shard ({exc})")
    return problems


def text_decoder(manifest: dict[str, Any] | None) -> Callable[[Sequence[int]], str] | None:
    """Token ids → text with the build's tokenizer, or ``None`` when the
    manifest names no tokenizer that is on this machine."""
    path = ((manifest or {}).get("tokenizer") or {}).get("path")
    if not path or not os.path.isfile(path):
        return None
    import sentencepiece as spm

    try:
        processor = spm.SentencePieceProcessor(model_file=path)
    except Exception:  # the manifest names a file that is not a SentencePiece model
        raise BuildInputError(
            f"the manifest's tokenizer {path} is not a SentencePiece model"
        ) from None
    size = processor.get_piece_size()
    return lambda ids: processor.decode([int(i) for i in ids if 0 <= int(i) < size])


def segment_parts(
    run, image_token: int | None, tokens_per_image: int, bos: int | None, eos: int | None
) -> list[tuple]:
    """One segment's ids as a reader sees them, in order: ``("bos",)``,
    ``("image", slots)`` per image (adjacent images have adjacent slot runs,
    each ``tokens_per_image`` long), ``("text", ids)``, ``("eos",)``.

    >>> segment_parts([1, 9, 9, 9, 9, 5, 6, 2], image_token=9, tokens_per_image=2, bos=1, eos=2)
    [('bos',), ('image', 2), ('image', 2), ('text', [5, 6]), ('eos',)]
    """
    parts: list[tuple] = []
    text: list[int] = []
    position = 0
    while position < len(run):
        token = int(run[position])
        if token == image_token or token in (bos, eos):
            if text:
                parts.append(("text", text))
                text = []
        if token == image_token:
            end = position
            while (
                end < len(run)
                and int(run[end]) == image_token
                and end - position < tokens_per_image
            ):
                end += 1
            parts.append(("image", end - position))
            position = end
            continue
        if token == bos:
            parts.append(("bos",))
        elif token == eos:
            parts.append(("eos",))
        else:
            text.append(token)
        position += 1
    if text:
        parts.append(("text", text))
    return parts


def hf_features(manifest: dict[str, Any]):
    """The Hugging Face ``datasets`` features of a build's shards.

    Samples hold different numbers of images, and ``load_dataset("webdataset")``
    infers its schema from the first five samples only; pass these instead::

        load_dataset("webdataset", data_files=urls, features=hf_features(manifest))

    Image columns ``img000.jpg`` … up to ``max_images_per_sample`` are ``None``
    where a sample holds fewer images.
    """
    import datasets

    if not hasattr(datasets, "Json"):
        raise ImportError(
            "hf_features needs a datasets release with the Json feature; "
            f"found {datasets.__version__}"
        )
    seq_len = int(manifest["seq_len"])
    array = datasets.List(datasets.Value("int32"), length=seq_len)
    features = {f"{name}.npy": array for name in ARRAYS}
    for i in range(int(manifest["max_images_per_sample"])):
        features[f"img{i:03d}.jpg"] = datasets.Image()
    features["json"] = datasets.Json()
    features["__key__"] = datasets.Value("string")
    features["__url__"] = datasets.Value("string")
    return datasets.Features(features)
