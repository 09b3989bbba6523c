import io
import re

import numpy as np
from PIL import Image

from corpora import reader
from corpora.stats import figures as stats
from corpora.stats import report
from corpora.stats.distributions import distribution
from corpora.stats.figures import StatsAccumulator, TokenIds, sequence_values

MANIFEST = {
    "corpus": "coyo",
    "seq_len": 12,
    "tokens_per_image": 2,
    "image_token_id": 9,
    "bos_id": 1,
    "eos_id": 2,
    "pad_id": 0,
    "shard_pattern": "coyo-000000.tar",
    "image_size": 64,
    "funnel": {"unit": "pair", "input": 3, "kept": 1, "dropped": {"http_404": 1, "bad_json": 1}},
}


def _jpeg(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 40, 40)).save(buffer, "JPEG")
    return buffer.getvalue()


def _sample() -> reader.Sample:
    # [bos, img, img, 5, 6, eos] as segment 1, then padding
    return reader.Sample(
        key="coyo-000000-000000",
        url="coyo-000000.tar",
        input_ids=np.array([1, 9, 9, 5, 6, 2, 0, 0, 0, 0, 0, 0]),
        segment_ids=np.array([1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]),
        positions=np.array([0, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0]),
        images=[_jpeg(400, 300)],
        documents=[
            {
                "id": "doc<1>",
                "segment": 1,
                "url": "https://x.org/?a=<b>&c",
                "images": [{"scores": {"clip_similarity_vitb32": 0.31}}],
                "split": False,
            }
        ],
    )


def _stats(manifest: dict) -> dict:
    sample = _sample()
    acc = StatsAccumulator().add(
        sequence_values(
            sample.input_ids,
            sample.segment_ids,
            sample.documents,
            TokenIds.from_manifest(manifest),
        )
    )
    return stats.finalize(acc, manifest)


def test_gallery_puts_each_thumbnail_where_its_slots_are():
    page = report.render_report(
        _stats(MANIFEST), MANIFEST, [_sample()], decode=lambda ids: f"TEXT{list(ids)}"
    )
    flow = re.search(r'<div class="flow">(.*?)</div>', page).group(1)
    order = re.findall(r"&lt;s&gt;|<img [^>]*>|TEXT\[5, 6\]|&lt;/s&gt;", flow)
    assert [o[:5] for o in order] == ["&lt;s", "<img ", "TEXT[", "&lt;/"]
    thumb = re.search(r'src="data:image/jpeg;base64,([^"]+)"', flow).group(1)
    import base64

    with Image.open(io.BytesIO(base64.b64decode(thumb))) as image:
        assert image.size == (160, 120)  # the longer side scaled to THUMBNAIL
    assert '<div class="pad">padding: 6 tokens</div>' in page


def test_the_page_is_self_contained_and_escapes_source_text():
    page = report.render_report(_stats(MANIFEST), MANIFEST, [_sample()])
    assert "default-src 'none'" in page
    assert re.findall(r'(?:src|href)="(?!data:)', page) == []
    assert "<script" not in page
    assert "doc&lt;1&gt;" in page and "https://x.org/?a=&lt;b&gt;&amp;c" in page
    assert "doc<1>" not in page
    # without a tokenizer, text runs show how many tokens they hold
    assert "‹2 tokens›" in page


def test_charts_funnel_and_reference_column():
    page = report.render_report(_stats(MANIFEST), MANIFEST, [])
    assert (
        page.count('<svg class="chart histogram"') == 4
    )  # text tokens, images, documents per sequence, score
    funnel = re.search(r'<figure id="funnel">(.*?)</figure>', page).group(1)
    assert re.findall(r"<title>([^<]*)</title></rect>", funnel) == [
        "input pairs: 3 (100.0%)",
        "dropped: bad_json: 1 (33.3%)",
        "dropped: http_404: 1 (33.3%)",
        "kept: 1 (33.3%)",
    ]
    summary = re.search(r'<table id="summary">(.*?)</table>', page).group(1)
    assert "VILA Table 2" in summary
    row = re.search(r"<tr><td>text tokens per image</td>(.*?)</tr>", summary).group(1)
    assert re.findall(r">([^<]*)</td>", row) == ["2.0", "22.7"]


def test_no_reference_column_for_corpora_vila_did_not_report():
    manifest = {**MANIFEST, "corpus": "mmc4-pairs"}
    page = report.render_report(_stats(manifest), manifest, [])
    assert "VILA" not in page


def test_histogram_has_one_bar_per_bin():
    svg = report.svg_histogram(distribution({3: 2, 5: 1}), "x")
    assert svg.count('<rect class="bar"') == 3
    assert re.findall(r"<title>([^<]*)</title></rect>", svg) == ["3: 2", "4: 0", "5: 1"]


def test_the_summary_says_how_many_images_keep_their_text():
    summary = re.search(
        r'<table id="summary">(.*?)</table>', report.render_report(_stats(MANIFEST), MANIFEST, [])
    ).group(1)
    row = re.search(r"<tr><td>images with their text in the same piece</td>(.*?)</tr>", summary)
    # the sample's one image is followed by 5, 6 in its piece; no piece ends in a slot
    assert re.findall(r">([^<]*)</td>", row.group(1))[0] == (
        "100.0% (0 pieces end in an image slot)"
    )


def test_the_dedup_section_shows_each_rule_the_repeated_images_and_the_clusters():
    from corpora.dedup.images import thumbnail

    thumb = thumbnail(_jpeg(80, 60))
    manifest = {
        **MANIFEST,
        "stages": [
            {
                "name": "duplicate_image_urls",
                "report": {
                    "removed": {"image_repeated": 11},
                    "most_repeated": [{"url": "http://x/logo.png", "documents": 11}],
                },
            },
            {"name": "duplicate_images", "report": {"removed": {"duplicate_image": 2}}},
            {
                "name": "near_duplicate_images",
                "report": {
                    "radius": 12,
                    "removed": {"near_duplicate_image": 1, "eval_contamination": 1},
                    "clusters": 1,
                    "largest_clusters": [
                        {
                            "size": 2,
                            "kept": {"record_id": "a", "position": 0},
                            "members": [
                                {"record_id": "a", "position": 0, "url": "u1", "thumbnail": thumb},
                                {"record_id": "b", "position": 0, "url": "u2", "thumbnail": thumb},
                            ],
                        }
                    ],
                    "decontaminate": [
                        {"path": "eval/", "kind": "images", "sha256": "f" * 64, "images": 3}
                    ],
                },
            },
        ],
    }
    section = stats.dedup_section(manifest)
    assert [(r["stage"], r["reason"], r["count"]) for r in section["removed"]] == [
        ("duplicate_image_urls", "image_repeated", 11),
        ("duplicate_images", "duplicate_image", 2),
        ("near_duplicate_images", "eval_contamination", 1),
        ("near_duplicate_images", "near_duplicate_image", 1),
    ]
    page = report.dedup_html(section)
    assert page.count('<img class="kept"') == 1 and page.count("<img ") == 2
    assert "11 documents" in page and "f" * 64 in page and "radius 12 bits" in page
    assert stats.dedup_section({**MANIFEST}) is None and report.dedup_html(None) == ""


def test_the_dedup_section_shows_the_clusters_by_clip_embedding():
    cluster = {
        "size": 3,
        "kept": {"record_id": "a", "position": 0},
        "members": [{"record_id": r, "position": 0, "url": f"u{r}"} for r in "abc"],
    }
    manifest = {
        **MANIFEST,
        "stages": [
            {"name": "duplicate_images", "report": {"removed": {}}},
            {
                "name": "clip_near_duplicates",
                "report": {
                    "clip_sim": 0.95,
                    "removed": {"near_duplicate_image": 2},
                    "clusters": 1,
                    "largest_clusters": [cluster],
                },
            },
        ],
    }
    section = stats.dedup_section(manifest)
    assert section["removed"] == [
        {"stage": "clip_near_duplicates", "reason": "near_duplicate_image", "count": 2}
    ]
    assert (section["clip_sim"], section["clip_cluster_count"]) == (0.95, 1)
    assert section["clip_clusters"] == [cluster]
    page = report.dedup_html(section)
    assert "by CLIP embedding (cosine at least 0.95, 1 clusters)" in page
    assert page.count('class="cluster"') == 1
    # a build without the flag has no such keys: its stats.json keeps its bytes
    without = {**manifest, "stages": manifest["stages"][:1]}
    assert stats.dedup_section(without) is None
