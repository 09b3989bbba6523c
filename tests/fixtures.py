"""Fixture corpora in each exact upstream format, for readers and end-to-end builds.

Every corpus holds the real upstream sample rows of ``tests/data/upstream``
plus generated rows, among them the bad inputs each reader must drop with its
own reason. With ``server`` (a :class:`tests.servers.ImageServer`) the image
URLs point at that loopback server (the real rows keep every other field);
without it they are left as upstream has them.

Each ``write_*`` function returns the path it wrote and the funnel a default
build of it must report, so a test states the expected outcome once, here,
next to the rows that cause it.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
from typing import Any

from tests.helpers import UPSTREAM

COYO_PREVIEW = os.path.join(UPSTREAM, "coyo700m_readme_preview.jsonl")
MMC4_EXAMPLE = os.path.join(UPSTREAM, "mmc4_readme_example.jsonl")
C4_FIRST3 = os.path.join(UPSTREAM, "c4-train.00000-of-01024.first3.json.gz")
WIT_DUMMY = os.path.join(UPSTREAM, "wit_tfds_dummy_train-00000-of-00009.tsv")
WIT_DUMMY_GZ = WIT_DUMMY + ".gz"

NOT_UTF8 = b"caf\xe9 au lait \xff"  # Latin-1 bytes: not valid UTF-8


def _image(server, name: str, width: int = 80, height: int = 60) -> str:
    return server.url(f"/img/{width}x{height}/{name}.jpg")


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --- COYO-700M ----------------------------------------------------------------


def coyo_preview_rows() -> list[dict[str, Any]]:
    """The 7 real COYO-700M rows of the kakaobrain README."""
    return _read_jsonl(COYO_PREVIEW)


def _coyo_row(
    coyo_id: int,
    url: str | bytes | None,
    text: str | bytes | None,
    *,
    width: int = 640,
    height: int = 480,
    b32: float | None = 0.34,
    l14: float | None = 0.31,
    nsfw: float = 0.01,
    gantman: float = 0.02,
) -> dict[str, Any]:
    return {
        "id": coyo_id,
        "url": url,
        "text": text,
        "width": width,
        "height": height,
        "image_phash": "%016x" % ((coyo_id or 0) * 2654435761 % (1 << 64)),
        "text_length": len(text) if isinstance(text, str) else 0,
        "word_count": len(text.split()) if isinstance(text, str) else 0,
        "num_tokens_bert": 12,
        "num_tokens_gpt": 11,
        "num_faces": 0,
        "clip_similarity_vitb32": b32,
        "clip_similarity_vitl14": l14,
        "nsfw_score_opennsfw2": nsfw,
        "nsfw_score_gantman": gantman,
        "watermark_score": 0.05,
        "aesthetic_score_laion_v2": 5.1,
    }


def coyo_rows(server=None) -> list[dict[str, Any]]:
    """Real preview rows (4 of them below VILA's 0.6 similarity sum), good
    generated rows, rows for each filter, bad rows and one image that 404s."""
    rows = []
    for row in coyo_preview_rows():
        if server is not None:
            row = {
                **row,
                "url": _image(server, f"coyo-{row['id']}", row["width"] // 8, row["height"] // 8),
            }
        rows.append(row)
    url = (
        (lambda name, w=80, h=60: _image(server, name, w, h))
        if server
        else (lambda name, w=80, h=60: f"https://images.example.com/{name}.jpg")
    )
    rows += [
        _coyo_row(
            9000000000001,
            url("cup"),
            "A cup of coffee sits on a wooden table in the morning light.",
        ),
        _coyo_row(
            9000000000002,
            url("cat"),
            "The cat sleeps on the windowsill while the rain falls outside.",
        ),
        _coyo_row(
            9000000000003, url("nsfw"), "A photograph flagged by the NSFW detector.", nsfw=0.93
        ),
        _coyo_row(9000000000004, url("tiny", 20, 20), "A tiny thumbnail.", width=20, height=20),
        _coyo_row(
            9000000000005, url("banner", 300, 30), "A very wide banner.", width=1000, height=100
        ),
        _coyo_row(
            9000000000006, url("noclip"), "A row without CLIP similarities.", b32=None, l14=None
        ),
        _coyo_row(9000000000007, None, "A row with a null url."),
        _coyo_row(9000000000008, "", "A row with an empty url."),
        _coyo_row(9000000000009, url("notext"), None),
        _coyo_row(9000000000010, url("blank"), "   "),
        _coyo_row(9000000000011, url("latin1"), NOT_UTF8),
        _coyo_row(None, url("noid"), "A row with a null id."),  # type: ignore[arg-type]
        _coyo_row(
            9000000000012,
            server.url("/status/404") if server else url("gone"),
            "An image that is gone.",
        ),
    ]
    return rows


# The funnel of a build of coyo_rows(server) with --max-nsfw 0.5 --min-size 32 --max-aspect-ratio 4
COYO_FUNNEL = {
    "unit": "pair",
    "input": 20,
    "kept": 5,
    "dropped": {
        "clip_similarity_below_min": 4,
        "nsfw_above_max": 1,
        "image_too_small": 1,
        "aspect_ratio_above_max": 1,
        "missing_clip_similarity": 1,
        "missing_url": 2,
        "missing_text": 1,
        "empty_text": 1,
        "not_utf8": 1,
        "missing_id": 1,
        "http_404": 1,
    },
}


def _string_array(values: list[Any]):
    """A pyarrow string array that may hold bytes that are not UTF-8, as a
    broken upstream writer could leave them (pyarrow validates only on cast)."""
    import pyarrow as pa

    raw = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    return pa.array(raw, type=pa.binary()).view(pa.string())


def write_coyo_parquet(
    path: str,
    rows: list[dict[str, Any]],
    drop_columns: tuple[str, ...] = (),
    row_group_size: int = 8,
) -> str:
    """A snappy parquet with COYO-700M's exact schema (int64 id, int32 counts,
    float32 scores), in row groups of ``row_group_size``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from corpora.sources.coyo import arrow_schema

    schema = arrow_schema()
    arrays, fields = [], []
    for field in schema:
        if field.name in drop_columns:
            continue
        values = [row.get(field.name) for row in rows]
        arrays.append(
            _string_array(values)
            if pa.types.is_string(field.type)
            else pa.array(values, field.type)
        )
        fields.append(field)
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    pq.write_table(table, path, compression="snappy", row_group_size=row_group_size)
    return path


# --- MMC4 ---------------------------------------------------------------------


def mmc4_example() -> dict[str, Any]:
    """The real MMC4 document of the allenai/mmc4 README (2 images x 3 sentences)."""
    return _read_jsonl(MMC4_EXAMPLE)[0]


def _mmc4_doc(
    url: str,
    sentences: list[str],
    images: list[tuple[str, int, float]],
    matrix: list[list[float]] | None = None,
) -> dict[str, Any]:
    if matrix is None:
        matrix = [
            [sim if j == index else round(sim - 0.1, 4) for j in range(len(sentences))]
            for _, index, sim in images
        ]
    return {
        "image_info": [
            {
                "face_detections": None,
                "image_name": hashlib.sha1(u.encode()).hexdigest()[:12] + ".jpg",
                "matched_sim": sim,
                "matched_text_index": index,
                "raw_url": u,
            }
            for u, index, sim in images
        ],
        "similarity_matrix": matrix,
        "text_list": sentences,
        "url": url,
        "could_have_url_duplicate": 0,
    }


SENTENCES = [
    "A cup of coffee sits on a wooden table in the morning light.",
    "The cat sleeps on the windowsill while the rain falls outside.",
    "Rockets carry satellites from the launch pad into orbit around the earth.",
    "The photographer stands behind a camera on a tripod in the park.",
    "Galaxies far away appear as faint smudges of light in the deep field.",
]


def mmc4_lines(server=None) -> list[str | bytes]:
    """The real README document, good generated documents, and one line for
    each way an MMC4 document can be unusable."""
    url = (
        (lambda name: _image(server, name))
        if server
        else (lambda name: f"http://images.example.com/{name}.jpg")
    )
    real = mmc4_example()
    if server is not None:
        real = {
            **real,
            "image_info": [
                {**info, "raw_url": _image(server, f"mmc4-real-{i}")}
                for i, info in enumerate(real["image_info"])
            ],
        }
    docs: list[Any] = [
        real,
        # three images, one below OpenFlamingo's 0.24 and one that 404s
        _mmc4_doc(
            "https://example.org/three",
            SENTENCES,
            [
                (url("three-a"), 3, 0.31),
                (url("three-b"), 0, 0.21),
                (server.url("/status/404") if server else url("three-gone"), 4, 0.29),
            ],
        ),
        # every image fails to fetch: nothing left to interleave
        _mmc4_doc(
            "https://example.org/all-gone",
            SENTENCES[:2],
            [(server.url("/status/404") if server else url("gone"), 1, 0.3)],
        ),
        # upstream assignment corrupted (index 0 twice); --reassign repairs it to [1, 0]
        _mmc4_doc(
            "https://example.org/corrupted",
            SENTENCES[:3],
            [(url("corrupt-a"), 0, 0.2), (url("corrupt-b"), 0, 0.27)],
            matrix=[[0.2, 0.3, 0.1], [0.27, 0.22, 0.12]],
        ),
        # bad inputs
        _mmc4_doc(
            "https://example.org/more-images",
            SENTENCES[:1],
            [(url("many-a"), 0, 0.3), (url("many-b"), 0, 0.25)],
        ),
        _mmc4_doc("https://example.org/empty-text", [], [(url("lonely"), 0, 0.3)], matrix=[[]]),
        _mmc4_doc("https://example.org/no-images", SENTENCES[:2], []),
        _mmc4_doc("https://example.org/out-of-range", SENTENCES[:2], [(url("far"), 7, 0.3)]),
        '{"url": "https://example.org/truncated", "text_list": ["A line cut off',
        json.dumps({"url": "https://example.org/latin1", "text_list": ["x"], "image_info": []})
        .encode()
        .replace(b'"x"', b'"' + NOT_UTF8 + b'"'),
    ]
    return [d if isinstance(d, (str, bytes)) else json.dumps(d) for d in docs]


# The funnel of a default mmc4 / mmc4-reordered build of mmc4_lines(server)
MMC4_FUNNEL = {
    "unit": "document",
    "input": 10,
    "kept": 2,
    "dropped": {
        "no_images_after_fetch": 1,
        "duplicate_matched_text_index": 1,
        "more_images_than_sentences": 1,
        "empty_text_list": 1,
        "no_images": 1,
        "matched_text_index_out_of_range": 1,
        "bad_json": 1,
        "not_utf8": 1,
    },
}


def write_mmc4_jsonl(path: str, lines: list[str | bytes]) -> str:
    with open(path, "wb") as handle:
        for line in lines:
            handle.write(line if isinstance(line, bytes) else line.encode("utf-8"))
            handle.write(b"\n")
    return path


# --- C4 -----------------------------------------------------------------------


def c4_real_rows() -> list[dict[str, Any]]:
    """The first 3 records of C4 ``en/c4-train.00000-of-01024.json.gz``."""
    return _read_jsonl(C4_FIRST3)


def c4_lines() -> list[bytes]:
    good = [
        {
            "text": text,
            "timestamp": "2019-04-2%dT08:00:00Z" % i,
            "url": f"https://example.org/c4/{i}",
        }
        for i, text in enumerate(SENTENCES[:2])
    ]
    lines = [json.dumps(row).encode("utf-8") for row in c4_real_rows() + good]
    lines += [
        json.dumps(
            {"text": "No url here.", "timestamp": "2019-04-25T00:00:00Z", "url": None}
        ).encode(),
        json.dumps(
            {"text": "", "timestamp": "2019-04-25T00:00:00Z", "url": "https://example.org/c4/empty"}
        ).encode(),
        json.dumps(
            {"timestamp": "2019-04-25T00:00:00Z", "url": "https://example.org/c4/notext"}
        ).encode(),
        b'{"text": "'
        + NOT_UTF8
        + b'", "timestamp": "2019-04-25T00:00:00Z", "url": "https://example.org/c4/l1"}',
        b'{"text": "cut off',
    ]
    return lines


C4_FUNNEL = {
    "unit": "document",
    "input": 10,
    "kept": 5,
    "dropped": {"missing_url": 1, "empty_text": 1, "missing_text": 1, "not_utf8": 1, "bad_json": 1},
}


def write_c4_json_gz(directory: str, lines: list[bytes], index: int = 0, count: int = 1) -> str:
    """``c4-train.{index:05d}-of-{count:05d}.json.gz`` as upstream names them."""
    path = os.path.join(directory, f"c4-train.{index:05d}-of-{count:05d}.json.gz")
    with gzip.open(path, "wb") as handle:
        for line in lines:
            handle.write(line + b"\n")
    return path


# --- WIT ----------------------------------------------------------------------

WIT_COLUMNS = (
    "language",
    "page_url",
    "image_url",
    "page_title",
    "section_title",
    "hierarchical_section_title",
    "caption_reference_description",
    "caption_attribution_description",
    "caption_alt_text_description",
    "mime_type",
    "original_height",
    "original_width",
    "is_main_image",
    "attribution_passes_lang_id",
    "page_changed_recently",
    "context_page_description",
    "context_section_description",
)


def wit_real_rows() -> list[dict[str, str]]:
    """The 3 real WIT rows (es, de, ru) of the TFDS dummy data."""
    with open(WIT_DUMMY, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _wit_row(
    language: str,
    name: str,
    image_url: str,
    reference: str = "",
    attribution: str = "",
    alt: str = "",
    is_main_image: str = "true",
) -> dict[str, str]:
    return {
        "language": language,
        "page_url": f"https://{language}.wikipedia.org/wiki/{name}",
        "image_url": image_url,
        "page_title": name.replace("_", " "),
        "section_title": "",
        "hierarchical_section_title": name.replace("_", " "),
        "caption_reference_description": reference,
        "caption_attribution_description": attribution,
        "caption_alt_text_description": alt,
        "mime_type": "image/jpeg",
        "original_height": "600",
        "original_width": "800",
        "is_main_image": is_main_image,
        "attribution_passes_lang_id": "false",
        "page_changed_recently": "true",
        "context_page_description": f"{name.replace('_', ' ')} is an article.\nIt has two lines.",
        "context_section_description": f"The section about {name.replace('_', ' ')}.",
    }


def wit_rows(server=None) -> list[dict[str, str]]:
    url = (
        (lambda name: _image(server, name))
        if server
        else (lambda name: f"https://upload.example.org/{name}.jpg")
    )
    rows = []
    for row in wit_real_rows():
        if server is not None:
            row = {
                **row,
                "image_url": _image(
                    server, "wit-" + row["image_url"].rsplit("/", 1)[-1].split(".")[0]
                ),
            }
        rows.append(row)
    rows += [
        _wit_row(
            "en",
            "Coffee",
            url("wit-coffee"),
            reference="A cup of coffee on a wooden table.",
            attribution="English: Coffee cup",
            alt="coffee",
        ),
        _wit_row(
            "en",
            "Cat",
            url("wit-cat"),
            alt="A cat on a windowsill.",
            attribution="English: Cat sleeping",
        ),
        _wit_row("fr", "Fusée", url("wit-fusee"), reference="Une fusée au décollage."),
        _wit_row("en", "Nothing", url("wit-nothing")),  # no caption of any kind
        _wit_row(
            "en", "Shouty", url("wit-shouty"), reference="A bad boolean.", is_main_image="True"
        ),
        _wit_row("en", "Nowhere", "", reference="No image url."),
    ]
    return rows


# The funnel of a wit build of write_wit_tsv_gz(wit_rows(server)) with --caption best
WIT_FUNNEL_BEST = {
    "unit": "pair",
    "input": 11,
    "kept": 6,
    "dropped": {
        "empty_caption": 1,
        "bad_boolean": 1,
        "missing_url": 1,
        "wrong_column_count": 1,
        "not_utf8": 1,
    },
}


def write_wit_tsv_gz(path: str, rows: list[dict[str, str]], extra_lines: bool = True) -> str:
    """WIT's tsv.gz: header, tab-separated, fields quoted when they hold a
    newline, a tab or a quote. ``extra_lines`` appends a row with too few
    columns and a row holding bytes that are not UTF-8."""
    text = io.StringIO()
    writer = csv.writer(text, delimiter="\t", lineterminator="\n")
    writer.writerow(WIT_COLUMNS)
    for row in rows:
        writer.writerow([row[c] for c in WIT_COLUMNS])
    data = text.getvalue().encode("utf-8")
    if extra_lines:
        data += b"en\thttps://en.wikipedia.org/wiki/Short\thttps://upload.example.org/short.jpg\tShort\n"
        latin1 = dict(
            _wit_row("de", "Kaffee", "https://upload.example.org/kaffee.jpg", reference="x")
        )
        line = "\t".join(
            latin1[c] if "\n" not in latin1[c] else "one line" for c in WIT_COLUMNS
        ).encode()
        data += line.replace(b"\tx\t", b"\t" + NOT_UTF8 + b"\t") + b"\n"
    with gzip.open(path, "wb") as handle:
        handle.write(data)
    return path
