"""Builds the trainer tests read, made once per test session with `corpora build`.

All share ``seq_len`` 640 (a C4 build with the default 576 tokens per image
needs ``seq_len`` >= 578) and the session's tiny tokenizer:

- ``pairs``: mmc4-pairs, ``--no-pack``, 60 samples of one image, 20 shards;
- ``pairs_packed``: the same 60 pairs, packed (many documents a sample);
- ``reordered_long``: mmc4-reordered, 5 images of 160 tokens a document: the
  run of 800 image slots is longer than a piece, so its first images fill
  pieces of their own (nothing left for PrefixLM to predict);
- ``interleaved``: mmc4, ``--no-pack``, 24 samples of three images, 12 shards;
- ``c4``: C4 text, packed, the default image settings (576 tokens, 336 px);
- ``pairs_tpi16``: mmc4-pairs with 16 tokens per image (blends must refuse it);
- ``pairs_other_tokenizer``: mmc4-pairs tokenized with the bundled sample model.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os

from corpora.config.bundled_sample import SAMPLE_TOKENIZER
from tests import fixtures, generated
from tests.helpers import run_cli

SEQ_LEN, TOKENS_PER_IMAGE, IMAGE_SIZE = 640, 8, 32
WORDS = generated.WORDS


@dataclasses.dataclass(frozen=True)
class Builds:
    root: str

    def __getattr__(self, name: str) -> str:
        return os.path.join(self.root, name)


def _c4_lines(count: int) -> list[bytes]:
    import json

    lines = []
    for number in range(count):
        words = [WORDS[(number * 7 + i * 3) % len(WORDS)] for i in range(6 + number % 40)]
        row = {
            "text": f"Text {number}: " + " ".join(words) + ".",
            "timestamp": "2019-04-25T08:00:00Z",
            "url": f"https://example.org/c4/{number}",
        }
        lines.append(json.dumps(row).encode())
    return lines


def _build(corpus: str, inputs: list[str], output: str, tokenizer: str, *flags: str) -> None:
    args = ["build", corpus, "--output", output, "--tokenizer", tokenizer, "--workers", "1"]
    for path in inputs:
        args += ["--input", path]
    result = run_cli(*args, "--seq-len", str(SEQ_LEN), "--allow-private-urls", *flags)
    assert result.returncode == 0, result.stderr


def make_builds(tmp_path_factory, image_server, tokenizer_path) -> Builds:
    """The builds above, under the session's base temporary directory (built
    by the first test module that asks, reused by the others)."""
    root = tmp_path_factory.getbasetemp() / "trainer-builds"
    done = root / "done"
    if done.exists():
        return Builds(str(root))
    root.mkdir(exist_ok=True)
    base = image_server.url("")
    image = ("--tokens-per-image", str(TOKENS_PER_IMAGE), "--image-size", str(IMAGE_SIZE))
    pairs = generated.write_mmc4(
        str(root / "pairs.jsonl"), generated.mmc4_documents(30, base, images_per_doc=2)
    )
    interleaved = generated.write_mmc4(
        str(root / "interleaved.jsonl"),
        generated.mmc4_documents(24, base, images_per_doc=3, image_size=40),
    )
    (root / "c4-input").mkdir(exist_ok=True)
    c4 = fixtures.write_c4_json_gz(str(root / "c4-input"), _c4_lines(400))
    five = generated.write_mmc4(
        str(root / "five.jsonl"), generated.mmc4_documents(6, base, images_per_doc=5)
    )
    small = generated.write_mmc4(
        str(root / "small.jsonl"), generated.mmc4_documents(3, base, images_per_doc=1)
    )
    per_shard = "--samples-per-shard"
    jobs = [
        ("mmc4-pairs", pairs, "pairs", tokenizer_path, *image, "--no-pack", per_shard, "3"),
        ("mmc4-pairs", pairs, "pairs_packed", tokenizer_path, *image, per_shard, "1"),
        ("mmc4-reordered", five, "reordered_long", tokenizer_path, "--tokens-per-image", "160"),
        ("mmc4", interleaved, "interleaved", tokenizer_path, *image, "--no-pack", per_shard, "2"),
        ("c4", c4, "c4", tokenizer_path, per_shard, "2"),  # default image settings
        (
            "mmc4-pairs",
            small,
            "pairs_tpi16",
            tokenizer_path,
            "--tokens-per-image",
            "16",
            *image[2:],
        ),
        ("mmc4-pairs", small, "pairs_other_tokenizer", SAMPLE_TOKENIZER, *image),
    ]
    # Each build is mostly Beam's start-up in its own process: three at a time overlap it.
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        for future in [
            pool.submit(_build, corpus, [source], str(root / name), tokenizer, *flags)
            for corpus, source, name, tokenizer, *flags in jobs
        ]:
            future.result()
    done.write_text("")
    return Builds(str(root))
