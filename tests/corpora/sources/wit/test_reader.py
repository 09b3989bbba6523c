import gzip

import pytest

from corpora.record import Document, Drop
from corpora.sources.inputs import InputError
from corpora.sources.wit import reader as wit
from tests import fixtures


@pytest.mark.parametrize("text, value", [("true", True), ("false", False)])
def test_booleans_parse_as_written(text, value):
    assert wit.parse_bool(text) is value


@pytest.mark.parametrize("text", ["True", "FALSE", "1", "0", "", "yes", " true"])
def test_anything_else_is_not_a_boolean(text):
    with pytest.raises(wit.BadValue):
        wit.parse_bool(text)


ROW = {
    "caption_reference_description": "Ref",
    "caption_alt_text_description": "Alt",
    "caption_attribution_description": "English: Attr",
}


@pytest.mark.parametrize(
    "row, caption, expected",
    [
        (ROW, "reference", ("caption_reference_description", "Ref")),
        (ROW, "attribution", ("caption_attribution_description", "English: Attr")),
        (ROW, "alt", ("caption_alt_text_description", "Alt")),
        (ROW, "best", ("caption_reference_description", "Ref")),
        (
            {**ROW, "caption_reference_description": " "},
            "best",
            ("caption_alt_text_description", "Alt"),
        ),
        (
            {**ROW, "caption_reference_description": "", "caption_alt_text_description": ""},
            "best",
            ("caption_attribution_description", "English: Attr"),
        ),
        ({**ROW, "caption_alt_text_description": ""}, "alt", None),
        ({}, "best", None),
    ],
)
def test_caption_choice(row, caption, expected):
    assert wit.choose_caption(row, caption) == expected


@pytest.mark.parametrize("path", [fixtures.WIT_DUMMY, fixtures.WIT_DUMMY_GZ])
def test_real_upstream_rows(path):
    with open(path, "rb") as stream:
        docs = list(wit.read(stream, path, caption="attribution"))
    assert [d.meta["language"] for d in docs] == ["es", "de", "ru"]
    assert [d.meta["is_main_image"] for d in docs] == [False, True, False]
    assert [d.meta["attribution_passes_lang_id"] for d in docs] == [False, False, True]
    assert [d.meta["page_changed_recently"] for d in docs] == [True, False, True]
    es = docs[0]
    assert es.chunks[0].url == "https://upload.wikimedia.org/wikipedia/commons/0/04/MGS_logo.JPG"
    assert [c.text for c in es.texts] == ["Galego: Logo do Movemento Galego ao Socialismo"]
    assert es.meta["original_height"] == 107 and es.meta["original_width"] == 272
    assert es.id == wit.record_id(es.chunks[0].url, "https://es.wikipedia.org/wiki/Hoz_y_martillo")
    # the real file has no reference captions at all
    with open(path, "rb") as stream:
        assert {r.reason for r in wit.read(stream, path)} == {"empty_caption"}


def test_quoted_field_with_a_newline_stays_one_row():
    with open(fixtures.WIT_DUMMY, "rb") as stream:
        docs = list(wit.read(stream, fixtures.WIT_DUMMY, caption="attribution", with_context=True))
    real = fixtures.wit_real_rows()
    assert "\n" in real[0]["context_page_description"]
    assert [d.meta["source"] for d in docs] == [
        f"{fixtures.os.path.basename(fixtures.WIT_DUMMY)}:{n}" for n in (2, 4, 5)
    ]
    de = docs[1]
    assert [c.text for c in de.texts] == [
        "Kleines Hasenmaul",
        real[1]["context_section_description"].strip(),
        "English: Lesser bulldog bat (Noctilio albiventris)",
    ]


def test_very_long_fields_are_read(tmp_path):
    rows = fixtures.wit_rows()
    rows[3] = {
        **rows[3],
        "context_page_description": "word " * 100_000,
    }  # 500 kB, past csv's 128 kB default
    path = fixtures.write_wit_tsv_gz(
        str(tmp_path / "wit_v1.train.all-1.tsv.gz"), rows, extra_lines=False
    )
    with open(path, "rb") as stream:
        results = list(wit.read(stream, path, caption="best"))
    assert (
        isinstance(results[3], Document)
        and results[3].texts[0].text == "A cup of coffee on a wooden table."
    )


def test_bad_rows_are_dropped_each_with_its_reason(tmp_path):
    path = fixtures.write_wit_tsv_gz(
        str(tmp_path / "wit_v1.train.all-00000-of-00010.tsv.gz"), fixtures.wit_rows()
    )
    with open(path, "rb") as stream:
        results = list(wit.read(stream, path, caption="best"))
    assert [r.reason if isinstance(r, Drop) else "kept" for r in results] == ["kept"] * 6 + [
        "empty_caption",
        "bad_boolean",
        "missing_url",
        "wrong_column_count",
        "not_utf8",
    ]


def test_header_is_checked(tmp_path):
    path = tmp_path / "wit_v1.bad.tsv"
    path.write_text("\t".join(wit.COLUMNS[:-1]) + "\n")
    with (
        open(path, "rb") as stream,
        pytest.raises(InputError, match="missing column 'context_section_description'"),
    ):
        wit.check(stream, str(path))
    shuffled = tmp_path / "wit_v1.shuffled.tsv"
    header = list(reversed(wit.COLUMNS))
    row = dict(zip(fixtures.WIT_COLUMNS, fixtures.wit_rows()[3].values()))
    shuffled.write_text(
        "\t".join(header) + "\n" + "\t".join(row[c].replace("\n", " ") for c in header) + "\n"
    )
    with open(shuffled, "rb") as stream:
        (doc,) = wit.read(stream, str(shuffled))
    assert (
        doc.texts[0].text == "A cup of coffee on a wooden table." and doc.meta["language"] == "en"
    )


# Issue 16, defect 9: a BOM before the header made it "not a WIT file".
def test_a_byte_order_mark_before_the_header_is_removed(tmp_path):
    with open(fixtures.WIT_DUMMY, "rb") as stream:
        plain = stream.read()
    path = tmp_path / "wit_v1.bom.tsv"
    path.write_bytes(b"\xef\xbb\xbf" + plain)
    with open(path, "rb") as stream:
        wit.check(stream, str(path))
    with open(fixtures.WIT_DUMMY, "rb") as a, open(path, "rb") as b:
        expected = [r.id for r in wit.read(a, fixtures.WIT_DUMMY, caption="attribution")]
        assert [r.id for r in wit.read(b, str(path), caption="attribution")] == expected


# Issue 16, defect 6: corrupt deflate data escaped as zlib.error, naming no file.
def test_corrupt_deflate_data_is_an_input_error_naming_the_file(tmp_path):
    with open(fixtures.WIT_DUMMY, "rb") as stream:
        data = gzip.compress(stream.read())
    broken = tmp_path / "wit_v1.broken.tsv.gz"
    broken.write_bytes(data[:10] + b"\xff" * 64)  # gzip's header, then no deflate stream
    with open(broken, "rb") as stream, pytest.raises(InputError, match="wit_v1.broken.tsv.gz: "):
        list(wit.read(stream, str(broken)))


# Issue 16, defect 9: no cap on line length (a WIT row is read by the csv module).
def test_a_line_over_the_cap_is_dropped_and_the_next_rows_are_read(tmp_path):
    rows = fixtures.wit_rows()
    rows[3] = {**rows[3], "context_page_description": "word " * 1000}  # one 5 kB line
    path = fixtures.write_wit_tsv_gz(
        str(tmp_path / "wit_v1.train.all-1.tsv.gz"), rows, extra_lines=False
    )
    with open(path, "rb") as stream:
        whole = list(wit.read(stream, path, caption="best"))
    with open(path, "rb") as stream:
        capped = list(wit.read(stream, path, caption="best", max_line_bytes=4000))
    assert len(capped) == len(whole)
    assert [getattr(r, "reason", "kept") for r in capped] == [
        "line_too_long" if i == 3 else getattr(r, "reason", "kept") for i, r in enumerate(whole)
    ]
    assert capped[3].record_id == whole[3].meta["source"]  # where the row starts
    assert capped[3].detail.endswith("characters, over the 4000 cap")
    assert [r.id for r in capped[4:] if isinstance(r, Document)] == [
        r.id for r in whole[4:] if isinstance(r, Document)
    ]


def test_a_quote_left_open_gathers_no_more_than_the_line_cap(tmp_path):
    """Issue 30, defect 3: one open quote followed by many short lines was read
    as one field (the csv field limit was 2^31 - 1), past --max-line-bytes. The
    row is capped as a line is, and what is left of its field is read past."""
    header = "\t".join(wit.COLUMNS)
    opened = "\t".join(['"never closed'] + ["x"] * (len(wit.COLUMNS) - 1))
    body = "\n".join([header, opened] + ["short line"] * 20_000) + "\n"  # 220 kB after it
    path = str(tmp_path / "wit_v1.train.all-1.tsv.gz")
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write(body)
    with open(path, "rb") as stream:
        results = list(wit.read(stream, path, max_line_bytes=4000))
    # the row and the rest of its open field are one record, dropped as too long
    assert [r.reason for r in results] == ["line_too_long"]
    assert results[0].record_id.endswith(":2") and results[0].detail.endswith("over the 4000 cap")
