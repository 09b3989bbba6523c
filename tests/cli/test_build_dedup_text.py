"""`corpora build` with the text rules on: planted duplicates and evaluation
texts removed, the funnel balanced; `--exclude-seen` across an MMC4 and a COYO
build. (The same bytes on every runner with every rule on, text and image:
tests/cli/test_build_dedup_images.py.)"""

from __future__ import annotations

import glob
import json
import os

import pytest

from corpora.dedup.index import INDEX, read_index
from corpora.sources.c4 import document_id
from tests import fixtures
from tests.generated import mmc4_documents, write_mmc4
from tests.helpers import SMALL_BUILD, load_manifest, read_tar, run_cli
from tests.planted_texts import planted
from tests.servers import ImageServer

pytestmark = [pytest.mark.slow, pytest.mark.integration]

CORPUS = planted(unrelated=60, exact=8, near=20, words=200)
# Evaluation texts: a caption found inside two documents, a question that is
# one document's whole text, and a question found nowhere.
EVAL_CAPTION = "a man riding a wave on top of a surfboard at dawn"
EVAL_QUESTION = "what color is the cat"
LEAKS = {"https://example.org/leak-caption-1", "https://example.org/leak-caption-2"}


COPIED = set(CORPUS.exact.values()) | set(CORPUS.near.values())
# Three unrelated documents an earlier build kept: --exclude-seen removes them.
SEEN = [rid for rid in CORPUS.originals if rid not in COPIED][:3]


def _c4_input(directory, only: list[str] | None = None) -> str:
    lines = [
        json.dumps(
            {
                "text": doc.texts[0].text,
                "timestamp": "2019-04-25T12:57:54Z",
                "url": f"https://example.org/{doc.id}",
            }
        ).encode()
        for doc in CORPUS.documents
        if only is None or doc.id in only
    ]
    if only is not None:
        return fixtures.write_c4_json_gz(str(directory), lines)
    leaks = {
        "https://example.org/leak-caption-1": f"Our photos. {EVAL_CAPTION.upper()}! More below.",
        "https://example.org/leak-caption-2": f"{EVAL_CAPTION}",
        "https://example.org/leak-question": "What color is the cat?",
        "https://example.org/fine-question": "what color is the cat on the left of the dog",
    }
    lines += [
        json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": url}).encode()
        for url, text in leaks.items()
    ]
    return fixtures.write_c4_json_gz(str(directory), lines)


def _evals(directory) -> tuple[str, str]:
    captions = directory / "captions.txt"
    captions.write_text(EVAL_CAPTION + "\n")
    questions = directory / "questions.jsonl"
    questions.write_text(
        json.dumps({"question": EVAL_QUESTION.capitalize() + "?", "image_id": 1})
        + "\n"
        + json.dumps({"question": "how many giraffes are drinking from the pond"})
        + "\n"
    )
    return str(captions), str(questions)


def _kept_urls(output: str) -> set[str]:
    urls = set()
    for path in glob.glob(os.path.join(output, "*.tar")):
        for sample in read_tar(path):
            urls.update(doc["url"] for doc in sample["json"]["documents"])
    return urls


def _url(rid: str) -> str:
    return f"https://example.org/{rid}"


def _kept_of(copy: str, source: str) -> str:
    """Of a planted copy and its source, the URL kept: the smaller record id's."""
    return min(_url(copy), _url(source), key=document_id)


def test_text_rules_remove_the_planted_copies_and_leaks(tmp_path, tokenizer_path):
    source = _c4_input(tmp_path)
    captions, questions = _evals(tmp_path)
    (tmp_path / "earlier-input").mkdir()
    earlier = run_cli(
        "build", "c4", "--input", _c4_input(tmp_path / "earlier-input", SEEN),
        "--tokenizer", tokenizer_path, *SMALL_BUILD, "--output", str(tmp_path / "earlier"),
    )  # fmt: skip
    assert earlier.returncode == 0, earlier.stderr
    common = (
        "build", "c4", "--input", source, "--tokenizer", tokenizer_path, *SMALL_BUILD,
        "--dedup-text", "near", "--decontaminate", captions, "--decontaminate", questions,
        "--exclude-seen", str(tmp_path / "earlier"),
    )  # fmt: skip
    one = run_cli(*common, "--output", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    manifest = load_manifest(str(tmp_path / "one"))
    funnel = manifest["funnel"]
    dropped = funnel["dropped"]
    assert funnel["input"] == len(CORPUS.documents) + 4
    assert funnel["input"] == funnel["kept"] + sum(dropped.values())  # the funnel balances
    assert dropped["duplicate_text"] == len(CORPUS.exact)
    assert dropped["eval_contamination"] == 3  # two captions inside, one whole question
    assert dropped["seen_in_blend"] == len(SEEN)
    assert dropped["near_duplicate_text"] >= 0.95 * len(CORPUS.near)
    assert dropped["near_duplicate_text"] <= len(CORPUS.near)
    kept = _kept_urls(str(tmp_path / "one"))
    for copy, source in CORPUS.exact.items():
        assert {_url(copy), _url(source)} & kept == {_kept_of(copy, source)}
    fresh = {_url(rid) for rid in CORPUS.originals if rid not in COPIED and rid not in SEEN}
    assert fresh <= kept and not kept & {_url(rid) for rid in SEEN}
    assert "https://example.org/fine-question" in kept
    assert not kept & LEAKS
    report = {entry["name"]: entry.get("report") for entry in manifest["stages"]}
    sources = report["decontaminate_text"]["sources"]
    assert [s["path"] for s in sources] == [captions, questions]
    assert all(len(s["sha256"]) == 64 for s in sources)
    assert report["dedup_text"]["removed"]["duplicate_text"] == len(CORPUS.exact)

    # the same bytes on 2 workers and the PortableRunner: with every image rule too, in
    # tests/cli/test_build_dedup_images.py (one build with every rule on)


def test_exact_removes_exactly_the_exact_copies(tmp_path, tokenizer_path):
    source = _c4_input(tmp_path)
    result = run_cli(
        "build", "c4", "--input", source, "--tokenizer", tokenizer_path, *SMALL_BUILD,
        "--dedup-text", "exact", "--output", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    dropped = load_manifest(str(tmp_path / "out"))["funnel"]["dropped"]
    assert dropped == {"duplicate_text": len(CORPUS.exact)}
    kept = _kept_urls(str(tmp_path / "out"))
    for copy, source in CORPUS.exact.items():
        assert {_url(copy), _url(source)} & kept == {_kept_of(copy, source)}
    assert {_url(rid) for rid in CORPUS.near} | {_url(rid) for rid in CORPUS.near.values()} <= kept


def _coyo_rows(urls: list[str]) -> list[dict]:
    return [
        {
            "id": index,
            "url": url,
            "text": f"a photograph, number {index}, taken on a bright day",
            "width": 640,
            "height": 480,
            "clip_similarity_vitb32": 0.34,
            "clip_similarity_vitl14": 0.31,
            "nsfw_score_opennsfw2": 0.01,
            "nsfw_score_gantman": 0.02,
        }
        for index, url in enumerate(urls)
    ]


def test_a_coyo_build_after_an_mmc4_build_keeps_none_of_its_images(
    tmp_path, image_server, tokenizer_path
):
    docs = mmc4_documents(6, image_server.base, images_per_doc=2)
    mmc4 = write_mmc4(str(tmp_path / "docs.jsonl"), docs)
    first = run_cli(
        "build", "mmc4", "--input", mmc4, "--tokenizer", tokenizer_path, *SMALL_BUILD,
        "--output", str(tmp_path / "mmc4"),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    with open(tmp_path / "mmc4" / INDEX, "rb") as stream:
        mmc4_urls = {value for kind, value in read_index(stream) if kind == "image_url"}
    assert len(mmc4_urls) == 12
    # COYO rows: every other one an image the MMC4 build kept, the rest new ones
    urls = [info["raw_url"] for doc in docs for info in doc["image_info"]][::2]
    urls += [f"{image_server.base}/img/48x48/coyo-only-{i}.jpg" for i in range(6)]
    parquet = fixtures.write_coyo_parquet(str(tmp_path / "coyo.parquet"), _coyo_rows(urls))
    second = run_cli(
        "build", "coyo", "--input", parquet, "--tokenizer", tokenizer_path, *SMALL_BUILD,
        "--output", str(tmp_path / "coyo"), "--exclude-seen", str(tmp_path / "mmc4"),
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    manifest = load_manifest(str(tmp_path / "coyo"))
    assert manifest["funnel"]["dropped"] == {"seen_in_blend": 6}
    assert manifest["images"]["ok"] == 6  # nothing seen was downloaded
    kept_urls = set()
    for path in glob.glob(os.path.join(tmp_path / "coyo", "*.tar")):
        for sample in read_tar(path):
            for doc in sample["json"]["documents"]:
                kept_urls.update(image["url"] for image in doc["images"])
    assert kept_urls and not kept_urls & mmc4_urls
    warned = run_cli(
        "train", "data", str(tmp_path / "mmc4"), str(tmp_path / "coyo"), "--batches", "1"
    )
    assert "overlap" not in warned.stderr


def test_corpora_fetch_never_downloads_a_duplicate_documents_images(tmp_path):
    with ImageServer() as server:
        docs = mmc4_documents(4, server.base, images_per_doc=2)
        copies = [
            {
                **doc,
                "url": doc["url"] + "/copy",
                "image_info": [
                    {**info, "raw_url": info["raw_url"].replace(".jpg", "-copy.jpg")}
                    for info in doc["image_info"]
                ],
            }
            for doc in docs[:2]
        ]  # the same sentences as two documents, other images
        given = write_mmc4(str(tmp_path / "docs.jsonl"), docs + copies)
        fetched = run_cli(
            "fetch", "mmc4", "--input", given, "--image-store", str(tmp_path / "store"),
            "--dedup-text", "exact", "--allow-private-urls", "--progress-every", "0",
            "--workers", "1",
        )  # fmt: skip
        assert fetched.returncode == 0, fetched.stderr
        images = [r for r in server.requests if r.startswith("/img/")]
    assert len(images) == 8  # 4 documents of 2 images; of each copied pair, one document's
    for doc, copy in zip(docs[:2], copies):
        requested = {info["raw_url"].split(server.base, 1)[1] for info in doc["image_info"]}
        of_copy = {info["raw_url"].split(server.base, 1)[1] for info in copy["image_info"]}
        assert (requested <= set(images)) != (of_copy <= set(images))
