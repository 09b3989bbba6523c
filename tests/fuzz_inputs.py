"""Hypothesis strategies for hostile input in the shape of each upstream format.

The readers take files from the open web, so every field of a record may hold
a value of another type, a non-finite number, a lone surrogate, a huge integer
or deep nesting; a file may start with a byte-order mark, or be a gzip or zip
that is truncated, corrupt, or holds the wrong number of members. Each
strategy here draws records shaped like the real samples in
``tests/data/upstream`` (MMC4 documents, COYO rows, C4 lines, WIT rows) with
any field swapped at random for such a value, and encodes them the way the
format does. ``json_lines_file(..., hostile=False)`` leaves out the lines known
to make a reader raise today (``HOSTILE_JSON``), so a fuzz test can hold what
already works while the full one waits for the fix.

Every ``*_file`` strategy draws ``(data, records)``: the bytes of one input
file and how many records a reader must account for (one Document or Drop
each: the funnel's input).
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import zipfile

from hypothesis import strategies as st

from corpora.sources import coyo
from corpora.sources.wit import reader as wit

BOM = codecs.BOM_UTF8

# JSON text that json.loads turns into an exception other than a decode error.
# (Besides these, ``hostile`` writes lone surrogates as JSON escapes.)
HOSTILE_JSON = {
    "huge_integer": b'{"text": ' + b"7" * 5000 + b', "url": "https://a.example/"}',
    "deep_nesting": b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}

# ---------------------------------------------------------------- JSON values


def _texts(surrogates: bool = True) -> st.SearchStrategy[str]:
    odd = ["", " ", "\t\n", "\u2028", "\ufeff", "café", "a\x00b"]
    return st.one_of(
        st.text(max_size=40),
        st.sampled_from(odd + (["\ud800", "a\udfffb"] if surrogates else [])),
    )


def json_scalars() -> st.SearchStrategy:
    numbers = st.one_of(
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0, 1e308]),
    )
    return st.one_of(st.none(), st.booleans(), numbers, _texts())


def json_values() -> st.SearchStrategy:
    """Any JSON value Python's ``json`` writes (NaN, Infinity and lone surrogates included)."""
    return st.recursive(
        json_scalars(),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(st.text(max_size=6), children, max_size=4),
        ),
        max_leaves=12,
    )


def field(good: st.SearchStrategy) -> st.SearchStrategy:
    """A value of the right kind, or any JSON value at all."""
    return st.one_of(good, json_values())


def _urls() -> st.SearchStrategy[str]:
    return st.one_of(
        st.builds(
            "https://{}.example/{}.jpg".format,
            st.text("abcxyz", min_size=1, max_size=5),
            st.integers(0, 999),
        ),
        st.sampled_from(["", " ", "file:///etc/passwd", "http://127.0.0.1/a.jpg", "javascript:x"]),
        _texts(),
    )


def _scores() -> st.SearchStrategy[float]:
    return st.one_of(
        st.floats(-1, 1, allow_nan=False),
        st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    )


# ---------------------------------------------------------------- records


def c4_records() -> st.SearchStrategy[dict]:
    timestamps = st.sampled_from(["2019-04-25T12:57:54Z", "", "yesterday"])
    return st.fixed_dictionaries(
        {},
        optional={
            "text": field(_texts()),
            "timestamp": field(timestamps),
            "url": field(_urls()),
        },
    )


def mmc4_documents() -> st.SearchStrategy[dict]:
    image = st.fixed_dictionaries(
        {},
        optional={
            "raw_url": field(_urls()),
            "image_name": field(st.text(max_size=12)),
            "matched_text_index": field(st.integers(-2, 5)),
            "matched_sim": field(_scores()),
            "face_detections": json_values(),
        },
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "url": field(_urls()),
            "text_list": field(st.lists(field(_texts()), max_size=4)),
            "image_info": field(st.lists(field(image), max_size=3)),
            "similarity_matrix": field(
                st.lists(st.lists(field(_scores()), max_size=4), max_size=3)
            ),
            "could_have_url_duplicate": field(st.sampled_from([0, 1])),
        },
    )


_COYO_GOOD = {
    "int64": st.integers(-(2**63), 2**63 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "float": _scores(),
    "string": _texts(surrogates=False).map(lambda t: t.encode("utf-8")),
}


def coyo_rows() -> st.SearchStrategy[dict]:
    """A row as :func:`corpora.sources.coyo.parse_row` receives it (strings as
    bytes), any column missing or of another type."""
    columns = {
        name: field(_COYO_GOOD[kind] | st.binary(max_size=8)) for name, kind in coyo.SCHEMA.items()
    }
    return st.fixed_dictionaries({}, optional=columns)


# Arrow types a parquet column of a COYO-like file may have, right or wrong.
def _arrow_columns():
    import pyarrow as pa

    values = {
        "int64": (pa.int64(), _COYO_GOOD["int64"]),
        "int32": (pa.int32(), _COYO_GOOD["int32"]),
        "float": (pa.float32(), _scores()),
        "double": (pa.float64(), _scores()),
        "string": (pa.string(), _texts(surrogates=False)),
        "binary": (pa.binary(), st.binary(max_size=8)),
        "bool": (pa.bool_(), st.booleans()),
        "list": (pa.list_(pa.int64()), st.lists(st.integers(0, 9), max_size=3)),
    }
    return values


@st.composite
def coyo_tables(draw, rows: int = 6, wrong_types: bool = True):
    """A COYO-like Arrow table: the required columns and some others, each of
    its upstream type or (``wrong_types``) any other; values may be null."""
    import pyarrow as pa

    kinds = _arrow_columns()
    names = ["id", "url", "text"] + draw(
        st.lists(st.sampled_from(coyo.COLUMNS[3:]), unique=True, max_size=6)
    )
    count = draw(st.integers(0, rows))
    arrays = {}
    for name in names:
        upstream = coyo.SCHEMA[name]
        kind = draw(st.sampled_from(list(kinds))) if wrong_types else upstream
        arrow_type, values = kinds[kind]
        cells = draw(st.lists(st.one_of(st.none(), values), min_size=count, max_size=count))
        arrays[name] = pa.array(cells, type=arrow_type)
    return pa.table(arrays)


def wit_rows() -> st.SearchStrategy[list[str]]:
    """WIT's 17 fields in header order (sometimes too few or too many)."""
    booleans = st.sampled_from(["true", "false", "True", "1", "", "yes"])
    integers = st.integers(0, 10**6).map(str) | st.sampled_from(["", "-1", "1e3", "٣", "12.5"])
    text = _texts().filter(lambda t: "\x00" not in t)  # the csv module refuses to write NUL
    kinds = {
        "language": st.sampled_from(["en", "de", "es", "ru", "EN", ""]),
        "page_url": _urls().filter(lambda t: "\x00" not in t),
        "image_url": _urls().filter(lambda t: "\x00" not in t),
        "mime_type": st.sampled_from(["image/jpeg", "image/png", "", "text/html"]),
    }
    fields = [
        booleans
        if name in wit.BOOLEAN_COLUMNS
        else integers
        if name in wit.INTEGER_COLUMNS
        else kinds.get(name, text)
        for name in wit.COLUMNS
    ]
    return st.one_of(st.tuples(*fields).map(list), st.lists(text, max_size=20))


# ---------------------------------------------------------------- files


def _json_line(value, ensure_ascii: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=True)
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate: bytes that are not UTF-8


@st.composite
def json_lines_file(draw, records: st.SearchStrategy, hostile: bool = True):
    """``(data, records)`` of a JSON-lines file holding ``records`` (any of them
    possibly a junk line), with a BOM, CRLF endings and blank lines at random."""
    lines = []
    for value in draw(st.lists(records, max_size=6)):
        choice = draw(st.integers(0, 9))
        if choice == 0:
            lines.append(draw(st.binary(max_size=30)).replace(b"\n", b" "))
        elif choice == 1 and hostile:
            lines.append(draw(st.sampled_from(sorted(HOSTILE_JSON.values()))))
        else:
            # a lone surrogate: escaped (\ud800) only when hostile, else raw, i.e. not UTF-8
            lines.append(_json_line(value, ensure_ascii=hostile and draw(st.booleans())))
    if draw(st.booleans()):
        lines.insert(draw(st.integers(0, len(lines))), b"   ")
    ending = draw(st.sampled_from([b"\n", b"\r\n"]))
    data = b"".join(line + ending for line in lines)
    if lines and lines[0].strip() and draw(st.booleans()):
        data = BOM + data  # before a record: a BOM before a blank line would make it one
    counted = sum(1 for line in lines if line.strip())
    return data, counted


def gzipped(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@st.composite
def broken_containers(draw, suffix: str):
    """Bytes that claim to be a ``.gz`` or ``.zip`` and are not a good one:
    random bytes, a truncated or corrupt gzip, a zip with no or two members, a
    zip whose member's deflate data is corrupt."""
    payload = b'{"text": "x", "url": "https://a.example/"}\n' * draw(st.integers(1, 40))
    if suffix == ".gz":
        good = gzipped(payload)
        return draw(
            st.one_of(
                st.binary(max_size=64),
                st.integers(1, len(good) - 1).map(lambda cut: good[:cut]),  # truncated
                st.binary(min_size=8, max_size=64).map(lambda b: good[:10] + b),  # bad deflate
            )
        )
    good = zipped({"docs.jsonl": payload})
    start = good.index(b"docs.jsonl") + len(b"docs.jsonl")  # the member's deflate data
    return draw(
        st.one_of(
            st.binary(max_size=64),
            st.just(zipped({})),
            st.just(zipped({"a.jsonl": payload, "b.jsonl": payload})),
            st.binary(min_size=4, max_size=4).map(lambda b: good[:start] + b + good[start + 4 :]),
        )
    )


def wit_file(rows: int = 5):
    """``(data, records)`` of a WIT TSV: the header (columns in any order)
    and ``rows`` rows written as the csv module quotes them."""

    @st.composite
    def build(draw):
        order = draw(st.permutations(range(len(wit.COLUMNS))))
        header = [wit.COLUMNS[i] for i in order]
        body = draw(st.lists(wit_rows(), max_size=rows))
        text = io.StringIO()
        # a field holding \r is quoted only when \r is in the line terminator (or all are)
        quoting, ending = draw(
            st.sampled_from([(csv.QUOTE_MINIMAL, "\r\n"), (csv.QUOTE_ALL, "\n")])
        )
        writer = csv.writer(text, delimiter="\t", lineterminator=ending, quoting=quoting)
        writer.writerow(header)
        for values in body:
            writer.writerow([values[i] for i in order] if len(values) == len(order) else values)
        data = text.getvalue().encode("utf-8", "surrogatepass")
        counted = sum(1 for values in body if any(v.strip() for v in values))
        return data, counted

    return build()


def parquet_bytes(table) -> bytes:
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()
