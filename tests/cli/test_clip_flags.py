"""`corpora build … --clip-model …` end to end, and its one-line errors (exit 2)."""

from __future__ import annotations

import dataclasses
import glob
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from corpora import fetch
from corpora.config import catalog
from corpora.config import settings as build_settings
from corpora.config.bundled_sample import SAMPLE_IMAGES, materialize_sample
from tests.clip_model import TINY_NAME, direct_scores, tiny_clip  # noqa: F401
from tests.helpers import load_manifest, read_tar, run_cli

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def sample_pairs_fetched(directory: str) -> dict[str, tuple[bytes, str]]:
    """id → (image bytes after fetch with the smoke settings, text) for the bundled sample."""
    path = materialize_sample(directory)
    settings = build_settings.smoke(
        build_settings.corpus_settings("mmc4-pairs", (path,), directory)
    )
    settings = settings.replace(
        fetch=dataclasses.replace(settings.fetch, allow_local_files=(SAMPLE_IMAGES,))
    )
    with open(path, "rb") as stream:
        records = [
            record
            for record in catalog.get("mmc4-pairs").read(stream, path, settings)
            if hasattr(record, "chunks")
        ]
    with fetch.Fetcher(settings.fetch) as fetcher:
        images = dict(fetcher.fetch(dict.fromkeys(r.images[0].url for r in records)))
    return {
        record.id: (images[record.images[0].url].data, record.texts[0].text)
        for record in records
        if images[record.images[0].url].ok
    }


@pytest.mark.slow
@pytest.mark.integration
def test_build_scores_filters_and_saves_embeddings(tiny_clip, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--smoke",
        "--workers",
        "1",
        "--output",
        str(out),
        "--clip-model",
        tiny_clip.config_path,
        "--clip-pretrained",
        tiny_clip.checkpoint,
        "--clip-batch-size",
        "4",
        "--clip-top-fraction",
        "0.5",
        "--save-embeddings",
    )
    assert result.returncode == 0, result.stderr
    assert f"CLIP: {TINY_NAME}/tiny.pt, embedding dim 32" in result.stdout

    pairs = sample_pairs_fetched(str(tmp_path / "sample"))
    ids = sorted(pairs)
    expected = dict(
        zip(ids, direct_scores(tiny_clip, [pairs[i][0] for i in ids], [pairs[i][1] for i in ids]))
    )
    top = sorted(ids, key=lambda rid: (-expected[rid], rid))[:4]

    manifest = load_manifest(str(out))
    assert manifest["funnel"]["dropped"]["clip_below_top_fraction"] == len(ids) - 4
    assert manifest["funnel"]["kept"] == 4
    assert manifest["clip"]["model"] == f"{TINY_NAME}/tiny.pt"
    assert manifest["clip"]["scored"] == len(ids)
    assert manifest["clip"]["top_fraction"]["cut_id"] == top[-1]
    assert (
        manifest["settings"]["clip"]["checkpoint_sha256"] == manifest["clip"]["checkpoint_sha256"]
    )

    documents = [
        doc
        for shard in sorted(glob.glob(str(out / "*.tar")))
        for sample in read_tar(shard)
        for doc in sample["json"]["documents"]
    ]
    assert sorted(doc["id"] for doc in documents) == sorted(top)
    for doc in documents:
        assert doc["meta"]["clip_model"] == f"{TINY_NAME}/tiny.pt"
        assert abs(doc["images"][0]["scores"]["clip_sim"] - expected[doc["id"]]) <= 1e-5

    table = pq.read_table(str(out / "clip-embeddings-000000.parquet"))
    assert table.column("id").to_pylist() == ids
    np.testing.assert_allclose(
        table.column("clip_sim").to_numpy(), [expected[i] for i in ids], atol=1e-5
    )


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    "case, message",
    [
        ("unknown-architecture", "corpora: unknown CLIP architecture 'ViT-Q-99'"),
        ("missing-checkpoint", "corpora: CLIP checkpoint not found: "),
        ("unreadable-checkpoint", "corpora: CLIP checkpoint is not readable: "),
        (
            "mismatched-checkpoint",
            f"corpora: CLIP checkpoint {{mismatched}} does not fit architecture {TINY_NAME}: ",
        ),
        ("no-pretrained", "corpora: --clip-model needs --clip-pretrained"),
        (
            "no-model",
            "corpora: --min-clip-sim needs --clip-model "
            "(without it, only coyo has precomputed scores)",
        ),
        ("bad-fraction", "corpora: --clip-top-fraction must be in (0, 1], got 0.0"),
    ],
)
def test_bad_clip_flags_exit_2_with_one_line(tiny_clip, tmp_path, case, message):  # noqa: F811
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 64)
    flags = {
        "unknown-architecture": [
            "--clip-model",
            "ViT-Q-99",
            "--clip-pretrained",
            tiny_clip.checkpoint,
        ],
        "missing-checkpoint": [
            "--clip-model",
            tiny_clip.config_path,
            "--clip-pretrained",
            str(tmp_path / "no.pt"),
        ],
        "unreadable-checkpoint": [
            "--clip-model",
            tiny_clip.config_path,
            "--clip-pretrained",
            str(garbage),
        ],
        "mismatched-checkpoint": [
            "--clip-model",
            tiny_clip.config_path,
            "--clip-pretrained",
            tiny_clip.mismatched,
        ],
        "no-pretrained": ["--clip-model", "ViT-B-32"],
        "no-model": ["--min-clip-sim", "0.2"],
        "bad-fraction": [
            "--clip-model",
            tiny_clip.config_path,
            "--clip-pretrained",
            tiny_clip.checkpoint,
            "--clip-top-fraction",
            "0",
        ],
    }[case]
    result = run_cli("build", "mmc4-pairs", "--output", str(tmp_path / "out"), *flags)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        message.format(mismatched=tiny_clip.mismatched)
    ), lines
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
@pytest.mark.integration
def test_mmc4_build_places_images_before_the_sentences_clip_chose(
    tiny_clip,  # noqa: F811
    tmp_path,
    image_server,
    tokenizer_path,
):
    import hashlib
    import json

    from corpora.sources.mmc4.assign import assign_images
    from tests import fixtures
    from tests.cli.test_build_corpora import build, document_tokens, expected_ids, samples

    path = fixtures.write_mmc4_jsonl(
        str(tmp_path / "docs_shard_0_v2.jsonl"), fixtures.mmc4_lines(image_server)
    )
    output = str(tmp_path / "out")
    manifest = build(
        "mmc4",
        [path],
        output,
        tokenizer_path,
        "--clip-model",
        tiny_clip.config_path,
        "--clip-pretrained",
        tiny_clip.checkpoint,
        "--clip-batch-size",
        "4",
    )
    assert (
        manifest["funnel"] == fixtures.MMC4_FUNNEL
    )  # CLIP re-places images; it drops no document here
    found = samples(output)
    jpegs = {
        hashlib.sha256(sample[m]).hexdigest(): sample[m]
        for sample in found
        for m in sample["__members__"]
        if m.startswith("img")
    }
    with open(path, "rb") as handle:
        sources = {row["url"]: row for row in map(json.loads, handle.read().splitlines()[:2])}
    assert len(sources) == 2  # the README document and "three": the two that are kept
    scored = moved = 0
    for url, source in sources.items():
        ids, entry = document_tokens(found, url=url)
        order = [info["raw_url"] for info in source["image_info"]]
        images = sorted(
            entry["images"], key=lambda image: order.index(image["url"])
        )  # image_info order
        sentences = [text.strip() for text in source["text_list"] if text.strip()]
        matrix = np.stack(
            [
                direct_scores(tiny_clip, [jpegs[image["sha256"]]] * len(sentences), sentences)
                for image in images
            ]
        )
        matched, sims = assign_images(matrix)
        upstream = [
            source["image_info"][order.index(image["url"])]["matched_text_index"]
            for image in images
        ]
        moved += matched != upstream
        parts = [
            part
            for j, text in enumerate(sentences)
            for part in (*[i for i, m in enumerate(matched) if m == j], text)
        ]
        assert ids.tolist() == expected_ids(manifest, tokenizer_path, parts)
        for image, sim in zip(images, sims):
            assert abs(image["scores"]["clip_sim"] - sim) <= 1e-5
        assert entry["meta"]["clip_model"] == f"{TINY_NAME}/tiny.pt"
        scored += len(images)
    assert manifest["clip"]["scored"] == scored == 4
    assert moved  # the computed assignment is not upstream's, so the order above is CLIP's own


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize(
    "corpus, flag", [("mmc4", "--clip-top-fraction"), ("mmc4-reordered", "--save-embeddings")]
)
def test_document_corpora_refuse_pair_only_clip_flags(tiny_clip, tmp_path, corpus, flag):  # noqa: F811
    extra = [flag, "0.5"] if flag == "--clip-top-fraction" else [flag]
    result = run_cli(
        "build",
        corpus,
        "--output",
        str(tmp_path / "out"),
        "--clip-model",
        tiny_clip.config_path,
        "--clip-pretrained",
        tiny_clip.checkpoint,
        *extra,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"corpora: {flag} applies to pair corpora (coyo, mmc4-pairs, wit), "
        f"not to {corpus} documents (use --min-clip-sim to remove their low-scoring images)"
    ]
    assert not os.path.exists(tmp_path / "out")
