"""Builds the trainer tests read, made once per test session with `corpora build`.

All share ``seq_len`` 640 (a C4 build with the default 576 tokens per image
needs ``seq_len`` >= 578) and the session's tiny tokenizer:

- ``pairs``: mmc4-pairs, ``--no-pack``, 60 samples of one image, 20 shards;
- ``interleaved``: mmc4, ``--no-pack``, 24 samples of three images, 12 shards;
- ``c4``: C4 text, packed, the default image settings (576 tokens, 336 px);
- ``pairs_tpi16``: mmc4-pairs with 16 tokens per image (blends must refuse it);
- ``pairs_other_tokenizer``: mmc4-pairs tokenized with the bundled sample model.
"""

from __future__ import annotations

import dataclasses
import os

from corpora.settings import SAMPLE_TOKENIZER
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
    pairs_docs = generated.write_mmc4(
        str(root / "pairs.jsonl"), generated.mmc4_documents(30, base, images_per_doc=2)
    )
    _build(
        "mmc4-pairs",
        [pairs_docs],
        str(root / "pairs"),
        tokenizer_path,
        *image,
        "--no-pack",
        "--samples-per-shard",
        "3",
    )
    interleaved_docs = generated.write_mmc4(
        str(root / "interleaved.jsonl"),
        generated.mmc4_documents(24, base, images_per_doc=3, image_size=40),
    )
    _build(
        "mmc4",
        [interleaved_docs],
        str(root / "interleaved"),
        tokenizer_path,
        *image,
        "--no-pack",
        "--samples-per-shard",
        "2",
    )
    c4_dir = root / "c4-input"
    c4_dir.mkdir(exist_ok=True)
    c4_input = fixtures.write_c4_json_gz(str(c4_dir), _c4_lines(400))
    _build("c4", [c4_input], str(root / "c4"), tokenizer_path, "--samples-per-shard", "2")
    small = generated.write_mmc4(
        str(root / "small.jsonl"), generated.mmc4_documents(3, base, images_per_doc=1)
    )
    _build(
        "mmc4-pairs",
        [small],
        str(root / "pairs_tpi16"),
        tokenizer_path,
        "--tokens-per-image",
        "16",
        "--image-size",
        str(IMAGE_SIZE),
    )
    _build("mmc4-pairs", [small], str(root / "pairs_other_tokenizer"), SAMPLE_TOKENIZER, *image)
    done.write_text("")
    return Builds(str(root))
