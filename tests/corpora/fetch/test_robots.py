"""robots.txt verdicts: RFC 9309's matching rules, the answers that count
(2xx parsed, 4xx allow, 5xx and no answer refuse), and the book that keeps
them (in memory, and through a keeper across builds for 24 hours)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corpora.fetch.robots import (
    MAX_AGE,
    Robots,
    RobotsAnswer,
    RobotsBook,
    decode_body,
    origin_of,
)


def allowed(text: str, url: str) -> bool:
    robots = Robots.from_answer(RobotsAnswer("http://h.example", 200, decode_body(text.encode())))
    return robots.refusal(url) is None


@pytest.mark.parametrize(
    "text, path, expected",
    [
        ("User-agent: *\nDisallow: /private/\n", "/private/a.jpg", False),
        ("User-agent: *\nDisallow: /private/\n", "/pub/a.jpg", True),
        # the longest match wins, whatever the order of the lines
        ("User-agent: *\nDisallow: /\nAllow: /pub/\n", "/pub/a.jpg", True),
        ("User-agent: *\nAllow: /pub/\nDisallow: /\n", "/pub/a.jpg", True),
        ("User-agent: *\nAllow: /pub/\nDisallow: /\n", "/other/a.jpg", False),
        # Allow wins a tie
        ("User-agent: *\nDisallow: /a\nAllow: /a\n", "/a.jpg", True),
        # wildcards and the end anchor
        ("User-agent: *\nDisallow: /a/\nAllow: /a/*.jpg$\n", "/a/x.jpg", True),
        ("User-agent: *\nDisallow: /a/\nAllow: /a/*.jpg$\n", "/a/x.jpgz", False),
        ("User-agent: *\nDisallow: /*.png\n", "/x/y.png?size=2", False),
        # groups: another crawler's does not apply; ours, in any case, beats *
        ("User-agent: googlebot\nDisallow: /\n\nUser-agent: *\nAllow: /\n", "/a.jpg", True),
        ("User-agent: CorporA\nDisallow: /\n\nUser-agent: *\nAllow: /\n", "/a.jpg", False),
        ("User-agent: otherbot\nUser-agent: corpora\nDisallow: /x\n", "/x.jpg", False),
        ("User-agent: corpora\nDisallow: /x\n\nUser-agent: corpora\nDisallow: /y\n", "/y", False),
        # percent-encoding is compared decoded; comments, case of keys, BOM and CRLF
        ("User-agent: *\nDisallow: /%7Ejoe/\n", "/~joe/a.jpg", False),
        ("user-agent: *\ndisallow: /p # not for crawlers\n", "/p.jpg", False),
        ("\ufeffUser-agent: *\r\nDisallow: /p\r\n", "/p.jpg", False),
        ("User-agent: *\nDisallow:\n", "/a.jpg", True),
    ],
)
def test_rfc_9309_matching(text, path, expected):
    assert allowed(text, "http://h.example" + path) is expected


@pytest.mark.parametrize(
    "status, reason",
    [(200, None), (404, None), (403, None), (410, None)],
)
def test_2xx_and_4xx_answers_are_kept_verdicts(status, reason):
    robots = Robots.from_answer(RobotsAnswer("http://h.example", status))
    assert robots.refusal("http://h.example/a.jpg") is reason


@pytest.mark.parametrize(
    "failure, status, reason",
    [
        ("http_5xx", 503, "robots_unavailable"),
        ("http_429", 429, "robots_unavailable"),
        ("timeout", None, "robots_unavailable"),
        ("connection_error", None, "robots_unavailable"),
        ("too_many_redirects", 302, "robots_unavailable"),
        ("blocked_address", None, "blocked_address"),
        ("dns_error", None, "dns_error"),
        ("tls_error", None, "tls_error"),
    ],
)
def test_no_answer_refuses_the_host(failure, status, reason):
    assert Robots.unavailable(failure, status).refusal("http://h.example/a.jpg") == reason


@pytest.mark.parametrize("delay", ["121", "86400", "1e9"])
def test_a_crawl_delay_past_what_a_build_waits_keeps_the_host_off(delay):
    robots = Robots.from_answer(
        RobotsAnswer("http://h", 200, f"User-agent: *\nCrawl-delay: {delay}")
    )
    assert (
        robots.refusal("http://h/a.jpg") == "robots_disallowed" and "Crawl-delay" in robots.detail
    )


def test_crawl_delay_is_read_for_our_group():
    text = "User-agent: *\nCrawl-delay: 5\n\nUser-agent: corpora\nCrawl-delay: 1.5\n"
    assert Robots.from_answer(RobotsAnswer("http://h", 200, text)).crawl_delay == 1.5
    assert Robots.from_answer(RobotsAnswer("http://h", 200, "User-agent: *\n")).crawl_delay == 0


def test_origins():
    assert origin_of("http://H.example:80/a") == "http://h.example"
    assert origin_of("https://h.example:8443/a") == "https://h.example:8443"
    assert origin_of("http://h.example/a") != origin_of("https://h.example/a")
    assert origin_of("/local.jpg") is None and origin_of("http://[::1") is None


class Keeper:
    """An in-memory keeper, the image store's :class:`RobotsFiles` contract."""

    def __init__(self):
        self.answers: dict[str, RobotsAnswer] = {}
        self.saves = 0

    def load(self, origin):
        return self.answers.get(origin)

    def save(self, answer):
        self.saves += 1
        self.answers[answer.origin] = answer


def test_the_book_keeps_lasting_answers_for_24_hours_and_failures_for_itself():
    now = [1000.0]
    keeper = Keeper()
    book = RobotsBook(clock=lambda: now[0], keeper=keeper)
    book.learn("http://a.example", 200, b"User-agent: *\nDisallow: /x\n")
    book.learn("http://b.example", 404, b"not found")
    book.fail("http://c.example", "http_5xx", 503)
    assert sorted(keeper.answers) == ["http://a.example", "http://b.example"]
    assert keeper.answers["http://a.example"].fetched_at == 1000.0
    assert keeper.answers["http://b.example"].body == ""  # only a 2xx body is kept

    later = RobotsBook(clock=lambda: now[0], keeper=keeper)  # the next build
    now[0] = 1000.0 + MAX_AGE - 1
    assert later.verdict("http://a.example").refusal("http://a.example/x.jpg") == (
        "robots_disallowed"
    )
    assert later.verdict("http://c.example") is None  # a 5xx is asked again
    now[0] = 1000.0 + MAX_AGE
    assert RobotsBook(clock=lambda: now[0], keeper=keeper).verdict("http://b.example") is None


@given(st.text(max_size=400), st.text(max_size=40))
def test_any_text_gives_a_verdict_and_never_raises(text, path):
    robots = Robots.from_answer(RobotsAnswer("http://h.example", 200, text))
    assert robots.refusal("http://h.example/" + path) in (
        None,
        "robots_disallowed",
        "robots_unavailable",
    )
    assert robots.crawl_delay >= 0
