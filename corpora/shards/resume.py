"""Resuming an interrupted build.

A build records what shapes its bytes in ``{output}/.corpora/build.json``
before it starts; each shard, once renamed into place, gets a marker
``{output}/.corpora/shards/{name}.json`` with its counts and sha256. Running
the same command again re-reads, re-fetches, re-tokenizes and re-packs
everything (the shard a sequence lands in depends on the whole packing),
then skips every shard whose marker matches the shard it would write, and
writes the rest. The result is byte for byte the uninterrupted build.

Settings that differ from the recorded ones are refused (the shards on disk
would not belong to the new build) unless the user asks to overwrite.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from corpora import FORMAT
from corpora.config.settings import BuildSettings
from corpora.tokens.tokenizer import TokenizerInfo

STATE_DIR = ".corpora"
BUILD_STATE = f"{STATE_DIR}/build.json"
SHARD_MARKERS = f"{STATE_DIR}/shards"
# Settings that say where a build reads, not what it writes: the bundled sample
# is materialised into a new temporary directory on every run; the image store
# and an img2dataset download are where images are found (corpora.store.settings).
_NOT_SHAPING = ("output", "store")
# how often a worker reports, not what it fetches; whether it hashes follows from the
# dedup options, which are recorded themselves
_FETCH_NOT_SHAPING = ("progress_interval", "perceptual_hash")


class SettingsChanged(ValueError):
    """The output holds a build made with other settings."""


def fingerprint(settings: BuildSettings, tokenizer: TokenizerInfo) -> dict[str, Any]:
    """Everything that shapes the shard bytes of a build."""
    shaping = {k: v for k, v in settings.as_manifest().items() if k not in _NOT_SHAPING}
    shaping["fetch"] = {k: v for k, v in shaping["fetch"].items() if k not in _FETCH_NOT_SHAPING}
    return {
        "format": FORMAT,
        "settings": json.loads(
            json.dumps(shaping)
        ),  # as it reads back from build.json: lists, not tuples
        "tokenizer_sha256": tokenizer.sha256,
        "image_token_id": tokenizer.image_token_id,
        "pad_id": tokenizer.pad_id,
    }


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def changes(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between two fingerprints, one readable item per setting.

    >>> changes({"settings": {"seq_len": 2048}}, {"settings": {"seq_len": 1024}})
    ['settings.seq_len: 2048 -> 1024']
    """
    old, new = _flatten(previous), _flatten(current)
    return [
        f"{key}: {old.get(key, '(unset)')} -> {new.get(key, '(unset)')}"
        for key in sorted(set(old) | set(new))
        if old.get(key) != new.get(key)
    ]


def check_same_build(
    previous: Mapping[str, Any] | None, current: Mapping[str, Any], output: str
) -> None:
    """Raise :class:`SettingsChanged` when ``output`` was built with other settings."""
    if previous is None:
        return
    differences = changes(previous, current)
    if differences:
        shown = "; ".join(differences[:3]) + (
            f"; and {len(differences) - 3} more" if len(differences) > 3 else ""
        )
        raise SettingsChanged(
            f"{output} holds a build with other settings ({shown}); "
            "re-run with --overwrite to replace it, or choose another --output"
        )


def marker_name(shard_name: str) -> str:
    return f"{SHARD_MARKERS}/{shard_name}.json"


def is_complete(marker: Mapping[str, Any] | None, info: Mapping[str, Any]) -> bool:
    """Whether a shard on disk, described by its ``marker``, is the shard described
    by ``info`` (what this run would write): same size and sha256."""
    return marker is not None and all(
        marker.get(k) == info[k] for k in ("bytes", "sha256", "samples")
    )
