from __future__ import annotations

import hashlib
import os

from corpora.dedup.evaluation import is_image_source, read_eval_images, write_eval_parquet
from corpora.dedup.phash import phash_of_image
from tests.dedup_photos import planted


def test_a_folder_and_its_parquet_give_the_same_hashes(tmp_path):
    photos = planted()
    folder = tmp_path / "eval"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "coffee.jpg").write_bytes(photos["coffee", "original"])
    (folder / "rocket.png").write_bytes(photos["rocket", "png"])
    (folder / "labels.txt").write_text("coffee\nrocket\n")
    source = read_eval_images(str(folder))
    assert source.names == ("rocket.png", os.path.join("sub", "coffee.jpg"))
    assert source.hashes == (
        phash_of_image(photos["rocket", "png"]),
        phash_of_image(photos["coffee", "original"]),
    )
    assert source.skipped == 1
    again = read_eval_images(str(folder))
    assert again.sha256 == source.sha256  # the folder's identity: its names and contents
    (folder / "labels.txt").write_text("changed")
    assert read_eval_images(str(folder)).sha256 != source.sha256

    parquet = str(tmp_path / "eval.parquet")
    write_eval_parquet(parquet, list(source.names), list(source.hashes))
    table = read_eval_images(parquet)
    assert (table.names, table.hashes) == (source.names, source.hashes)
    with open(parquet, "rb") as stream:
        assert table.sha256 == hashlib.sha256(stream.read()).hexdigest()
    assert is_image_source(str(folder)) and is_image_source(parquet)
    assert not is_image_source(str(tmp_path / "captions.jsonl"))
