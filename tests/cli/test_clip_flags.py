"""`corpora build … --clip-model …` end to end, and its one-line errors (exit 2)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from corpora import catalog, fetch, settings as build_settings
from corpora.sample import materialize_sample
from tests.clip_model import TINY_NAME, direct_scores, tiny_clip  # noqa: F401
from tests.helpers import load_manifest, read_tar, run_cli

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def sample_pairs_fetched(directory: str) -> dict[str, tuple[bytes, str]]:
    """id → (image bytes after fetch with the smoke settings, text) for the bundled sample."""
    path = materialize_sample(directory)
    settings = build_settings.smoke(build_settings.mmc4_pairs((path,), directory))
    pairs = {}
    with open(path, "rb") as stream:
        for record in catalog.get("mmc4-pairs").read(stream, path, settings):
            if hasattr(record, "chunks"):
                _, image = fetch.fetch_image(record.images[0].url, settings.fetch)
                if image is not None and image.data:
                    pairs[record.id] = (image.data, record.texts[0].text)
    return pairs


@pytest.mark.slow
@pytest.mark.integration
def test_build_scores_filters_and_saves_embeddings(tiny_clip, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    result = run_cli("build", "mmc4-pairs", "--smoke", "--workers", "1", "--output", str(out),
                     "--clip-model", tiny_clip.config_path, "--clip-pretrained", tiny_clip.checkpoint,
                     "--clip-batch-size", "4", "--clip-top-fraction", "0.5", "--save-embeddings")
    assert result.returncode == 0, result.stderr
    assert f"CLIP: {TINY_NAME}/tiny.pt, embedding dim 32" in result.stdout

    pairs = sample_pairs_fetched(str(tmp_path / "sample"))
    ids = sorted(pairs)
    expected = dict(zip(ids, direct_scores(tiny_clip, [pairs[i][0] for i in ids], [pairs[i][1] for i in ids])))
    top = sorted(ids, key=lambda rid: (-expected[rid], rid))[:4]

    manifest = load_manifest(str(out))
    assert manifest["funnel"]["dropped"]["clip_below_top_fraction"] == len(ids) - 4
    assert manifest["funnel"]["kept"] == 4
    assert manifest["clip"]["model"] == f"{TINY_NAME}/tiny.pt"
    assert manifest["clip"]["scored"] == len(ids)
    assert manifest["clip"]["top_fraction"]["cut_id"] == top[-1]
    assert manifest["settings"]["clip"]["checkpoint_sha256"] == manifest["clip"]["checkpoint_sha256"]

    documents = [doc for shard in sorted(glob.glob(str(out / "*.tar"))) for sample in read_tar(shard)
                 for doc in sample["json"]["documents"]]
    assert sorted(doc["id"] for doc in documents) == sorted(top)
    for doc in documents:
        assert doc["meta"]["clip_model"] == f"{TINY_NAME}/tiny.pt"
        assert abs(doc["images"][0]["scores"]["clip_sim"] - expected[doc["id"]]) <= 1e-5

    table = pq.read_table(str(out / "clip-embeddings-000000.parquet"))
    assert table.column("id").to_pylist() == ids
    np.testing.assert_allclose(table.column("clip_sim").to_numpy(), [expected[i] for i in ids], atol=1e-5)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("case, message", [
    ("unknown-architecture", "corpora: unknown CLIP architecture 'ViT-Q-99'"),
    ("missing-checkpoint", "corpora: CLIP checkpoint not found: "),
    ("unreadable-checkpoint", "corpora: CLIP checkpoint is not readable: "),
    ("mismatched-checkpoint", f"corpora: CLIP checkpoint {{mismatched}} does not fit architecture {TINY_NAME}: "),
    ("no-pretrained", "corpora: --clip-model needs --clip-pretrained"),
    ("no-model", "corpora: --min-clip-sim needs --clip-model (without it, only coyo has precomputed scores)"),
    ("bad-fraction", "corpora: --clip-top-fraction must be in (0, 1], got 0.0"),
])
def test_bad_clip_flags_exit_2_with_one_line(tiny_clip, tmp_path, case, message):  # noqa: F811
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00" * 64)
    flags = {
        "unknown-architecture": ["--clip-model", "ViT-Q-99", "--clip-pretrained", tiny_clip.checkpoint],
        "missing-checkpoint": ["--clip-model", tiny_clip.config_path, "--clip-pretrained", str(tmp_path / "no.pt")],
        "unreadable-checkpoint": ["--clip-model", tiny_clip.config_path, "--clip-pretrained", str(garbage)],
        "mismatched-checkpoint": ["--clip-model", tiny_clip.config_path, "--clip-pretrained", tiny_clip.mismatched],
        "no-pretrained": ["--clip-model", "ViT-B-32"],
        "no-model": ["--min-clip-sim", "0.2"],
        "bad-fraction": ["--clip-model", tiny_clip.config_path, "--clip-pretrained", tiny_clip.checkpoint,
                         "--clip-top-fraction", "0"],
    }[case]
    result = run_cli("build", "mmc4-pairs", "--output", str(tmp_path / "out"), *flags)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(mismatched=tiny_clip.mismatched)), lines
    assert not os.path.exists(tmp_path / "out")
