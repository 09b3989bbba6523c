"""The flags of ``corpora build``, mapped onto :class:`~corpora.config.settings.BuildSettings`.

:func:`settings_from_flags` is what ``corpora build CORPUS --flag …`` builds,
callable from Python with the flags named as the command line names them,
dashes as underscores (``seq_len=512`` for ``--seq-len 512``, ``inputs=(…)``
for ``--input``). A flag left out, or given as ``None``, keeps its default.
The rules that concern more than one setting live here, not in the CLI:

- a corpus option (:mod:`corpora.config.spec`) applies only to the corpora whose spec
  declares it; any other corpus refuses it;
- ``--min-clip-sim`` has two meanings: with ``--clip-model``, the lowest
  computed CLIP score kept; without it, the corpus option of that name (coyo:
  its precomputed similarity sum);
- ``--max-aspect-ratio`` is checked on every decoded image and, for a corpus
  with that option, on the source's own width and height before any download;
- without ``--input`` a corpus with a bundled sample builds it, and may read
  the sample's images, local files (``--allow-local-files`` of its folder);
- ``--image-token-id`` and ``--pad-id`` are checked against the tokenizer
  (:func:`corpora.tokens.tokenizer.check_special_ids`; ``--image-token-reserved``
  lets the image token id be a vocabulary piece set aside for images);
- ``--smoke`` sets laptop-sized defaults (:func:`corpora.config.settings.smoke`): a
  flag of :data:`SMOKE_FLAGS` given beside it wins, and its output folder is
  ``corpora-out/smoke/CORPUS``.

Every refusal is a :class:`FlagError` whose message is one line for the user.

>>> built = settings_from_flags("mmc4", inputs=("docs.jsonl",), output="/out", max_images=3)
>>> built.corpus_options["max_images"], built.seq_len, built.fetch.image_size
(3, 2048, 336)
>>> settings_from_flags("c4", inputs=("c4.json.gz",), min_sim=0.3)
Traceback (most recent call last):
...
corpora.config.flags.FlagError: --min-sim does not apply to c4 (only to mmc4, mmc4-reordered)
>>> settings_from_flags("c4", inputs=("c4.json.gz",), seq_lenght=100)
Traceback (most recent call last):
...
corpora.config.flags.FlagError: no such flag: seq_lenght (did you mean seq_len?)
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any

from corpora import stages
from corpora.config import catalog
from corpora.config.bundled_sample import SAMPLE_IMAGES, sample_directory
from corpora.config.settings import (
    DEFAULTS,
    SAMPLE_TOKENIZER,
    BuildSettings,
    corpus_settings,
    smoke,
)
from corpora.config.spec import CLIP_DOCUMENTS, CLIP_PAIRS
from corpora.fetch.settings import REASONS, is_fetch_reason
from corpora.stats.funnel import current_reason
from corpora.store.files import reachable
from corpora.store.settings import STORE_FOLDER, StoreSettings

PROGRESS_EVERY = 30.0  # seconds between progress lines, the command line's default

# Flags that set a field of BuildSettings of the same name.
BUILD_FLAGS = (
    "tokenizer",
    "seq_len",
    "tokens_per_image",
    "image_token_id",
    "pad_id",
    "image_token_reserved",
    "samples_per_shard",
    "pack_groups",
    "pack",
    "max_line_bytes",
)
# flag → FetchSettings field (``ignore_opt_out`` sets ``respect_opt_out`` to its opposite).
FETCH_FLAGS = {
    "image_size": "image_size",
    "resize_mode": "resize_mode",
    "allow_private_urls": "allow_private_urls",
    "progress_every": "progress_interval",
    "fetch_concurrency": "concurrency",
    "per_host_concurrency": "per_host_concurrency",
    "per_host_rate": "per_host_rate",
    "connect_timeout": "connect_timeout",
    "read_timeout": "read_timeout",
    "total_timeout": "total_timeout",
    "max_image_bytes": "max_bytes",
    "max_attempts": "max_attempts",
    "min_image_size": "min_image_size",
    "max_aspect_ratio": "max_aspect_ratio",
    "max_pixels": "max_pixels",
    "jpeg_quality": "jpeg_quality",
    "user_agent": "user_agent",
    "contact": "contact",
    "ignore_opt_out": "respect_opt_out",
    "tdmrep": "tdmrep",
    "allow_network": "allow_networks",
    "allow_local_files": "allow_local_files",
    "retry_failures": "retry_failures",
    "retry_reason": "retry_reasons",
}
# flag → ClipSettings option (``clip_model`` and ``clip_pretrained`` name the model).
CLIP_FLAGS = {
    "clip_batch_size": "batch_size",
    "clip_device": "device",
    "min_clip_sim": "min_sim",
    "clip_top_fraction": "top_fraction",
    "save_embeddings": "save_embeddings",
}
# The image store and an img2dataset download (StoreSettings).
STORE_FLAGS = ("image_store", "no_image_store", "refetch_failures", "images_from", "images_absent")
OTHER_FLAGS = ("inputs", "output", "smoke", "clip_model", "clip_pretrained")
# The flags whose defaults --smoke changes (a value given for one of them wins).
SMOKE_FLAGS = ("seq_len", "tokens_per_image", "samples_per_shard", "image_size")


class FlagError(ValueError):
    """Flags that cannot make a build; the message is one line for the user."""


def flag_names() -> tuple[str, ...]:
    """Every flag :func:`settings_from_flags` takes, corpus options included."""
    names = (
        *OTHER_FLAGS,
        *BUILD_FLAGS,
        *FETCH_FLAGS,
        *CLIP_FLAGS,
        *STORE_FLAGS,
        *catalog.options(),
        *stages.options(),
    )
    return tuple(dict.fromkeys(names))


def dashed(name: str) -> str:
    """``seq_len`` → ``--seq-len`` (``inputs`` → ``--input``)."""
    return "--" + ("input" if name == "inputs" else name).replace("_", "-")


def settings_from_flags(corpus: str, **flags: Any) -> BuildSettings:
    """The settings ``corpora build CORPUS`` builds from ``flags`` (module doc)."""
    try:
        spec = catalog.get(corpus)
    except KeyError as exc:
        raise FlagError(exc.args[0]) from None
    _refuse_unknown(flags)
    given = {name: value for name, value in flags.items() if value is not None}
    if given.get("smoke"):
        given = _smoke_defaults(given)
    fields = {name: given[name] for name in BUILD_FLAGS if name in given}
    _check_tokenizer(fields.setdefault("tokenizer", SAMPLE_TOKENIZER))
    _check_special_ids(fields)
    clip = _clip_settings(corpus, given)
    options = _corpus_options(corpus, given, clip_given="clip_model" in given)
    options.update({name: given[name] for name in stages.options() if name in given})
    # a --smoke build has a folder of its own: one made with the full settings is not refused
    default = ("corpora-out", "smoke", corpus) if given.get("smoke") else ("corpora-out", corpus)
    output = given.get("output") or os.path.join(*default)
    if "://" not in output:
        output = os.path.abspath(output)
    inputs = tuple(given.get("inputs") or ())
    if not inputs:
        if spec.sample is None:
            having = [name for name, other in catalog.CORPORA.items() if other.sample is not None]
            raise FlagError(
                f"--input is required for {corpus} (the bundled sample is for "
                f"{', '.join(having) or 'no corpus'})"
            )
        inputs = (spec.sample(sample_directory()),)
        # the sample's images are local files: the one folder it may read
        given["allow_local_files"] = (*given.get("allow_local_files", ()), SAMPLE_IMAGES)
    try:
        settings = corpus_settings(corpus, inputs, output, clip=clip, **fields, **options)
        settings = settings.replace(
            fetch=_fetch_settings(settings, given), store=store_settings(output, given)
        )
        stages.check_settings(settings)
    except ValueError as exc:
        raise FlagError(str(exc)) from None
    return settings


def _smoke_defaults(given: dict[str, Any]) -> dict[str, Any]:
    """``given`` with --smoke's values for the flags of :data:`SMOKE_FLAGS` it
    does not hold (:func:`corpora.config.settings.smoke` of the defaults).

    >>> _smoke_defaults({"seq_len": 512})
    {'seq_len': 512, 'tokens_per_image': 16, 'samples_per_shard': 8, 'image_size': 64}
    """
    small = smoke(DEFAULTS)
    values = {name: getattr(small, name) for name in SMOKE_FLAGS if name != "image_size"}
    return {**values, "image_size": small.fetch.image_size, **given}


def _refuse_unknown(flags: dict[str, Any]) -> None:
    known = flag_names()
    for name in flags:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise FlagError(f"no such flag: {name}{hint}")


def _corpus_options(corpus: str, given: dict[str, Any], clip_given: bool) -> dict[str, Any]:
    """The corpus options among ``given``, refusing those of other corpora."""
    spec = catalog.get(corpus)
    options = {}
    for name in catalog.options():
        if name not in given or (name == "min_clip_sim" and clip_given):
            continue  # not given, or the CLIP stage's threshold
        if spec.option(name) is not None:
            options[name] = given[name]
        elif name == "min_clip_sim":
            users = catalog.option_users(name)
            raise FlagError(
                "--min-clip-sim needs --clip-model (without it, only "
                f"{', '.join(users)} {'has' if len(users) == 1 else 'have'} precomputed scores)"
            )
        elif name not in FETCH_FLAGS:  # a fetch flag applies to every corpus
            users = ", ".join(catalog.option_users(name))
            raise FlagError(f"{dashed(name)} does not apply to {corpus} (only to {users})")
    return options


def _clip_settings(corpus: str, given: dict[str, Any]):
    """``ClipSettings`` for the CLIP flags, or ``None`` without ``--clip-model``."""
    model = given.get("clip_model")
    if model is None:
        for name in ("clip_pretrained", "clip_top_fraction", "save_embeddings"):
            if given.get(name):
                raise FlagError(f"{dashed(name)} needs --clip-model")
        return None
    use = catalog.get(corpus).clip
    pairs, documents = catalog.clip_corpora(CLIP_PAIRS), catalog.clip_corpora(CLIP_DOCUMENTS)
    if use is None:
        raise FlagError(
            f"--clip-model scores image-text pairs or documents "
            f"({', '.join(pairs + documents)}), not {corpus}"
        )
    if use == CLIP_DOCUMENTS:
        # a global top fraction of images inside documents is not defined; embeddings rows are pairs
        for name in ("clip_top_fraction", "save_embeddings"):
            if given.get(name):
                raise FlagError(
                    f"{dashed(name)} applies to pair corpora ({', '.join(pairs)}), not to "
                    f"{corpus} documents (use --min-clip-sim to remove their low-scoring images)"
                )
    if given.get("clip_pretrained") is None:
        raise FlagError(
            "--clip-model needs --clip-pretrained (an open_clip tag such as openai, "
            "or a local checkpoint file)"
        )
    from corpora import clip

    options = {option: given[name] for name, option in CLIP_FLAGS.items() if name in given}
    try:
        return clip.clip_settings(model, given["clip_pretrained"], **options)
    except ValueError as exc:  # ClipModelError among them
        raise FlagError(str(exc)) from None


def _fetch_settings(settings: BuildSettings, given: dict[str, Any]):
    changes: dict[str, Any] = {"progress_interval": PROGRESS_EVERY}
    for name, field in FETCH_FLAGS.items():
        if name not in given:
            continue
        value = given[name]
        if name == "ignore_opt_out":
            value = not value
        elif name == "allow_network":
            value = tuple(value)
        elif name == "retry_reason":
            value = tuple(_retry_reason(reason) for reason in value)
        elif name == "allow_local_files":
            value = tuple(_local_directory(directory) for directory in value)
        elif name == "retry_failures" and "://" not in value:
            value = os.path.abspath(value)
        changes[field] = value
    return dataclasses.replace(settings.fetch, **changes)


def _retry_reason(reason: str) -> str:
    """A ``--retry-reason``, refused unless an image fetch can fail with it
    (a mistyped one would select no URL, and the build would keep nothing).

    >>> _retry_reason("http_404")
    'http_404'
    >>> _retry_reason("file_not_foud")
    Traceback (most recent call last):
    ...
    corpora.config.flags.FlagError: --retry-reason file_not_foud: no fetch fails with it (did you mean file_not_found?)
    """  # noqa: E501
    if is_fetch_reason(current_reason(reason)):
        return reason
    close = difflib.get_close_matches(reason, REASONS, n=1)
    hint = f"did you mean {close[0]}?" if close else f"one of {', '.join(REASONS)}, or http_NNN"
    raise FlagError(f"--retry-reason {reason}: no fetch fails with it ({hint})")


def _local_directory(given: str) -> str:
    """An ``--allow-local-files`` directory as the fetch compares paths with:
    absolute, every symbolic link resolved."""
    if not os.path.isdir(given):
        raise FlagError(f"--allow-local-files {given}: not a directory")
    return os.path.realpath(given)


def store_settings(output: str, given: dict[str, Any]) -> StoreSettings:
    """The image store and download of a build writing to ``output``: the
    store is ``OUTPUT/image-store`` unless ``--image-store`` names another
    or ``--no-image-store`` asks for none. An output in a bucket that fsspec
    cannot open here (gs:// needs gcsfs, s3:// s3fs) gets none, and ``off``
    says why.

    >>> store_settings("/out", {}).uri
    '/out/image-store'
    >>> store_settings("/out", {"no_image_store": True, "refetch_failures": True})
    Traceback (most recent call last):
    ...
    corpora.config.flags.FlagError: --refetch-failures needs an image store (drop --no-image-store)
    """
    uri = given.get("image_store")
    off = None
    if given.get("no_image_store"):
        if uri is not None:
            raise FlagError("--image-store and --no-image-store contradict each other")
        if given.get("refetch_failures"):
            raise FlagError("--refetch-failures needs an image store (drop --no-image-store)")
    elif uri is None:
        if "://" not in output:
            uri = os.path.join(output, STORE_FOLDER)
        elif (why_not := reachable(output)) is None:  # a bucket fsspec can write (gcsfs, s3fs)
            uri = output.rstrip("/") + "/" + STORE_FOLDER
        else:  # said at the start and kept in the manifest, never silently
            off = f"no image store in {output}: {why_not}"
    elif "://" not in uri:
        uri = os.path.abspath(uri)
    for name, where in (("--image-store", uri), ("--images-from", given.get("images_from"))):
        why = reachable(where) if where is not None else None
        if why is not None:
            raise FlagError(f"{name} {where}: {why}")
    images_from = given.get("images_from")
    if images_from is not None and "://" not in images_from:
        images_from = os.path.abspath(images_from)
    absent = given.get("images_absent") or "fetch"
    if absent != "fetch" and images_from is None:
        raise FlagError("--images-absent needs --images-from")
    return StoreSettings(uri, bool(given.get("refetch_failures")), images_from, absent, off)


def _check_tokenizer(path: str) -> None:
    if not os.path.isfile(path):
        raise FlagError(f"tokenizer not found: {path}")
    import sentencepiece as spm

    try:
        spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as exc:
        raise FlagError(
            f"tokenizer is not a readable SentencePiece model: {path} ({str(exc).splitlines()[0]})"
        ) from None


def _check_special_ids(fields: dict[str, Any]) -> None:
    """``--image-token-id`` and ``--pad-id`` against the tokenizer, before anything runs."""
    from corpora.tokens.tokenizer import ModelIds, SpecialIdError, check_special_ids

    try:
        check_special_ids(
            ModelIds.read(fields["tokenizer"]),
            fields.get("image_token_id"),
            fields.get("pad_id"),
            fields.get("image_token_reserved", False),
        )
    except SpecialIdError as exc:
        raise FlagError(str(exc)) from None


def describe_clip(settings: BuildSettings) -> str | None:
    """Load the build's CLIP model once, so that a bad name or checkpoint fails
    now, in one line, rather than inside a worker; a line that says what scores."""
    if settings.clip is None:
        return None
    from corpora import clip

    try:
        device = clip.resolve_device(settings.clip.device)
        loaded = clip.load_clip(settings.clip, device="cpu")
    except clip.ClipModelError as exc:
        raise FlagError(str(exc)) from None
    return (
        f"CLIP: {settings.clip.model_id}, embedding dim {loaded.embed_dim}, "
        f"batch {settings.clip.batch_size}, device {device}"
    )
