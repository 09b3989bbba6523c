from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from corpora.dedup.sources import (
    IMAGE_FOLDER,
    IMAGE_HASHES,
    TEXTS,
    EvalTexts,
    SourceError,
    evaluation_texts,
    read_sources,
)


def test_each_path_is_dispatched_by_what_it_is_and_hashed(tmp_path):
    texts = tmp_path / "captions.txt"
    texts.write_text("a man riding a wave on top of a surfboard\nwhat color is the cat\n")
    images = tmp_path / "coco_val"
    images.mkdir()
    (images / "1.jpg").write_bytes(b"jpeg")
    hashes = tmp_path / "hashes.parquet"
    hashes.write_bytes(b"PAR1")
    sources = read_sources([str(texts), str(images), str(hashes)])
    assert [s.kind for s in sources] == [TEXTS, IMAGE_FOLDER, IMAGE_HASHES]
    assert sources[0].sha256 == hashlib.sha256(texts.read_bytes()).hexdigest()
    assert len(sources[1].sha256) == 64
    with pytest.raises(SourceError, match="not a folder of images"):
        read_sources([str(tmp_path / "eval.csv")])


def test_jsonl_json_and_gzip_texts_are_read(tmp_path):
    jsonl = tmp_path / "vqa.jsonl.gz"
    with gzip.open(jsonl, "wt") as out:
        out.write(json.dumps({"question": "Is it raining?", "image_id": 7}) + "\n")
        out.write(json.dumps("a plain string line") + "\n")
        out.write(json.dumps({"captions": ["one caption", "two caption"]}) + "\n")
    coco = tmp_path / "captions_val2014.json"
    coco.write_text(json.dumps({"annotations": [{"image_id": 1, "caption": "A dog."}]}))
    sources = read_sources([str(jsonl), str(coco)])
    assert list(evaluation_texts(sources[0])) == [
        "Is it raining?",
        "a plain string line",
        "one caption",
        "two caption",
    ]
    assert list(evaluation_texts(sources[1])) == ["A dog."]


def test_thirteen_word_overlap_contaminates_and_twelve_does_not():
    question = " ".join(f"q{i}" for i in range(20))
    evals = EvalTexts.from_texts([question])
    inside = "some page text " + " ".join(f"q{i}" for i in range(3, 16)) + " more text"
    almost = "some page text " + " ".join(f"q{i}" for i in range(3, 15)) + " more text"
    assert evals.contaminated(inside)
    assert not evals.contaminated(almost)
    assert not EvalTexts.from_texts([]).contaminated(inside)
