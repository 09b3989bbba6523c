"""`corpora build mmc4-pairs` end to end, through the CLI, against a real
loopback HTTP image server."""

import glob
import hashlib
import os

import numpy as np
import pytest
import sentencepiece as spm
import webdataset as wds

from tests.helpers import load_manifest, read_tar, run_cli, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SEQ_LEN, PER_IMAGE = 128, 8


def _documents(server):
    img = lambda name, w=48, h=40: server.url(f"/img/{w}x{h}/{name}.jpg")  # noqa: E731
    return [
        {
            "url": "http://news.example/a",
            "text_list": ["A red kite over the beach.", "Sand and sea.", "Gulls."],
            "image_info": [
                {
                    "raw_url": img("kite"),
                    "matched_text_index": 0,
                    "matched_sim": 0.31,
                    "image_name": "k.jpg",
                },
                {"raw_url": img("sand", 80, 30), "matched_text_index": 1, "matched_sim": 0.28},
                {
                    "raw_url": server.url("/status/404"),
                    "matched_text_index": 2,
                    "matched_sim": 0.27,
                },
            ],
            "similarity_matrix": [[0.31, 0.2, 0.1], [0.2, 0.28, 0.1], [0.1, 0.1, 0.27]],
            "could_have_url_duplicate": 0,
        },
        {
            "url": "http://blog.example/b",
            "text_list": ["The cat sleeps.", "", "A long afternoon."],
            "image_info": [
                {"raw_url": img("cat"), "matched_text_index": 0, "matched_sim": 0.33},
                {
                    "raw_url": server.url("/text/not-an-image"),
                    "matched_text_index": 2,
                    "matched_sim": 0.25,
                },
                {"raw_url": img("empty"), "matched_text_index": 1, "matched_sim": 0.25},
                {"raw_url": img("range"), "matched_text_index": 9, "matched_sim": 0.25},
            ],
        },
        "this line is not JSON",
        {"url": "http://c", "image_info": []},
        {"url": "http://d", "text_list": ["Nothing to see."], "image_info": []},
    ]


@pytest.fixture(scope="module")
def built(tmp_path_factory, image_server, tokenizer_path):
    tmp = tmp_path_factory.mktemp("mmc4pairs")
    source = write_jsonl(str(tmp / "docs.jsonl"), _documents(image_server))
    out = str(tmp / "out")
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        source,
        "--output",
        out,
        "--tokenizer",
        tokenizer_path,
        "--seq-len",
        str(SEQ_LEN),
        "--tokens-per-image",
        str(PER_IMAGE),
        "--image-size",
        "32",
        "--samples-per-shard",
        "2",
        "--workers",
        "2",
        "--allow-private-urls",
    )
    assert result.returncode == 0, result.stderr
    return out, load_manifest(out), result


def test_funnel_balances_and_names_every_drop(built):
    _, manifest, result = built
    funnel = manifest["funnel"]
    assert funnel["unit"] == "pair"
    # 3 + 4 pairs from parsed documents; 1 unparseable line, 1 line without text_list,
    # 1 without images
    assert funnel["input"] == 10
    assert funnel["dropped"] == {
        "bad_json": 1,
        "missing_text_list": 1,
        "no_images": 1,
        "http_404": 1,
        "not_image": 1,
        "empty_text": 1,
        "matched_text_index_out_of_range": 1,
    }
    assert funnel["kept"] == 3
    assert funnel["input"] == funnel["kept"] + sum(funnel["dropped"].values())
    assert "http_404: 1" in result.stdout


def test_manifest_describes_the_build(built, tokenizer_path):
    out, manifest, _ = built
    assert manifest["format"] == "corpora-shards/1"
    assert manifest["corpus"] == "mmc4-pairs"
    assert (manifest["seq_len"], manifest["tokens_per_image"]) == (SEQ_LEN, PER_IMAGE)
    vocab = spm.SentencePieceProcessor(model_file=tokenizer_path).get_piece_size()
    assert manifest["image_token_id"] == vocab
    assert (manifest["bos_id"], manifest["eos_id"], manifest["pad_id"]) == (1, 2, 0)
    assert manifest["tokenizer"]["path"] == tokenizer_path
    assert len(manifest["tokenizer"]["sha256"]) == 64
    paths = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out, "*.tar")))
    assert [s["path"] for s in manifest["shards"]] == paths
    assert manifest["shard_pattern"] == (
        paths[0] if len(paths) == 1 else "mmc4-pairs-{000000..%06d}.tar" % (len(paths) - 1)
    )


def test_manifest_counts_equal_what_the_tars_hold(built):
    out, manifest, _ = built
    for shard in manifest["shards"]:
        path = os.path.join(out, shard["path"])
        samples = read_tar(path)
        assert shard["samples"] == len(samples)
        assert shard["documents"] == sum(len(s["json"]["documents"]) for s in samples)
        assert shard["images"] == sum(
            1 for s in samples for m in s["__members__"] if m.startswith("img")
        )
        assert shard["sha256"] == hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert manifest["totals"]["documents"] == manifest["funnel"]["kept"]


def test_images_match_slots_one_to_one_and_in_order(built, tokenizer_path):
    out, manifest, _ = built
    sp = spm.SentencePieceProcessor(model_file=tokenizer_path)
    image_token = manifest["image_token_id"]
    sentences = []
    for shard in manifest["shards"]:
        for sample in read_tar(os.path.join(out, shard["path"])):
            ids = sample["input_ids.npy"]
            for name in ("input_ids.npy", "segment_ids.npy", "positions.npy"):
                assert sample[name].dtype == np.int32 and sample[name].shape == (SEQ_LEN,)
            images = [m for m in sample["__members__"] if m.startswith("img")]
            assert images == [f"img{i:03d}.jpg" for i in range(len(images))]
            slots = int((ids == image_token).sum())
            assert slots == PER_IMAGE * len(images)
            docs = sample["json"]["documents"]
            # image k is the k-th image slot run: the documents' images in segment order
            in_slot_order = [
                img["sha256"]
                for d in sorted(docs, key=lambda d: d["segment"])
                for img in d["images"]
            ]
            assert in_slot_order == [hashlib.sha256(sample[name]).hexdigest() for name in images]
            # every document: <s> image slots, its sentence, </s>
            for doc in docs:
                where = np.nonzero(sample["segment_ids.npy"] == doc["segment"])[0]
                run = ids[where[0] : where[-1] + 1]
                assert run[0] == 1 and run[-1] == 2
                assert list(run[1 : 1 + PER_IMAGE]) == [image_token] * PER_IMAGE
                assert list(sample["positions.npy"][where]) == list(range(len(where)))
                sentences.append(
                    (
                        doc["images"][0]["url"].rsplit("/", 1)[1],
                        sp.decode(run[1 + PER_IMAGE : -1].tolist()),
                    )
                )
    assert sorted(sentences) == sorted(
        [
            ("cat.jpg", "The cat sleeps."),
            ("kite.jpg", "A red kite over the beach."),
            ("sand.jpg", "Sand and sea."),
        ]
    )


def test_shards_load_with_webdataset(built):
    out, manifest, _ = built
    urls = [os.path.join(out, s["path"]) for s in manifest["shards"]]
    dataset = wds.WebDataset(urls, shardshuffle=False).decode("rgb8")
    samples = list(dataset)
    assert len(samples) == manifest["totals"]["samples"]
    for sample in samples:
        assert sample["input_ids.npy"].shape == (SEQ_LEN,)
        assert isinstance(sample["json"], dict) and sample["json"]["documents"]
        for key in sample:
            if key.startswith("img"):
                assert sample[key].ndim == 3  # decoded to an image array


def test_inspect_shows_images_in_place(built):
    out, _, _ = built
    result = run_cli("inspect", out, "--index", "0")
    assert result.returncode == 0, result.stderr
    assert "[image 0: 32x32, 8 slots]" in result.stdout
    assert "<s>" in result.stdout and "</s>" in result.stdout


def test_bundled_sample_builds_without_arguments(tmp_path):
    result = run_cli("build", "mmc4-pairs", "--smoke", "--workers", "1", cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    # a --smoke build's own folder (issue 32, finding 4)
    manifest = load_manifest(str(tmp_path / "corpora-out" / "smoke" / "mmc4-pairs"))
    assert manifest["funnel"] == {
        "unit": "pair",
        "input": 9,
        "kept": 8,
        "dropped": {"file_not_found": 1},
    }
    assert manifest["totals"]["images"] == 8


def test_two_sample_builds_started_together_both_keep_all_their_images(tmp_path):
    """Both builds write and read the sample in one cache at the same moment
    (issue 31: a rewrite of a shared sample file under a running build lost
    it every image)."""
    from concurrent.futures import ThreadPoolExecutor

    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}

    def build(name: str):
        out = str(tmp_path / name)
        args = ("build", "mmc4-pairs", "--smoke", "--workers", "1", "--output", out)
        return out, run_cli(*args, env=cache)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(build, ["first", "second"]))
    for out, result in results:
        assert result.returncode == 0, result.stderr
        manifest = load_manifest(out)
        assert manifest["funnel"]["dropped"] == {"file_not_found": 1}
        assert manifest["totals"]["images"] == 8
    (sample,) = os.listdir(tmp_path / "cache" / "corpora" / "sample")  # no temporary left
    assert sample.startswith("mmc4-sample-") and sample.endswith(".jsonl")


def test_missing_input_and_bad_tokenizer_exit_2_with_one_line(tmp_path, tokenizer_path):
    missing = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        str(tmp_path / "nope.jsonl"),
        "--tokenizer",
        tokenizer_path,
    )
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        f"corpora: input not found: {tmp_path / 'nope.jsonl'}"
    ]
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    bad = run_cli("build", "mmc4-pairs", "--tokenizer", str(junk))
    assert bad.returncode == 2
    assert len(bad.stderr.strip().splitlines()) == 1 and str(junk) in bad.stderr
    unreadable = run_cli("build", "mmc4-pairs", "--tokenizer", str(tmp_path / "none.model"))
    assert unreadable.returncode == 2 and "tokenizer not found" in unreadable.stderr


# Issue 16, defect 6: an unreadable input found during the build is one line, exit 2.
def test_a_corrupt_zip_fails_the_build_with_one_line_and_exit_2(tmp_path, tokenizer_path):
    bad = tmp_path / "docs.jsonl.zip"
    bad.write_bytes(b"this is not a zip")
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        str(bad),
        "--tokenizer",
        tokenizer_path,
        "--output",
        str(tmp_path / "o"),
        "--workers",
        "1",
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"corpora: {bad}: not a zip file we can read (File is not a zip file)"
    ]


def test_list_names_the_corpus():
    result = run_cli("list")
    assert result.returncode == 0
    line = [row for row in result.stdout.splitlines() if row.startswith("mmc4-pairs ")]
    assert len(line) == 1 and "VILA's pseudo-interleaved ablation" in line[0]
