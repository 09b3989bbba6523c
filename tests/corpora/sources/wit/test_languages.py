"""``--languages``: WIT's codes, case-insensitive; junk is named, never kept silently
(issue 16, defect 9)."""

from __future__ import annotations

import os

import pytest

from corpora.record import Document
from corpora.sources.wit import reader as wit
from corpora.sources.wit.languages import WIT_LANGUAGES, LanguageError, parse_languages
from tests.helpers import UPSTREAM


def test_codes_are_lower_cased_deduplicated_and_sorted():
    assert parse_languages("EN,De, fr ,en,,FR") == ("de", "en", "fr")
    assert parse_languages("Zh") == ("zh",)


@pytest.mark.parametrize("value", ["", " ", ",", " , ,"])
def test_a_value_naming_no_code_is_an_error(value):
    with pytest.raises(LanguageError, match="no language code"):
        parse_languages(value)


def test_every_unknown_code_is_named_on_one_line():
    with pytest.raises(LanguageError) as caught:
        parse_languages("en,xx,English,123,xx")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("unknown WIT language codes: ")
    for code in ("'xx'", "'english'", "'123'"):
        assert code in message
    assert message.count("'xx'") == 1
    assert "'en'," not in message.split(": ", 1)[1]  # a known code is not among the unknown


def test_codes_wit_writes_differently_are_pointed_at():
    with pytest.raises(LanguageError, match=r"'he' \(WIT writes 'iw'\)"):
        parse_languages("he")
    assert parse_languages("iw") == ("iw",)


def test_the_list_is_wits_wikipedia_codes():
    assert len(WIT_LANGUAGES) == 105
    assert all(code == code.lower() and code.isascii() for code in WIT_LANGUAGES)
    assert {"en", "de", "fr", "ja", "zh", "iw", "ceb", "nan", "lah", "war"} <= WIT_LANGUAGES
    assert "he" not in WIT_LANGUAGES


def test_the_languages_of_real_wit_rows_are_in_the_list():
    path = os.path.join(UPSTREAM, "wit_tfds_dummy_train-00000-of-00009.tsv.gz")
    with open(path, "rb") as stream:
        languages = {
            doc.meta["language"]
            for doc in wit.read(stream, path, caption="best")
            if isinstance(doc, Document)
        }
    assert languages == {"es", "de", "ru"}
    assert parse_languages(",".join(sorted(languages)).upper()) == ("de", "es", "ru")
