"""The one reading path on random and mutated builds (issue 30): whatever a
manifest field or a shard's bytes hold, reading a build either works or
raises :class:`~corpora.reader.BuildInputError` (a ``ValueError``) with a
one-line message, never another exception; ``tests/cli/test_hostile_builds.py``
runs each reader command on the planted cases."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpora import reader
from corpora.stats import figures as stats
from tests.corpora.shards.built import write_build
from tests.fuzz_inputs import json_values

FIELDS = [
    "seq_len",
    "tokens_per_image",
    "image_token_id",
    "bos_id",
    "eos_id",
    "pad_id",
    "image_size",
    "max_images_per_sample",
    "tokenizer",
    "shards",
    "format",
    "corpus",
]
SHARD = "mmc4-pairs-000000.tar"


def _read_everything(build: str) -> None:
    """What ``stats`` and ``inspect`` do: every sample of every shard, images decoded."""
    located = reader.locate(build, verify=True)
    for sample in reader.iter_samples(located.shards):
        assert sample.input_ids.shape == sample.segment_ids.shape
    stats.stats_from_shards(build)


def _read_or_refuse_in_one_line(build: str) -> None:
    try:
        _read_everything(build)
    except ValueError as exc:
        assert isinstance(exc, reader.BuildInputError) or type(exc) is ValueError, repr(exc)
        assert "\n" not in str(exc)
    finally:
        shutil.rmtree(build)


def _edit_manifest(build: str, change) -> None:
    path = os.path.join(build, "manifest.json")
    with open(path) as handle:
        manifest = json.load(handle)
    change(manifest)
    with open(path, "w") as handle:
        json.dump(manifest, handle)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=json_values())
def test_a_manifest_field_of_any_value_is_read_or_refused_in_one_line(tmp_path, field, value):
    build = tempfile.mkdtemp(dir=tmp_path)
    write_build(build)
    _edit_manifest(build, lambda manifest: manifest.update({field: value}))
    _read_or_refuse_in_one_line(build)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_shard_with_mutated_bytes_is_read_or_refused_in_one_line(tmp_path, data):
    """Bytes flipped, cut or inserted anywhere in a shard (its tar headers,
    its .npy headers, its json, its images), with the manifest's size and
    sha256 made to match, as an attacker would."""
    build = tempfile.mkdtemp(dir=tmp_path)
    write_build(build)
    path = os.path.join(build, SHARD)
    raw = bytearray(open(path, "rb").read())
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(0, len(raw) - 1))
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip":
            raw[where] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del raw[where : where + data.draw(st.integers(1, 600))]
        else:
            raw[where:where] = data.draw(st.binary(min_size=1, max_size=64))
    with open(path, "wb") as handle:
        handle.write(raw)
    matching = {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
    _edit_manifest(
        build,
        lambda manifest: next(e for e in manifest["shards"] if e["path"] == SHARD).update(matching),
    )
    _read_or_refuse_in_one_line(build)
