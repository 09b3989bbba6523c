from __future__ import annotations

import hashlib
import os

import fsspec
import pytest

from corpora.dedup.evaluation import read_eval_images, write_eval_parquet
from corpora.dedup.images import ImageDedupSettings
from corpora.dedup.phash import phash_of_image
from corpora.dedup.sources import SourceError, is_image_source, read_sources, source_kind
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
    # the report's digest of the folder is the one the manifest records
    assert read_eval_images(str(folder)).sha256 == read_sources([str(folder)])[0].sha256

    parquet = str(tmp_path / "eval.parquet")
    write_eval_parquet(parquet, list(source.names), list(source.hashes))
    table = read_eval_images(parquet)
    assert (table.names, table.hashes) == (source.names, source.hashes)
    with open(parquet, "rb") as stream:
        assert table.sha256 == hashlib.sha256(stream.read()).hexdigest()
    assert is_image_source(str(folder)) and is_image_source(parquet)
    assert not is_image_source(str(tmp_path / "captions.jsonl"))


def test_an_object_store_folder_is_evaluation_images_for_both_halves(tmp_path):
    """A folder through fsspec (``memory://`` here, as ``gs://`` or ``s3://``):
    the image rules read it, the text rules leave it, and it hashes as the
    same folder on disk does."""
    photos = planted()
    files = {"rocket.png": photos["rocket", "png"], "sub/coffee.jpg": photos["coffee", "original"]}
    fs = fsspec.filesystem("memory")
    for name, data in files.items():
        fs.pipe(f"/eval-images-{id(tmp_path)}/{name}", data)
        (tmp_path / "local" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "local" / name).write_bytes(data)
    remote = f"memory://eval-images-{id(tmp_path)}"
    try:
        assert source_kind(remote) == "image_folder" and is_image_source(remote)
        settings = ImageDedupSettings.from_options({"decontaminate": (remote, "captions.txt")})
        assert settings.decontaminate == (remote,)  # the text file is the text rules'
        found, local = read_eval_images(remote), read_eval_images(str(tmp_path / "local"))
        assert (found.names, found.hashes, found.sha256) == (
            local.names,
            local.hashes,
            local.sha256,
        )
        parquet = f"memory://eval-hashes-{id(tmp_path)}.parquet"
        write_eval_parquet(str(tmp_path / "h.parquet"), list(local.names), list(local.hashes))
        fs.pipe(parquet.removeprefix("memory://"), (tmp_path / "h.parquet").read_bytes())
        assert read_eval_images(parquet).hashes == local.hashes
    finally:
        fs.rm(f"/eval-images-{id(tmp_path)}", recursive=True)
        if fs.exists(f"/eval-hashes-{id(tmp_path)}.parquet"):
            fs.rm(f"/eval-hashes-{id(tmp_path)}.parquet")


@pytest.mark.parametrize(
    "name, kind",
    [
        ("captions.txt", "texts"),
        ("captions.TXT.gz", "texts"),
        ("vqa.jsonl", "texts"),
        ("vqa.jsonl.gz", "texts"),
        ("captions_val2014.json", "texts"),
        ("captions_val2014.json.gz", "texts"),
        ("hashes.parquet", "image_hashes"),
    ],
)
def test_each_kind_of_file(name, kind):
    assert source_kind(name) == kind
    assert is_image_source(name) == (kind != "texts")


@pytest.mark.parametrize(
    "name, says",
    [
        ("hashes.parquet.gz", "a parquet is read uncompressed"),
        ("captions.txt.bz2", "a text file compressed as .bz2 is not read"),
        ("vqa.jsonl.zst", "a text file compressed as .zst is not read"),
        ("notes.pdf", "not a folder of images"),
    ],
)
def test_what_is_not_read_is_refused_in_one_line_naming_the_path_and_the_kinds(name, says):
    with pytest.raises(SourceError) as error:
        source_kind(name)
    message = str(error.value)
    assert message.startswith(f"--decontaminate {name}: ") and says in message
    assert ".parquet of image hashes" in message and ".jsonl.gz" in message
    assert "\n" not in message
