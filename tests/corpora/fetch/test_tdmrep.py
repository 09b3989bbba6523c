"""tdmrep.json rules: locations with robots.txt's pattern syntax, the first
matching rule decides, anything but a 2xx array reserves nothing."""

from __future__ import annotations

import pytest

from corpora.fetch.tdmrep import TdmRules

FILE = b"""[
  {"location": "/free/*", "tdm-reservation": 0},
  {"location": "/*.jpg$", "tdm-reservation": 1, "tdm-policy": "https://a.example/policy"},
  {"location": "/", "tdm-reservation": "0"}
]"""


@pytest.mark.parametrize(
    "path, reason",
    [
        ("/free/cat.jpg", None),  # the first matching rule wins over the later jpg rule
        ("/photos/cat.jpg", "tdm_reserved"),
        ("/photos/cat.jpg?size=2", None),  # $ ends the path and query
        ("/photos/cat.png", None),
    ],
)
def test_the_first_matching_rule_decides(path, reason):
    assert TdmRules.from_answer(200, FILE).refusal("https://a.example" + path) == reason


@pytest.mark.parametrize(
    "status, data",
    [(404, b""), (500, b""), (200, b"not json"), (200, b'{"location": "/"}'), (200, b"\xff")],
)
def test_no_file_or_no_array_reserves_nothing(status, data):
    assert TdmRules.from_answer(status, data).refusal("https://a.example/cat.jpg") is None


def test_rules_without_a_location_are_skipped():
    rules = TdmRules.from_answer(
        200, b'[{"tdm-reservation": 1}, {"location": "/", "tdm-reservation": 1}]'
    )
    assert len(rules.rules) == 1 and rules.refusal("https://a.example/x") == "tdm_reserved"
