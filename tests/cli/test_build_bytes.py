"""`corpora build` of every corpus writes the same bytes as the code it was recorded on.

Each build runs the CLI on the fixture corpora of :mod:`tests.fixtures`, with
images from the loopback server of :mod:`tests.servers` on a fixed port (the
image URLs are part of the shards, and WIT's record ids hash them), and
compares every shard's sha256 and ``stats.json``'s to values recorded before
issue 12's redesign. The manifest is not compared: it holds a timestamp, and
drop reasons may be renamed.

The values depend on the installed image libraries (the JPEG encoder writes
the image bytes) and on torch (the CLIP builds' scores). Where those change,
``python -m tests.cli.test_build_bytes`` prints the values of the current
code; record them only from code whose output is known to be unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

from tests import fixtures
from tests.clip_model import tiny_clip  # noqa: F401
from tests.helpers import SMALL_BUILD, run_cli
from tests.servers import ImageServer

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PORT = 28417  # outside Linux's ephemeral range; shared with SO_REUSEPORT


def _coyo(directory: str, server: ImageServer) -> str:
    path = os.path.join(directory, "part-00000-17a6ab47-c000.snappy.parquet")
    return fixtures.write_coyo_parquet(path, fixtures.coyo_rows(server))


def _mmc4(directory: str, server: ImageServer) -> str:
    path = os.path.join(directory, "docs_shard_0_v2.jsonl")
    return fixtures.write_mmc4_jsonl(path, fixtures.mmc4_lines(server))


def _c4(directory: str, server: ImageServer) -> str:
    fixtures.write_c4_json_gz(directory, fixtures.c4_lines(), 0, 1024)
    return directory  # a directory, expanded to the corpus's file patterns


def _c4_files(directory: str, server: ImageServer) -> str:
    """The c4 fixture and a second file of 70 documents: a text build's
    packing groups (its reader's batches: 16, 32, then 22 documents of the
    second file) spread over the workers."""
    fixtures.write_c4_json_gz(directory, fixtures.c4_lines(), 0, 2)
    lines = [
        json.dumps(
            {
                "text": " ".join(
                    fixtures.SENTENCES[(i + j) % len(fixtures.SENTENCES)] for j in range(i % 4 + 1)
                ),
                "timestamp": "2019-04-25T00:00:00Z",
                "url": f"https://example.org/c4/many/{i}",
            }
        ).encode("utf-8")
        for i in range(1, 71)
    ]
    fixtures.write_c4_json_gz(directory, lines, 1, 2)
    return directory


def _wit(directory: str, server: ImageServer) -> str:
    path = os.path.join(directory, "wit_v1.train.all-00000-of-00010.tsv.gz")
    return fixtures.write_wit_tsv_gz(path, fixtures.wit_rows(server))


# name → (corpus, input writer, flags)
BUILDS = {
    "coyo": ("coyo", _coyo, ("--max-nsfw", "0.5", "--min-size", "32", "--max-aspect-ratio", "4")),
    "coyo-top": ("coyo", _coyo, ("--min-clip-sim", "0", "--top-fraction", "0.5")),
    "mmc4": ("mmc4", _mmc4, ()),
    "mmc4-reassign": (
        "mmc4",
        _mmc4,
        ("--reassign", "--keep-imageless", "--min-sim", "0.24", "--pack-groups", "2"),
    ),
    "mmc4-reordered": ("mmc4-reordered", _mmc4, ("--min-sim", "0.24", "--max-images", "2")),
    "mmc4-pairs": ("mmc4-pairs", _mmc4, ("--reassign",)),
    "mmc4-pairs-unpacked": ("mmc4-pairs", _mmc4, ("--no-pack",)),
    "c4": ("c4", _c4, ("--pack-groups", "3")),  # groups by key: the documents stashed
    "c4-read-groups": ("c4", _c4_files, ()),  # packed where tokenized, in the reader's batches
    "wit": ("wit", _wit, ("--caption", "best", "--with-context", "--languages", "en,fr")),
}

# name → (corpus, input writer, flags); CLIP flags are added with the tiny model
CLIP_BUILDS = {
    "wit-clip": ("wit", _wit, ("--min-clip-sim", "-0.5", "--clip-top-fraction", "0.8")),
    "mmc4-clip": (
        "mmc4",
        _mmc4,
        (
            "--min-clip-sim",
            "-0.2",
        ),
    ),
}


def build_digests(name: str, spec: tuple, directory: str, server: ImageServer, *extra: str) -> dict:
    """Build one entry of ``BUILDS`` in ``directory``: the sha256 of each shard, in
    shard order, and of stats.json."""
    corpus, write_input, flags = spec
    inputs = os.path.join(directory, "input")
    os.makedirs(inputs)
    output = os.path.join(directory, "out")
    given = write_input(inputs, server)
    result = run_cli(
        "build", corpus, "--input", given, "--output", output, *SMALL_BUILD, *flags, *extra
    )
    assert result.returncode == 0, f"{name}: {result.stderr}"

    def sha256(file: str) -> str:
        with open(os.path.join(output, file), "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    # the stash (records, documents, images by reference) is gone once the build is done
    assert not {"records", "documents", "images"} & set(
        os.listdir(os.path.join(output, ".corpora"))
    )
    shards = sorted(file for file in os.listdir(output) if file.endswith(".tar"))
    assert shards == [f"{corpus}-{index:06d}.tar" for index in range(len(shards))]
    return {"shards": [sha256(file) for file in shards], "stats.json": sha256("stats.json")}


def clip_flags(tiny) -> tuple[str, ...]:
    return ("--clip-model", tiny.config_path, "--clip-pretrained", tiny.checkpoint)


# Recorded on the code before issue 12 (commit efe92c0), apart from mmc4-reassign and
# mmc4-reordered: their documents' metadata counts an image removed by --min-sim under the
# renamed reason (below_min_sim → clip_similarity_below_min, docs/shard-format.md), and a
# document's packing key digests its metadata, so mmc4-reassign's --pack-groups 2 also
# groups and orders its documents differently. Re-recorded on efe92c0 with only that
# reason renamed in corpora/sources/filters.py, which writes exactly these bytes.
#
# Issue 24 re-recorded the shards of the builds that split documents, and every
# stats.json (which gained packing.images_with_text_fraction, pieces_ending_in_image
# and short_pieces_dropped): a split no longer parts an image from its text (coyo,
# coyo-top: long captions at seq_len 96 used to leave [BOS, image] in a piece of its
# own; mmc4, mmc4-clip, mmc4-reassign: images before their sentences), and a piece is
# never shorter than min_piece_tokens (c4: a tail that was the EOS alone). The other
# builds' shards (mmc4-pairs, mmc4-pairs-unpacked, mmc4-reordered, wit, wit-clip) split
# nothing and kept their bytes.
#
# Issue 32 then re-recorded the stats.json of mmc4-reassign and mmc4-reordered, the two
# builds whose --min-sim removes images from kept documents: the funnel of stats.json
# gained images_removed where there are any. Their shards kept their bytes.
#
# Issue 29 added c4-read-groups: a text build without --pack-groups packs each batch of
# its reader where it tokenizes it (no document stashed), in groups that differ from
# the hash groups of a build with --pack-groups, so its bytes are its own; the c4 entry
# (--pack-groups 3, still the stashed path) kept its bytes.
EXPECTED: dict[str, dict] = {
    "c4-read-groups": {
        "shards": [
            "5072b1530a7864db6531f0db9e577cf50b5b83679a80e071a061e9fb83dddbe2",
            "bda43440b4f228e9a92056aa0ebe617b7aafdfa2c1a7a0d4fe26acd3942ea334",
            "516bdb8eb7dd272e327c7fa609efd9c0dcaee73e464af1dac41a6a9b1241b97c",
            "77d24b588a00d6e2fa0566fd83dfcbe0c05876377b7aad6f51a6ef31387e1229",
            "06539d12b79c8e26721f29a4fdf4f4a4700b62fb97776445d92febb2b0b434d4",
            "36790302b0d8d0418d37373281a123ded8bd7cc85c2a446e68d861f7544f3ba7",
            "095e5fce80b9e0b4cf57037e6d93484442b5f6aeb6cf37f9a4d192f2a9ed4b9a",
            "254f33b176ea6c01a92163f738780f2c6ead98978bb6f5d3877f6f9a9a877168",
            "c5222c1e8d6236d3e6954061069c5ee72f86a089e1b797aa1812f13974acc747",
            "ad46085e5127f636763d4725a91e43610e2f41d6e077dbad34391177505ae97d",
            "72a335e4c6a67ff70bf8764d9cdcf30e44797fde33bff28488b0e370cb066136",
            "540bf07757d89293d789ccfa1e7090a0e2c064e0899406ea13e5e73c283f44c1",
            "a2f9d80263bec17944de55ad89f9c55f82e2a892de98c697b42a22539d228cc5",
            "f6a55446ab82b4712cdac4c9ea368357ae5a5b1a449e5ff09a520f08362695ad",
            "ae5758ed438ae25ca439d6f241a25201dd47ff90276c7ffd424e00ad1963dffa",
            "298a3a9329a60a7d58e184d1fcac0da903e86b7b5364c62eae1287ca24ec5913",
            "558d406b86889119dc87ddbec4038264c05737f4ab869d9246e381780957b420",
            "81d2d74c4384fbbf64d01e1733cdd013213095d1c7ff503b1530e14e1f3d1b9c",
            "292e6d515c1e2a1988b5f6e7d8b5e70d9d21fc8984182799b8ea97c49034ef49",
            "9cc42a351bfa4ca08de146831a04f6e7ecc76bc70cb500ba99a379e562e764b5",
            "901221706cad29c681c663e7b90def44c8a256da793aa69f3b09699d49af90a7",
            "769183d1a0642e5c5621d00255f56a2da9b5baf8866d7de42cbdf825d6e5a3e8",
            "413fe6eeba7c8e53d2637895f23d64309767904992ce21bef22bd6c6319ca1fe",
            "22847500b704abfa63cae6f83b52f56216af321d4a409d73483f534f6fa7ae46",
            "e8991d30a74c790a4e552ab910a403f22e5ca406851ef5e48c2afd6ceaac3e00",
            "6e6130054ae90dae1ed6642404c299dc059362f0f0522b5c18fc2bb36b600252",
            "ba24fd8029025d3f3a621321322ddf82955e9c730b91b0cf1e74da94561cbd98",
            "c26876a209fbe831d0cf463482b42b62dfbc1fe72d85bcca16bd611696f6c405",
            "88289fa9248c96b41d99b12df39f5fc02f90babaabf05f086f07ae74132287b5",
        ],
        "stats.json": "00bf864dccf3d47a958856634a971b31dca082bd965d2aa4e098f5a3dadcb268",
    },
    "c4": {
        "shards": [
            "5c3e229cb407789ad711377642a6a97540c37e7b04b790ccca832dd0a5c61c08",
            "a0122c478be13f091dbe22c5d7ccab83ab54a04fcf5186424865c54bec27bb01",
            "0aad976ab4a0cb91e8c974ee30c4e8055c52c1be681421ab5865f60cda026af7",
            "d81005f702f9f7b63b31b4db5a4b320d45b4054ad225bebcb24a5a7b3fa674ba",
            "b2bf268d0f33697709f4871c92476364f45104d64ff3064d3dbbd5831d3c7645",
            "ba61d0860545345acbd52991cfaa026ef3efb5e2b6ef7630e5c09093b7311762",
        ],
        "stats.json": "70d951d6bcacd1a4d336526ab7a818acdf0360d758e615789e23b1fb8635d54b",
    },
    "coyo": {
        "shards": [
            "a67e970c331a2c4166571cf6bc86fea50b1b030e4e18553401ea55092b738a51",
            "8a98147fd96f71c1916cf32f64fb4c73b2d258c4e6dd9d66d17d9833ccc5cb00",
        ],
        "stats.json": "8b9a4c1523a9fd465aff7441413c2e680c5f3b87d73d4be416269846f5ea1889",
    },
    "coyo-top": {
        "shards": [
            "af0d27bb57d2725f25e6da562e628c394b3b4fee115056c59d741746f782635b",
            "598b828b789b4d3969cd81e33b145efd37fb9158d9e0ebfe135c4b7251f8edb7",
        ],
        "stats.json": "224d7ec98305b93f6be9ba12c31b232fd0be7c09eafaa4d10e376e15966594a6",
    },
    "mmc4": {
        "shards": [
            "2d077a823047406903ac6d85260ce76bfe9adef68dbaac8bc5667e03dddb2b81",
            "01d5e56378b67f732247e9f1057b172d04e12961e8ce6fb8a0bc2731fa2d43f6",
        ],
        "stats.json": "ead830094fda2b62113225f0c8b55082a0796b079a1495ab6450c6414b0ccb55",
    },
    "mmc4-clip": {
        "shards": [
            "c7c28ad4a79824a61e7fcc7cd4d04fbc2a90b79bf3b764caa5c1d1db16ae2d78",
            "829c33ac83b498cd543160e3574b9e5f458fc418ddb18b3fe322847cc3c4a52e",
        ],
        "stats.json": "09f197404d4e5f9a585aed2c04411653b08c88398a89f6fca1c188b401065bad",
    },
    "mmc4-pairs": {
        "shards": [
            "761a2b7e05597789df7eb3cbb0ebb4e712a72097265f5b3b7234010516be6454",
            "4706b354787cc3cad535813f5afde54f15cd9d388dae59cfba04113a9126c906",
        ],
        "stats.json": "82ab73bd6b776f5f095a607a3aff8884a0b354659eaff4289dfb8077bc363a83",
    },
    "mmc4-pairs-unpacked": {
        "shards": [
            "cf037cb83cf260ff2676fda5c3ee662a71e3386f4da1cdcdb04a501e903f2408",
            "5ff638b0c8f89d8803dd2b64420a5b8e2d1944c2b968ea907f938474d2a71b3a",
            "5c7a10cb5e3d4961c929d9242daa142639b1ccbc306a8fbd2c19bddb47bfec61",
        ],
        "stats.json": "25e7c7d386b9c4c085527223c456ea4377082fc53576cd51112cb4c54d1a20f4",
    },
    "mmc4-reassign": {
        "shards": [
            "44c081427f70c86f828df59b5d0c65c48f6ea838980f6a2e9f1009a137ce2c5a",
            "6bc85ccce500c73814f0b7e712d2bd11142b7ab1e748726d275afa090faf9864",
            "a9e767c6f9c93c177ba7bc6425ac31fd225efb8e5b3103da775ca05e0244e0e9",
            "f91a7006c59b13a6ccb5d93e4e62a33fe62607cda30463d1793c9bb57c5bc2d0",
        ],
        "stats.json": "2ec78e0e6f158a5b078146c461e75be632f64808923543dddba0d1ef07c81370",
    },
    "mmc4-reordered": {
        "shards": [
            "4df39f068430ea3f1dade72c8443cf6fb72058211f78a07234313b70f09c997e",
            "4f3fa31cd7b8a91db3f06791bf8e653a4fcd14ac75ad60ae651c9357ce61df1f",
        ],
        "stats.json": "2501dfdb5b3bebc803dd58b2d7c0e8dea87a4cc482afd42b58c0c922d4fcdbab",
    },
    "wit": {
        "shards": ["4957d6f5811ca1cb54bfd8ce4d78e76d787703e121c4dfe6e35feb10d33d5d1a"],
        "stats.json": "43d1d676493dcf3ff244044cafd1fdc753052eec795a3e1d0349f8bd288c1cac",
    },
    "wit-clip": {
        "shards": ["835a073ed0e10e58176ef31b7326b098ce87b90c1abd374c4f3ee9cedf6fccc6"],
        "stats.json": "2e200f30b9d13339aa7c7adfe1932f2ff0cf2468f884f0d50156fffe93dbe8ca",
    },
}


@pytest.fixture(scope="module")
def server():
    with ImageServer(port=PORT) as shared:
        yield shared


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_build_writes_the_recorded_bytes(name, server, tmp_path):
    assert build_digests(name, BUILDS[name], str(tmp_path), server) == EXPECTED[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["c4", "c4-read-groups", "coyo", "mmc4-reassign"])
def test_two_warm_workers_write_the_recorded_bytes(name, server, tmp_path):
    """Two worker processes, forked by the build's zygote (pipelines/workers.py),
    write one worker's bytes."""
    digests = build_digests(name, BUILDS[name], str(tmp_path), server, "--workers", "2")
    assert digests == EXPECTED[name]


@pytest.mark.slow
def test_two_warm_workers_score_with_clip_to_the_recorded_bytes(server, tiny_clip, tmp_path):  # noqa: F811
    """The zygote imported torch and open_clip before forking the workers that score."""
    extra = (*clip_flags(tiny_clip), "--workers", "2")
    digests = build_digests("mmc4-clip", CLIP_BUILDS["mmc4-clip"], str(tmp_path), server, *extra)
    assert digests == EXPECTED["mmc4-clip"]


@pytest.mark.parametrize("name", sorted(CLIP_BUILDS))
def test_clip_build_writes_the_recorded_bytes(name, server, tiny_clip, tmp_path):  # noqa: F811
    digests = build_digests(name, CLIP_BUILDS[name], str(tmp_path), server, *clip_flags(tiny_clip))
    assert digests == EXPECTED[name]


def _record() -> None:
    """Print the digests of the current code (see the module docstring)."""
    import json
    import tempfile

    from tests.clip_model import make_tiny_clip

    found = {}
    with tempfile.TemporaryDirectory() as root, ImageServer(port=PORT) as shared:
        tiny = make_tiny_clip(os.path.join(root, "clip"))
        for name, spec in sorted(BUILDS.items()):
            found[name] = build_digests(name, spec, os.path.join(root, name), shared)
        for name, spec in sorted(CLIP_BUILDS.items()):
            directory = os.path.join(root, name)
            found[name] = build_digests(name, spec, directory, shared, *clip_flags(tiny))
    json.dump(found, sys.stdout, indent=4, sort_keys=True)
    print()


if __name__ == "__main__":
    _record()
