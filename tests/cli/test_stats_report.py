"""`corpora stats` and `corpora report` on a real build of a fixture corpus.

The statistics are recomputed here independently, from the tars with plain
tarfile + numpy (tests.helpers.read_tar), and must equal both `corpora stats
--json` and the stats.json the build wrote.
"""

import collections
import json
import os
import re

import numpy as np
import pytest

from corpora.config.bundled_sample import SAMPLE_TOKENIZER
from tests.browser import Browser
from tests.corpora.shards.built import write_build
from tests.corpora.shards.test_reading import cut_at_a_member_boundary
from tests.fixtures import SENTENCES
from tests.helpers import REPO, load_manifest, read_tar, run_cli, write_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LONG = " ".join(SENTENCES[i % 5] for i in range(7))  # longer than seq_len: split across sequences
SEQ_LEN, TOKENS_PER_IMAGE = 160, 8


def _image(url: str, matched: int, sim: float) -> dict:
    return {
        "raw_url": url,
        "image_name": url.rsplit("/", 1)[-1],
        "matched_text_index": matched,
        "matched_sim": sim,
        "face_detections": None,
    }


@pytest.fixture(scope="module")
def fixture_corpus(tmp_path_factory, image_server):
    """MMC4 lines: pairs that fetch, a 404, a page that is not an image, a
    document without images, a broken line, and a sentence that is split."""
    img = image_server.url
    rows = [
        {
            "url": "https://example.org/one",
            "text_list": SENTENCES[:4],
            "image_info": [
                _image(img("/img/40x30/one-a.jpg"), 0, 0.3125),
                _image(img("/img/50x50/one-b.jpg"), 2, 0.2704),
                _image(img("/status/404"), 1, 0.2),
            ],
        },
        {
            "url": "https://example.org/long",
            "text_list": [LONG, SENTENCES[4]],
            "image_info": [
                _image(img("/img/60x40/long.jpg"), 0, 0.3333),
                _image(img("/text/page"), 1, 0.25),
            ],
        },
        {"url": "https://example.org/none", "text_list": SENTENCES[:1], "image_info": []},
        "{this line is not json",
        {
            "url": "https://example.org/five",
            "text_list": SENTENCES,
            "image_info": [
                _image(img(f"/img/{30 + 5 * k}x32/five-{k}.jpg"), (k * 2) % 5, 0.21 + k / 50)
                for k in range(5)
            ],
        },
    ]
    directory = tmp_path_factory.mktemp("stats-fixture")
    source = write_jsonl(str(directory / "docs.jsonl"), rows)
    sentence_of = {}
    for row in rows:
        if isinstance(row, dict):
            for image in row["image_info"]:
                sentence_of[image["raw_url"]] = row["text_list"][image["matched_text_index"]]
    return source, sentence_of


@pytest.fixture(scope="module")
def built(fixture_corpus, tokenizer_path, tmp_path_factory):
    source, sentence_of = fixture_corpus
    output = str(tmp_path_factory.mktemp("stats-build") / "out")
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--input",
        source,
        "--output",
        output,
        "--tokenizer",
        tokenizer_path,
        "--seq-len",
        str(SEQ_LEN),
        "--tokens-per-image",
        str(TOKENS_PER_IMAGE),
        "--image-size",
        "32",
        "--samples-per-shard",
        "2",
        "--pack-groups",
        "2",
        "--workers",
        "1",
        "--allow-private-urls",
    )
    assert result.returncode == 0, result.stderr
    # (not asserted on stdout: the foundation's build summary is intermittently lost,
    # see the report)
    assert os.path.isfile(os.path.join(output, "stats.json"))
    return output, sentence_of


def _dist(values: list) -> dict:
    """The documented distribution, computed with numpy."""
    array = np.asarray(values)
    low, high = int(array.min()), int(array.max())
    span = high - low + 1
    width = 1 if span <= 40 else -(-span // 20)
    edges = list(range(low, high + width + 1, width))[: -(-span // width) + 1]
    counts, _ = np.histogram(array, bins=edges)
    return {
        "count": int(array.size),
        "sum": int(array.sum()),
        "mean": float(array.mean()),
        "min": low,
        "max": high,
        "median": float(np.median(array)),
        "p5": int(np.percentile(array, 5, method="inverted_cdf")),
        "p95": int(np.percentile(array, 95, method="inverted_cdf")),
        "histogram": {"edges": edges, "counts": counts.tolist()},
    }


def _score_dist(values: list) -> dict:
    quantised = [int(q) for q in np.round(np.asarray(values) * 10_000)]
    d = _dist(quantised)
    scaled = {k: d[k] / 10_000 for k in ("sum", "min", "max", "median", "p5", "p95")}
    return {
        **d,
        **scaled,
        "mean": d["sum"] / d["count"] / 10_000,
        "histogram": {
            "edges": [e / 10_000 for e in d["histogram"]["edges"]],
            "counts": d["histogram"]["counts"],
        },
    }


def independent_stats(directory: str) -> dict:
    manifest = load_manifest(directory)
    image_id, bos, eos = manifest["image_token_id"], manifest["bos_id"], manifest["eos_id"]
    per_image = manifest["tokens_per_image"]
    totals = collections.Counter()
    documents: dict[str, list[int]] = {}  # id -> [text tokens, images, pieces]
    per_sequence, scores = [], collections.defaultdict(list)
    for shard in manifest["shards"]:
        for sample in read_tar(os.path.join(directory, shard["path"])):
            ids, segments = sample["input_ids.npy"], sample["segment_ids.npy"]
            entries = {d["segment"]: d for d in sample["json"]["documents"]}
            totals["sequences"] += 1
            totals["tokens"] += ids.size
            totals["padding_tokens"] += int((segments == 0).sum())
            present = sorted(int(s) for s in set(segments.tolist()) if s)
            per_sequence.append(len(present))
            runs = 0
            for segment in present:
                mask = segments == segment
                image = mask & (ids == image_id)
                special = mask & ((ids == bos) | (ids == eos))
                # images: runs of image_token_id, each tokens_per_image long
                starts = np.flatnonzero(np.diff(np.concatenate([[0], image.astype(int)])) == 1)
                lengths = [int(np.argmin(image[s:].tolist() + [False])) for s in starts]
                n_images = sum(length // per_image for length in lengths)
                runs += n_images
                # an image keeps its text where the token after its run is text of its segment
                last = int(np.flatnonzero(mask)[-1])
                for start, length in zip(starts, lengths):
                    after = start + length
                    if after <= last and ids[after] not in (bos, eos):
                        totals["images_with_text"] += length // per_image
                totals["pieces_ending_in_image"] += int(image[last])
                entry = entries[segment]
                doc = documents.setdefault(entry["id"], [0, 0, entry["pieces"]])
                doc[0] += int(mask.sum() - image.sum() - special.sum())
                doc[1] += n_images
                totals["text_tokens"] += int(mask.sum() - image.sum() - special.sum())
                totals["image_tokens"] += int(image.sum())
                totals["special_tokens"] += int(special.sum())
                for img in entry["images"]:
                    for name, value in img.get("scores", {}).items():
                        scores[name].append(value)
            assert runs == sum(
                1 for m in sample["__members__"] if re.fullmatch(r"img\d{3}\.jpg", m)
            )
            totals["images"] += runs
    text = [d[0] for d in documents.values()]
    images = [d[1] for d in documents.values()]
    funnel = manifest["funnel"]
    dropped = sorted(funnel["dropped"].items(), key=lambda kv: (-kv[1], kv[0]))
    failures = {"http_404": 1, "not_image": 1}  # the fixture's two images that cannot be fetched
    attempted = totals["images"] + sum(failures.values())
    return {
        "stats_version": 1,
        "corpus": "mmc4-pairs",
        "seq_len": SEQ_LEN,
        "tokens_per_image": TOKENS_PER_IMAGE,
        "scope": "build",
        "totals": {
            "documents": len(documents),
            **{
                k: totals[k]
                for k in (
                    "images",
                    "tokens",
                    "text_tokens",
                    "image_tokens",
                    "special_tokens",
                    "padding_tokens",
                )
            },
        },
        "text_tokens_per_image": totals["text_tokens"] / totals["images"],
        "images_per_document": _dist(images),
        "text_tokens_per_document": _dist(text),
        "packing": {
            "sequences": totals["sequences"],
            "pieces": sum(per_sequence),
            "documents_per_sequence": _dist(per_sequence),
            "non_padding_fraction": (totals["tokens"] - totals["padding_tokens"])
            / totals["tokens"],
            "split_documents": sum(1 for d in documents.values() if d[2] > 1),
            "split_fraction": sum(1 for d in documents.values() if d[2] > 1) / len(documents),
            "incomplete_documents": 0,
            "images_with_text_fraction": totals["images_with_text"] / totals["images"],
            "pieces_ending_in_image": totals["pieces_ending_in_image"],
            "short_pieces_dropped": {"pieces": 0, "tokens": 0},
        },
        "funnel": {
            "unit": "pair",
            "input": funnel["input"],
            "kept": funnel["kept"],
            "kept_share": funnel["kept"] / funnel["input"],
            "dropped": [
                {"reason": r, "count": c, "share": c / funnel["input"]} for r, c in dropped
            ],
        },
        "scores": {name: _score_dist(values) for name, values in scores.items()},
        "image_fetch": {
            "attempted": attempted,
            "fetched": totals["images"],
            "failed": sum(failures.values()),
            "success_rate": totals["images"] / attempted,
            "failures": [
                {"reason": r, "count": c, "share": c / attempted}
                for r, c in sorted(failures.items())
            ],
        }
        | ({"manifest": manifest["images"]} if "images" in manifest else {}),
        "reference": None,
    }


def test_stats_equal_an_independent_recomputation_and_the_builds_stats_json(built):
    output, _ = built
    expected = independent_stats(output)
    # the fixture exercises what it is meant to
    assert expected["funnel"]["input"] == 12 and expected["funnel"]["kept"] == 8
    assert expected["packing"]["split_documents"] == 1 and expected["totals"]["images"] == 8
    assert len(load_manifest(output)["shards"]) > 1

    result = run_cli("stats", output, "--json")
    assert result.returncode == 0, result.stderr
    from_cli = json.loads(result.stdout)
    with open(os.path.join(output, "stats.json")) as handle:
        from_build = json.load(handle)
    assert from_cli == from_build
    assert from_cli == expected
    # the fetch stage's own accounting agrees with what the shards and the funnel show
    images = load_manifest(output)["images"]
    assert images["failed"] == {
        f["reason"]: f["count"] for f in expected["image_fetch"]["failures"]
    }
    assert images["input"] == expected["image_fetch"]["attempted"]


def test_stats_accepts_the_manifest_and_a_single_shard(built):
    output, _ = built
    by_manifest = run_cli("stats", os.path.join(output, "manifest.json"), "--json")
    assert json.loads(by_manifest.stdout) == json.loads(run_cli("stats", output, "--json").stdout)
    shard = os.path.join(output, load_manifest(output)["shards"][0]["path"])
    one = json.loads(run_cli("stats", shard, "--json").stdout)
    samples = read_tar(shard)
    assert one["scope"] == "shards" and one["funnel"] is None
    assert one["packing"]["sequences"] == len(samples)
    assert one["totals"]["padding_tokens"] == sum(
        int((s["segment_ids.npy"] == 0).sum()) for s in samples
    )


def test_stats_prints_a_compact_table(built):
    output, _ = built
    result = run_cli("stats", output)
    assert result.returncode == 0, result.stderr
    figures = json.loads(run_cli("stats", output, "--json").stdout)
    lines = result.stdout.splitlines()
    assert lines[0] == f"mmc4-pairs: seq_len {SEQ_LEN}, {TOKENS_PER_IMAGE} tokens per image"
    row = {line[:26].strip(): line[26:].strip() for line in lines[1:]}
    assert row["documents"] == str(figures["totals"]["documents"])
    assert row["text tokens per image"] == f"{figures['text_tokens_per_image']:.1f}"
    assert row["dropped http_404"].startswith("1 (")
    assert row["image fetch success"] == "80.0% of 10"


@pytest.mark.parametrize(
    "target, message",
    [
        ("missing-dir", "corpora: not found:"),
        ("stats.json", "corpora: not a corpora manifest:"),
    ],
)
def test_stats_bad_input_is_one_line_exit_2(built, target, message):
    output, _ = built
    result = run_cli("stats", os.path.join(output, target))
    assert result.returncode == 2
    assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1


def test_report_renders_offline_in_headless_chromium(built):
    output, sentence_of = built
    result = run_cli("report", output, "--samples", "8")
    assert result.returncode == 0, result.stderr
    page = os.path.join(output, "report.html")
    assert result.stdout.strip() == f"Wrote {page}"

    manifest = load_manifest(output)
    first = [
        s for shard in manifest["shards"] for s in read_tar(os.path.join(output, shard["path"]))
    ][:8]
    expected_images = sum(1 for s in first for m in s["__members__"] if m.startswith("img"))
    artifacts = os.path.join(REPO, "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    screenshot = os.path.join(artifacts, "report-mmc4-pairs.png")
    with Browser() as browser:
        browser.open("file://" + page)
        assert browser.errors() == []
        seen = browser.evaluate("""(() => {
            const imgs = Array.from(document.querySelectorAll('#gallery img'));
            return {
              histograms: document.querySelectorAll('svg.chart.histogram').length,
              bars: document.querySelectorAll('svg.chart rect').length,
              funnel: document.querySelectorAll('#funnel svg.chart rect').length,
              images: imgs.length,
              loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
              external: Array.from(document.querySelectorAll('[src],[href]'))
                  .map(e => e.getAttribute('src') || e.getAttribute('href'))
                  .filter(u => !u.startsWith('data:')).length,
              segments: Array.from(document.querySelectorAll('#gallery .segment')).map(s => ({
                  meta: s.querySelector('.meta').textContent,
                  flow: Array.from(s.querySelector('.flow').childNodes).map(
                      n => n.nodeName === 'IMG' ? ' [IMG] ' : n.textContent).join('')})),
              summary: document.querySelector('#summary').textContent,
            };
        })()""")
        browser.screenshot(screenshot)
    # histograms: text tokens, images, documents per sequence, matched_sim;
    # funnel bars: input, bad_json, http_404, no_images, not_image, kept
    assert seen["histograms"] == 4
    assert seen["funnel"] == 2 + len(manifest["funnel"]["dropped"]) == 6
    assert seen["images"] == expected_images > 0 and seen["loaded"] == expected_images
    assert seen["external"] == 0
    assert "VILA" not in seen["summary"]  # no reference values for mmc4-pairs
    # each thumbnail sits right before the sentence it is matched to
    documents = {d["id"]: d for s in first for d in s["json"]["documents"]}
    checked = 0
    for segment in seen["segments"]:
        doc = documents[segment["meta"].split(" · ")[1]]
        flow = " ".join(segment["flow"].split())
        if " · piece " not in segment["meta"] or " · piece 1 of " in segment["meta"]:
            assert flow.startswith(
                "<s> [IMG]"
            )  # a document (or its first piece) opens with its image
        if not doc["split"]:
            sentence = sentence_of[doc["images"][0]["url"]]
            assert flow == f"<s> [IMG] {sentence} </s>"
            checked += 1
    assert checked >= 3
    with open(screenshot, "rb") as handle:
        png = handle.read()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_the_browser_check_catches_errors_and_network_requests(tmp_path):
    """The harness above would fail a page that errs or reaches the network."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><link rel="icon" href="data:,"><img src="http://example.com/x.png">'
        '<script>console.error("broken")</script><script>undefinedFunction()</script>'
    )
    with Browser() as browser:
        browser.open("file://" + str(bad))
        errors = browser.errors()
    assert "request: http://example.com/x.png" in errors
    assert "console: broken" in errors
    assert any(e.startswith("exception:") for e in errors)


# ------------------------------------------------ verified on read (issue 16, defect 5)


@pytest.fixture()
def cut_build(tmp_path) -> tuple[str, str]:
    """A build whose first shard is cut at a member boundary: it reads as a valid tar."""
    build = write_build(str(tmp_path), tokenizer_path=SAMPLE_TOKENIZER)
    shard = os.path.join(build, "mmc4-pairs-000000.tar")
    cut_at_a_member_boundary(shard)
    return build, shard


@pytest.mark.parametrize(
    "command", [["stats"], ["report"], ["inspect"], ["inspect", "--index", "5"]]
)
def test_a_shard_cut_short_is_one_line_naming_it_exit_2(cut_build, command):
    build, shard = cut_build
    result = run_cli(*command, build)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"corpora: shard does not match the manifest: {shard}: ")
    assert "bytes, the manifest says" in line
    assert not os.path.exists(os.path.join(build, "report.html"))


def test_no_verify_reads_the_shards_as_they_are(cut_build):
    build, _ = cut_build
    result = run_cli("stats", build, "--json", "--no-verify")
    assert result.returncode == 0, result.stderr
    listed = load_manifest(build)["totals"]["samples"]
    assert json.loads(result.stdout)["packing"]["sequences"] == listed - 1  # one sample cut off


@pytest.mark.parametrize(
    "content, message",
    [
        (b"junk" * 300, "corpora: unreadable shard"),
        (b"", "corpora: unreadable shard"),
    ],
    ids=["junk", "empty"],
)
def test_inspect_on_a_bad_tar_is_one_line(tmp_path, content, message):
    shard = tmp_path / "x-000000.tar"
    shard.write_bytes(content)
    result = run_cli("inspect", str(shard))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(message)


@pytest.mark.parametrize("command", ["inspect", "stats", "report"])
def test_a_manifest_with_wrong_types_or_paths_outside_is_one_line(tmp_path, command):
    build = write_build(str(tmp_path))
    manifest = load_manifest(build)
    manifest["bos_id"] = "1"
    with open(os.path.join(build, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    result = run_cli(command, build)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"corpora: not a corpora manifest: {build}/manifest.json "
        "(bos_id is '1', not an integer in [-1, 2147483647])"
    ]
    manifest["bos_id"] = 1
    manifest["shards"][0]["path"] = "../../outside.tar"
    with open(os.path.join(build, "manifest.json"), "w") as handle:
        json.dump(manifest, handle)
    result = run_cli(command, build)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"corpora: shard path outside the build: '../../outside.tar' in {build}"
    ]
