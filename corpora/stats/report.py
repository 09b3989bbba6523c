"""``report.html``: a build's statistics as one self-contained page.

Everything is inline (CSS, SVG charts, JPEG thumbnails as base64 ``data:``
URLs) and a Content-Security-Policy forbids loading anything else, so the
page opens the same offline, from a bucket, or attached to an email. There is
no JavaScript.
"""

from __future__ import annotations

import base64
import html
import io
import os
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from corpora import reader
from corpora.record import open_image
from corpora.shards.writing import write_into
from corpora.stats import figures as corpus_stats
from corpora.stats.table import format_number, format_share

REPORT = "report.html"
THUMBNAIL = 160  # px, the longer side of a gallery thumbnail

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 72em; padding: 0 1.5em; color: #1d2330; background: #fff; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid #dde; }
.sub { color: #667; margin-top: 0; }
table { border-collapse: collapse; margin: .6em 0; }
td, th { padding: .25em .9em .25em 0; text-align: left; vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr + tr td { border-top: 1px solid #eef; }
th { color: #556; font-weight: 600; }
.ref { color: #8a4b00; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; } figcaption { color: #556; font-size: .9em; }
svg.chart text { font: 11px system-ui, sans-serif; fill: #445; }
svg.chart rect.bar { fill: #4a72b8; } svg.chart rect.drop { fill: #c8553d; }
svg.chart rect.kept { fill: #3f8f5a; }
.sample { border: 1px solid #dde; border-radius: 6px; padding: .8em 1em; margin: 1em 0; }
.sample h3 { margin: 0 0 .4em; font-size: 1em; }
.segment { margin: .6em 0; padding-left: .8em; border-left: 3px solid #cdd6ea; }
.segment .meta { color: #667; font-size: .85em; }
.segment .flow { line-height: 1.9; }
.flow img.thumb { vertical-align: middle; max-height: 120px; margin: .2em .4em; border-radius: 3px;
                  box-shadow: 0 0 0 1px #bbc; }
.special { color: #99a; font-size: .8em; font-family: monospace; }
.pad { color: #99a; font-size: .85em; }
.dedup img { vertical-align: middle; width: 64px; height: 64px; object-fit: cover;
             margin: .2em; border-radius: 3px; box-shadow: 0 0 0 1px #bbc; }
.cluster { margin: .4em 0; } .cluster .kept { box-shadow: 0 0 0 2px #3f8f5a; }
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


# ── charts ───────────────────────────────────────────────────────────────────


def svg_histogram(dist: Mapping[str, Any] | None, label: str, digits: int = 0) -> str:
    """A bar chart of ``dist["histogram"]`` as inline SVG (one rect per bin)."""
    if not dist:
        return ""
    edges, counts = dist["histogram"]["edges"], dist["histogram"]["counts"]
    width, height, left, bottom, top = 360, 170, 40, 22, 12
    plot_w, plot_h = width - left - 10, height - bottom - top
    peak = max(counts) or 1
    bar_w = plot_w / len(counts)
    parts = [
        f'<svg class="chart histogram" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{_esc(label)}</title>",
    ]
    for k, count in enumerate(counts):
        h = plot_h * count / peak
        low, high = edges[k], edges[k + 1]
        span = (
            f"{format_number(low, digits)}"
            if isinstance(low, int) and high - low == 1
            else f"[{format_number(low, digits)}, {format_number(high, digits)})"
        )
        parts.append(
            f'<rect class="bar" x="{left + k * bar_w + 1:.1f}" y="{top + plot_h - h:.1f}" '
            f'width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}">'
            f"<title>{_esc(span)}: {count}</title></rect>"
        )
    parts.append(
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#889"/>'
    )
    parts.append(f'<text x="{left - 4}" y="{top + 8}" text-anchor="end">{peak}</text>')
    parts.append(f'<text x="{left - 4}" y="{top + plot_h}" text-anchor="end">0</text>')
    unit_bins = isinstance(edges[0], int) and edges[1] - edges[0] == 1
    if unit_bins:  # one bar per value: label the first and last bars' values under them
        parts.append(
            f'<text x="{left + bar_w / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle">'
            f"{format_number(edges[0])}</text>"
        )
        if len(counts) > 1:
            parts.append(
                f'<text x="{left + plot_w - bar_w / 2:.1f}" y="{top + plot_h + 14}" '
                f'text-anchor="middle">{format_number(edges[-1] - 1)}</text>'
            )
    else:
        parts.append(
            f'<text x="{left}" y="{top + plot_h + 14}">{format_number(edges[0], digits)}</text>'
        )
        parts.append(
            f'<text x="{left + plot_w}" y="{top + plot_h + 14}" text-anchor="end">'
            f"{format_number(edges[-1], digits)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def svg_bars(rows: Sequence[tuple[str, int, str]], total: int, title: str) -> str:
    """Horizontal bars ``(label, count, css class)`` scaled to ``total``."""
    if not rows:
        return ""
    label_w, bar_w, row_h = 220, 380, 22
    width, height = label_w + bar_w + 110, row_h * len(rows) + 8
    parts = [
        f'<svg class="chart bars" role="img" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{_esc(title)}</title>",
    ]
    for i, (label, count, css) in enumerate(rows):
        y = 4 + i * row_h
        w = bar_w * count / total if total else 0
        share = format_share(count / total) if total else "–"
        parts.append(f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end">{_esc(label)}</text>')
        parts.append(
            f'<rect class="{css}" x="{label_w}" y="{y + 3}" width="{max(w, 1):.1f}" '
            f'height="{row_h - 6}">'
            f"<title>{_esc(label)}: {count} ({share})</title></rect>"
        )
        parts.append(
            f'<text x="{label_w + max(w, 1) + 6:.1f}" y="{y + 15}">{count:,} ({share})</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def funnel_chart(funnel: Mapping[str, Any] | None) -> str:
    if not funnel:
        return ""
    rows = [(f"input {funnel['unit']}s", funnel["input"], "bar")]
    rows += [(f"dropped: {d['reason']}", d["count"], "drop") for d in funnel["dropped"]]
    rows.append(("kept", funnel["kept"], "kept"))
    return svg_bars(rows, funnel["input"], "record funnel")


# ── gallery ──────────────────────────────────────────────────────────────────


def thumbnail(data: bytes) -> str | None:
    """A JPEG ``data:`` URL of the image at most THUMBNAIL px on its longer side."""

    try:
        with open_image(data) as image:
            if image.width * image.height > reader.MAX_IMAGE_PIXELS:  # a bomb: never decoded
                return None
            image.draft("RGB", (THUMBNAIL, THUMBNAIL))  # JPEG: decode at a reduced size
            image = image.convert("RGB")
            image.thumbnail((THUMBNAIL, THUMBNAIL))
            buffer = io.BytesIO()
            image.save(buffer, "JPEG", quality=85)
    except Exception:  # Pillow raises many types for bad data; the gallery says so instead
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def sample_html(
    sample: reader.Sample,
    manifest: Mapping[str, Any],
    decode: Callable[[list[int]], str] | None,
) -> str:
    """One packed sequence (read with ``decode_images=False``): per segment its
    text, with each image's thumbnail where its slot run sits."""
    ids, segments = np.asarray(sample.input_ids), np.asarray(sample.segment_ids)
    image_token, bos, eos = manifest["image_token_id"], manifest["bos_id"], manifest["eos_id"]
    documents = {d["segment"]: d for d in sample.documents}
    images = sample.images
    out = [f'<div class="sample"><h3>{_esc(sample.key)}</h3>']
    image_index = 0
    for segment in [int(s) for s in np.unique(segments) if s > 0]:
        doc = documents.get(segment, {})
        where = np.flatnonzero(segments == segment)
        meta = [f"segment {segment}", _esc(doc.get("id", "?"))]
        if doc.get("url"):
            meta.append(_esc(doc["url"]))
        if doc.get("split"):
            meta.append(f"piece {doc.get('piece', 0) + 1} of {doc.get('pieces', 1)}")
        out.append(
            f'<div class="segment"><div class="meta">{" · ".join(meta)}</div><div class="flow">'
        )
        run = ids[int(where[0]) : int(where[-1]) + 1]
        for part in reader.segment_parts(run, image_token, manifest["tokens_per_image"], bos, eos):
            if part[0] == "text":
                out.append(
                    _esc(decode(part[1]))
                    if decode
                    else f'<span class="special">‹{len(part[1])} tokens›</span>'
                )
                out.append(" ")
            elif part[0] == "image":
                url = thumbnail(images[image_index]) if image_index < len(images) else None
                if url:
                    out.append(
                        f'<img class="thumb" alt="image {image_index}" title="image {image_index}" '
                        f'src="{url}">'
                    )
                elif image_index < len(images):
                    out.append(
                        f'<span class="special">[image {image_index} not shown: unreadable, '
                        "or too many pixels to decode]</span>"
                    )
                else:
                    out.append(f'<span class="special">[image {image_index}: missing]</span>')
                image_index += 1
            else:
                special = "&lt;s&gt;" if part[0] == "bos" else "&lt;/s&gt;"
                out.append(f'<span class="special">{special}</span> ')
        out.append("</div></div>")
    padding = int((segments == 0).sum())
    if padding:
        out.append(f'<div class="pad">padding: {padding} tokens</div>')
    out.append("</div>")
    return "".join(out)


# ── the page ─────────────────────────────────────────────────────────────────


def _dist_cells(dist: Mapping[str, Any] | None, digits: int = 1) -> str:
    if not dist:
        return '<td class="num">–</td>' * 6
    return "".join(
        f'<td class="num">{format_number(dist[k], digits)}</td>'
        for k in ("count", "mean", "median", "p5", "p95", "max")
    )


def _thumb(entry: Mapping[str, Any], css: str = "") -> str:
    uri = entry.get("thumbnail")
    if not isinstance(uri, str) or not uri.startswith("data:image/jpeg;base64,"):
        return ""
    title = entry.get("url") or entry.get("record_id") or ""
    return f'<img class="{css}" alt="" title="{_esc(title)}" src="{_esc(uri)}">'


def _clusters_html(clusters) -> str:
    """Each cluster's thumbnails side by side, the kept image framed."""
    return "".join(
        f'<div class="cluster">{format_number(c["size"])} images: '
        + "".join(
            _thumb(
                m,
                "kept"
                if (m["record_id"], m["position"])
                == (c["kept"]["record_id"], c["kept"]["position"])
                else "",
            )
            for m in c["members"]
        )
        + "</div>"
        for c in clusters
    )


def dedup_html(section: Mapping[str, Any] | None) -> str:
    """The dedup section: images removed by each rule, the most repeated
    images, the largest near-duplicate clusters side by side (the kept image
    first, framed), and the decontamination sources with their sha256."""
    if not section:
        return ""
    rows = "".join(
        f"<tr><td>{_esc(r['reason'])}</td><td>{_esc(r['stage'])}</td>"
        f'<td class="num">{format_number(r["count"])}</td></tr>'
        for r in section["removed"]
    )
    parts = [
        "<h2>Duplicates and evaluation images</h2>",
        '<table id="dedup"><tr><th>rule</th><th>stage</th><th class="num">images removed</th>'
        f"</tr>{rows}</table>",
    ]
    if section.get("most_repeated"):
        items = "".join(
            f"<figure>{_thumb(e)}<figcaption>{format_number(e['documents'])} documents"
            f"</figcaption></figure>"
            for e in section["most_repeated"]
        )
        parts.append(f'<h3>Most repeated images</h3><div class="charts dedup">{items}</div>')
    if section.get("largest_clusters"):
        parts.append(
            f"<h3>Near-duplicate clusters (radius {_esc(section.get('near_radius'))} bits, "
            f"{format_number(section.get('clusters'))} clusters)</h3>"
            f'<div class="dedup">{_clusters_html(section["largest_clusters"])}</div>'
        )
    if section.get("clip_clusters"):
        parts.append(
            f"<h3>Near-duplicate clusters by CLIP embedding (cosine at least "
            f"{_esc(section.get('clip_sim'))}, {format_number(section.get('clip_cluster_count'))}"
            f' clusters)</h3><div class="dedup">{_clusters_html(section["clip_clusters"])}</div>'
        )
    if section.get("decontaminate"):
        sources = "".join(
            f'<tr><td>{_esc(s["path"])}</td><td class="num">{format_number(s["images"])}</td>'
            f"<td><code>{_esc(s['sha256'])}</code></td></tr>"
            for s in section["decontaminate"]
        )
        parts.append(
            "<h3>Decontaminated against</h3><table><tr><th>source</th>"
            f'<th class="num">images</th><th>sha256</th></tr>{sources}</table>'
        )
    return "\n".join(parts)


def render_report(
    stats: Mapping[str, Any],
    manifest: Mapping[str, Any],
    samples: Iterable[reader.Sample] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> str:
    """The whole page as a string."""
    totals, packing = stats["totals"], stats["packing"]
    fetch = stats.get("image_fetch") or {
        "fetched": 0,
        "failures": [],
        "attempted": 0,
        "success_rate": None,
    }
    reference = (stats.get("reference") or {}).get("values") or {}
    ref_head = '<th class="num ref">VILA Table 2</th>' if reference else ""

    def row(label: str, value: str, ref_key: str | None = None) -> str:
        ref = ""
        if reference:
            shown = format_number(reference.get(ref_key)) if ref_key in reference else ""
            ref = f'<td class="num ref">{shown}</td>'
        return f'<tr><td>{_esc(label)}</td><td class="num">{value}</td>{ref}</tr>'

    ipd = stats["images_per_document"]
    headline = [
        row("documents", format_number(totals["documents"])),
        row("images", format_number(totals["images"])),
        row("text tokens", format_number(totals["text_tokens"])),
        row("image-slot tokens", format_number(totals["image_tokens"])),
        row("BOS/EOS tokens", format_number(totals["special_tokens"])),
        row("padding tokens", format_number(totals["padding_tokens"])),
        row(
            "text tokens per image",
            format_number(stats["text_tokens_per_image"]),
            "text_tokens_per_image",
        ),
        row(
            "images per document (mean)",
            format_number(ipd["mean"] if ipd else None),
            "images_per_document",
        ),
        row("sequences", format_number(packing["sequences"])),
        row("non-padding fraction", format_share(packing["non_padding_fraction"])),
        row(
            "documents split across sequences",
            f"{format_number(packing['split_documents'])} "
            f"({format_share(packing['split_fraction'])})",
        ),
    ]
    if packing.get("images_with_text_fraction") is not None:
        headline.append(
            row(
                "images with their text in the same piece",
                f"{format_share(packing['images_with_text_fraction'])} "
                f"({format_number(packing['pieces_ending_in_image'])} pieces end in an image slot)",
            )
        )
    dists = [
        ("text tokens per document", stats["text_tokens_per_document"], 1),
        ("images per document", ipd, 2),
        ("documents per sequence", packing["documents_per_sequence"], 2),
    ]
    dists += [(f"score: {name}", dist, 4) for name, dist in stats["scores"].items()]
    dist_rows = "".join(
        f"<tr><td>{_esc(label)}</td>{_dist_cells(dist, digits)}</tr>"
        for label, dist, digits in dists
    )
    charts = "".join(
        f"<figure>{svg_histogram(dist, label, 0 if digits < 4 else 3)}"
        f"<figcaption>{_esc(label)}</figcaption></figure>"
        for label, dist, digits in dists
        if dist
    )

    fetch_rows = [("fetched", fetch["fetched"], "kept")]
    fetch_rows += [(f"failed: {f['reason']}", f["count"], "drop") for f in fetch["failures"]]
    summary_rows = f'<tr><th></th><th class="num">this build</th>{ref_head}</tr>{"".join(headline)}'
    fetch_chart = (
        svg_bars(fetch_rows, fetch["attempted"], "image fetch outcomes")
        if fetch["attempted"]
        else ""
    )
    funnel = stats.get("funnel")
    gallery = "".join(sample_html(s, manifest, decode) for s in samples)
    title = f"corpora report: {stats['corpus']}"
    reference_note = ""
    if reference:
        reference_note = (
            f'<p class="sub ref">Reference column: {_esc(stats["reference"]["source"])}. '
            "Compare only with a build that uses the same tokenizer.</p>"
        )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{_esc(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{_esc(title)}</h1>
<p class="sub">{_esc(manifest.get("shard_pattern") or "no shards")} ·
seq_len {_esc(stats["seq_len"])} · {_esc(stats["tokens_per_image"])} tokens per image ·
image size {_esc(manifest.get("image_size"))} px ·
tokenizer {_esc(os.path.basename((manifest.get("tokenizer") or {}).get("path", "?")))} ·
built {_esc(manifest.get("created", "?"))}</p>

<h2>Summary</h2>
<table id="summary">{summary_rows}</table>
{reference_note}

<h2>Distributions</h2>
<table id="distributions"><tr><th></th><th class="num">count</th><th class="num">mean</th>
<th class="num">median</th><th class="num">p5</th><th class="num">p95</th>
<th class="num">max</th></tr>
{dist_rows}</table>
<div class="charts">{charts}</div>

<h2>Record funnel</h2>
<figure id="funnel">{funnel_chart(funnel) or "<p>No funnel in the manifest.</p>"}</figure>

<h2>Image fetch</h2>
<p>{format_share(fetch["success_rate"])} of {format_number(fetch["attempted"])} images fetched.</p>
<figure id="fetch">{fetch_chart}</figure>
{dedup_html(stats.get("dedup"))}

<h2>Packed samples</h2>
<p class="sub">Each image's thumbnail sits where its slot run is in the sequence.</p>
<div id="gallery">{gallery or "<p>No samples.</p>"}</div>
</body></html>
"""


def write_report(
    path: str,
    output: str | None = None,
    samples: int = 3,
    progress: Callable[[int, int, str], None] | None = None,
    verify: bool = True,
) -> str:
    """Compute ``path``'s statistics from its shards and write ``report.html``
    (beside the manifest unless ``output`` says where); returns its path. With
    ``verify`` the shards are checked against the manifest first
    (:func:`corpora.stats.figures.stats_from_shards`)."""
    import itertools

    stats = corpus_stats.stats_from_shards(path, progress, verify)
    build = reader.locate(path)
    gallery = list(
        itertools.islice(reader.iter_samples(build.shards, decode_images=False), samples)
    )
    page = render_report(stats, build.manifest, gallery, reader.text_decoder(build.manifest))
    if output is None:
        base = path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
        output = os.path.join(base, REPORT)
    write_into(output, page.encode("utf-8"))
    return output
