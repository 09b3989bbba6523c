"""`corpora build` splits long documents without parting an image from its text.

MMC4 places each image before the sentence it is matched to. A build of long
MMC4-format documents at seq_len 128 and 2048, read back as the trainer reads
it, is held against SimVLM's prefix rule written out here: every image slot
of a packed document in the prefix, and at least one token after them for
the decoder. A piece that ends in an image slot fails it (its image's text is
in another piece), which the packer used to make whenever a cut fell after
an image.
"""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

from corpora import reader
from tests import generated
from tests.helpers import run_cli
from trainer.features import document_runs, prefixlm_features

pytestmark = [pytest.mark.slow, pytest.mark.integration]

WORDS = generated.WORDS


def long_mmc4_documents(count: int, image_base: str, seed: int = 24) -> list[dict]:
    """``count`` MMC4 documents of 10-40 sentences of 4-60 words, with 1-6
    images each matched to distinct sentences (some adjacent, so images and
    sentences alternate), served by the test image server."""
    rng = random.Random(seed)
    docs = []
    for number in range(count):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 60))) + "."
            for _ in range(rng.randint(10, 40))
        ]
        matched = sorted(rng.sample(range(len(sentences)), rng.randint(1, 6)))
        infos = [
            {
                "raw_url": f"{image_base}/img/40x40/long{number}-{index}.jpg",
                "image_name": f"long{number}-{index}.jpg",
                "matched_text_index": sentence,
                "matched_sim": 0.3,
                "face_detections": None,
            }
            for index, sentence in enumerate(matched)
        ]
        docs.append(
            {
                "url": f"https://example.org/long/{number}",
                "text_list": sentences,
                "image_info": infos,
                "similarity_matrix": [[0.3] * len(sentences) for _ in infos],
                "could_have_url_duplicate": 0,
            }
        )
    return docs


def prefix_rule_failures(input_ids: np.ndarray, segment_ids: np.ndarray, image_token_id: int):
    """The packed documents of one sample whose image slots leave nothing
    after them: ``(segment, why)`` each."""
    failures = []
    for segment, start, end in document_runs(segment_ids):
        slots = np.flatnonzero(input_ids[start:end] == image_token_id)
        if slots.size and start + slots[-1] + 1 >= end:
            failures.append((segment, "ends in an image slot: no decoder token"))
        elif end - start < 2:
            failures.append((segment, "one token: nothing to predict after a prefix"))
    return failures


@pytest.fixture(scope="module")
def long_input(tmp_path_factory, image_server):
    path = tmp_path_factory.mktemp("long") / "docs_shard_0_v2.jsonl"
    return generated.write_mmc4(str(path), long_mmc4_documents(60, image_server.url("")))


@pytest.mark.parametrize("seq_len, tokens_per_image", [(128, 16), (2048, 64)])
def test_no_piece_ends_in_an_image_and_every_prefixlm_document_has_a_target(
    long_input, tokenizer_path, tmp_path, seq_len, tokens_per_image
):
    output = str(tmp_path / "mmc4")
    result = run_cli(
        "build", "mmc4", "--input", long_input, "--output", output,
        "--tokenizer", tokenizer_path, "--seq-len", str(seq_len),
        "--tokens-per-image", str(tokens_per_image), "--image-size", "32",
        "--workers", "1", "--allow-private-urls", "--progress-every", "0",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    build = reader.locate(output)
    image_token_id = int(build.manifest["image_token_id"])
    rng = np.random.default_rng(0)
    pieces = split = images = 0
    for sample in reader.iter_samples(build.shards, decode_images=False):
        assert prefix_rule_failures(sample.input_ids, sample.segment_ids, image_token_id) == []
        # the trainer's own prefix split agrees: every slot in the encoder, a target for each
        features = prefixlm_features(
            sample.input_ids, sample.segment_ids, image_token_id, 0, rng=rng
        )
        assert (features["encoder_input_ids"] == image_token_id).sum() == (
            sample.input_ids == image_token_id
        ).sum()
        targets = features["decoder_segment_ids"][features["decoder_loss_weights"] > 0]
        assert set(targets.tolist()) == {d["segment"] for d in sample.documents}
        pieces += len(sample.documents)
        split += sum(1 for d in sample.documents if d["split"])
        images += len(sample.images)
    assert split > 0.1 * pieces  # the documents are long enough to be split at this seq_len
    with open(os.path.join(output, "stats.json")) as handle:
        packing = json.load(handle)["packing"]
    assert packing["pieces_ending_in_image"] == 0
    assert packing["images_with_text_fraction"] == 1.0  # every MMC4 image precedes its sentence
    assert packing["short_pieces_dropped"] == {"pieces": 0, "tokens": 0}
    assert images > 0
