"""The robots.txt answers a store keeps: one file per origin, read back as
written, and nothing (so the host is asked again) for a file that is
missing, unreadable or names another origin."""

from __future__ import annotations

from corpora.fetch.robots import RobotsAnswer, RobotsBook
from corpora.store import ImageStore
from corpora.store.robots import ROBOTS


def test_answers_round_trip_through_the_store_and_feed_a_later_book(tmp_path):
    store = ImageStore.open(str(tmp_path / "store"))
    kept = store.robots()
    answer = RobotsAnswer("https://a.example", 200, "User-agent: *\nDisallow: /x/\n", 100.0)
    kept.save(answer)
    assert kept.load("https://a.example") == answer
    assert [name.endswith(".json") for name in store.files.names(ROBOTS)] == [True]
    book = RobotsBook(clock=lambda: 200.0, keeper=ImageStore.open(store.root).robots())
    assert book.verdict("https://a.example").refusal("https://a.example/x/1.jpg") == (
        "robots_disallowed"
    )


def test_a_missing_unreadable_or_foreign_file_is_no_answer(tmp_path):
    kept = ImageStore.open(str(tmp_path / "store")).robots()
    assert kept.load("https://a.example") is None
    kept.files.write(kept.path("https://a.example"), b"{not json")
    assert kept.load("https://a.example") is None
    foreign = RobotsAnswer("https://b.example", 404, "", 1.0)
    kept.files.write(kept.path("https://a.example"), foreign.to_json())
    assert kept.load("https://a.example") is None
