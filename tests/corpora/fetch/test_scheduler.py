"""The scheduler: its steps one by one (time on an injected clock), then the
whole loop against a real loopback server with one route per fault."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from corpora.fetch import Fetcher
from corpora.fetch.attempt import Attempt
from corpora.fetch.scheduler import Schedule, Task, host_of
from tests.corpora.fetch.common import FAST, fetch_all, fetch_one, knowing
from tests.servers import ImageServer, image_bytes

pytestmark = pytest.mark.timeout(60)

FAULTS = {
    "/img/100x80/ok.jpg": None,
    "/status/404": "http_404",
    "/status/500": "http_5xx",
    "/retry-after/1/later.jpg": None,  # 429 + Retry-After, then the image
    "/drip/1/drip.jpg": "timeout",
    "/reset/reset.jpg": "connection_error",
    "/truncated/cut.jpg": "decode_error",
    "/text/page": "not_image",
    "/empty/nothing.jpg": "empty_body",
    "/bomb.png": "too_many_pixels",
    "/loop/1": "too_many_redirects",
    "/noai/opted.jpg": "opted_out",
}


def fault_urls(server: ImageServer, other: ImageServer) -> dict[str, str | None]:
    """A URL for every way a fetch can end, with the reason it ends in."""
    urls = {server.url(path): reason for path, reason in FAULTS.items()}
    urls[server.url("/redirect?to=" + other.url("/img/10x10/elsewhere.jpg"))] = "blocked_address"
    urls[server.url("/redirect?to=http://169.254.169.254/latest/meta-data/")] = "blocked_address"
    urls[server.url("/redirect?to=file:///etc/passwd")] = "bad_redirect"
    urls["ftp://127.0.0.1/image.jpg"] = "bad_scheme"
    urls["gopher://example.com/x"] = "bad_scheme"
    return urls


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock():
    return Clock()


# the hosts the step tests name, whose robots.txt is known (404: allow all)
KNOWN = tuple(f"http://{host}" for host in ("a.example", "b.example", "198.51.100.7", "h0.example"))


def schedule(settings=FAST, urls=(), clock=None, known=()) -> Schedule:
    fetcher = Fetcher(settings, clock=clock or Clock(), robots=knowing(*KNOWN, *known))
    return Schedule(fetcher, urls)


# ---------------------------------------------------------------- one step at a time


def test_admit_reads_urls_lazily_up_to_the_look_ahead():
    taken = []

    def urls():
        for i in range(1000):
            taken.append(i)
            yield f"http://h{i % 3}.example/{i}.jpg"

    steps = schedule(dataclasses.replace(FAST, concurrency=2), urls())
    steps.admit(0.0)
    assert len(taken) == steps.lookahead == 8 and steps.n_queued == 8
    assert sorted(steps.queued) == ["h0.example", "h1.example", "h2.example"]
    assert not steps.exhausted


def test_a_retry_waits_for_its_backoff_then_rejoins_its_host_queue(clock):
    steps = schedule(clock=clock)
    task = Task("http://a.example/x.jpg", "http://b.example/moved.jpg", attempts=1, hops=1)
    steps.retry(task, retry_after=2.0)
    assert (task.attempts, task.hops, task.current) == (2, 0, task.url)  # starts over
    steps.admit(101.9)
    assert steps.queued == {} and len(steps.waiting) == 1
    steps.admit(102.0)
    assert list(steps.queued["a.example"]) == [task] and steps.waiting == []


def test_backoff_is_exponential_with_jitter_capped_and_retry_after_wins():
    settings = dataclasses.replace(FAST, backoff_base=1.0, backoff_max=5.0)
    with Fetcher(settings) as fetcher:
        assert 0.5 <= fetcher.backoff(1, None) <= 1.0
        assert 2.0 <= fetcher.backoff(3, None) <= 4.0
        assert 2.5 <= fetcher.backoff(10, None) <= 5.0
        assert fetcher.backoff(1, 7.0) == 7.0


def test_start_holds_a_host_at_its_limit_and_starts_the_others(server, tmp_path):
    path = tmp_path / "local.jpg"
    path.write_bytes(image_bytes(8, 8, "local"))
    settings = dataclasses.replace(FAST, per_host_concurrency=2, allow_local_files=(str(tmp_path),))
    urls = [server.url(f"/img/8x8/{i}.jpg") for i in range(3)] + [path.as_uri()]
    steps = schedule(settings, urls, known=(server.base,))
    steps.admit(0.0)
    assert steps.start(0.0) == float("inf")  # the third waits for one of the two to finish
    assert steps.in_flight == 3 and [t.url for t in steps.queued["127.0.0.1"]] == [urls[2]]
    outcomes = {}
    while not steps.finished:
        steps.start(0.0)
        for future in steps.wait(5.0):
            outcome = steps.settle(future)
            if outcome is not None:
                outcomes[outcome.url] = outcome
    assert sorted(outcomes) == sorted(urls) and all(o.ok for o in outcomes.values())


def test_start_holds_a_host_until_its_rate_allows_and_says_when():
    settings = dataclasses.replace(FAST, per_host_concurrency=8, per_host_rate=2.0)
    steps = schedule(settings, [f"http://198.51.100.7/{i}.jpg" for i in range(3)])
    steps.fetcher.hosts.try_acquire("198.51.100.7", 0.0)  # two tokens a second: one left
    steps.fetcher.hosts.try_acquire("198.51.100.7", 0.0)
    steps.admit(0.0)
    assert steps.start(0.0) == 0.5 and steps.in_flight == 0  # the next token in half a second


def test_start_never_has_more_than_concurrency_in_flight(tmp_path):
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"{i}.jpg")
        paths[-1].write_bytes(image_bytes(8, 8, str(i)))
    steps = schedule(dataclasses.replace(FAST, concurrency=2), [p.as_uri() for p in paths])
    steps.admit(0.0)
    steps.start(0.0)
    assert steps.in_flight == 2 and steps.n_queued == 3


def test_a_redirect_is_a_new_request_from_the_host_it_points_to():
    steps = schedule()
    task = Task("http://a.example/x", "http://a.example/x", attempts=1)
    assert steps.fetched(task, "a.example", Attempt(status=301, location="//b.example/y")) is None
    assert task.current == "http://b.example/y" and task.hops == 1
    assert list(steps.queued["b.example"]) == [task]


def test_redirects_beyond_the_limit_or_off_the_web_end_the_url():
    steps = schedule(dataclasses.replace(FAST, max_redirects=2))
    looping = Task("http://a.example/x", "http://a.example/x", attempts=1, hops=2)
    outcome = steps.fetched(looping, "a.example", Attempt(status=302, location="/x"))
    assert (outcome.url, outcome.reason, outcome.status) == (looping.url, "too_many_redirects", 302)
    local = Task("http://a.example/y", "http://a.example/y", attempts=1)
    outcome = steps.fetched(local, "a.example", Attempt(status=302, location="file:///etc/passwd"))
    assert (outcome.reason, outcome.detail) == ("bad_redirect", "file:///etc/passwd")


def test_a_transient_failure_is_retried_until_the_attempts_run_out():
    steps = schedule(dataclasses.replace(FAST, max_attempts=2))
    task = Task("http://a.example/x", "http://a.example/x", attempts=1)
    assert steps.fetched(task, "a.example", Attempt(reason="http_5xx", status=500)) is None
    assert task.attempts == 2 and len(steps.waiting) == 1
    outcome = steps.fetched(task, "a.example", Attempt(reason="http_5xx", status=500))
    assert (outcome.reason, outcome.status, outcome.attempts) == ("http_5xx", 500, 2)


def test_a_final_failure_is_not_retried():
    steps = schedule()
    task = Task("http://a.example/x", "http://a.example/x", attempts=1)
    outcome = steps.fetched(task, "a.example", Attempt(reason="http_404", status=404))
    assert (outcome.reason, outcome.attempts) == ("http_404", 1) and steps.waiting == []


def test_429_pauses_its_host_for_the_servers_retry_after(clock):
    steps = schedule(clock=clock)
    task = Task("http://a.example/x", "http://a.example/x", attempts=1)
    answer = Attempt(reason="http_429", status=429, retry_after=5.0)
    assert steps.fetched(task, "a.example", answer) is None
    hosts = steps.fetcher.hosts
    assert hosts.try_acquire("a.example", 104.9) == pytest.approx(0.1)
    assert hosts.try_acquire("a.example", 105.0) == 0.0
    assert steps.waiting[0][0] == 105.0  # the retry is due when the pause ends


def test_a_retry_after_beyond_the_cap_gives_up_at_once(clock):
    steps = schedule(dataclasses.replace(FAST, max_retry_after=0.5), clock=clock)
    task = Task("http://a.example/x", "http://a.example/x", attempts=1)
    outcome = steps.fetched(task, "a.example", Attempt("", "http_429", 429, retry_after=1.0))
    assert (outcome.reason, outcome.attempts) == ("http_429", 1)


def test_a_body_is_decoded_off_the_network_threads():
    steps = schedule()
    task = Task("http://a.example/x.jpg", "http://a.example/x.jpg", attempts=2)
    assert (
        steps.fetched(task, "a.example", Attempt(data=image_bytes(50, 40, "x"), status=200)) is None
    )
    assert steps.in_flight == 1
    (future,) = steps.wait(10.0)
    outcome = steps.settle(future)
    assert (outcome.url, outcome.status, outcome.attempts) == (task.url, 200, 2)
    assert (outcome.width, outcome.original_width, outcome.original_height) == (32, 50, 40)
    assert steps.in_flight == 0


def test_with_nothing_in_flight_the_wait_sleeps_until_the_next_retry():
    slept = []
    fetcher = Fetcher(FAST, clock=Clock(), sleep=slept.append)
    steps = Schedule(fetcher, [])
    assert steps.wait(0.2) == [] and slept == [0.2]


def test_host_of():
    assert host_of("http://Example.ORG/a") == "example.org"
    assert host_of("/local/path.jpg") == "" and host_of("http://[::1") == ""


# ---------------------------------------------------------------- the whole loop


def test_every_fault_ends_in_its_reason(server, other_loopback):
    urls = fault_urls(server, other_loopback)
    outcomes = fetch_all(urls)
    assert {url: outcome.reason for url, outcome in outcomes.items()} == urls
    ok = outcomes[server.url("/img/100x80/ok.jpg")]
    assert (ok.width, ok.height, ok.original_width, ok.original_height) == (32, 32, 100, 80)
    assert outcomes[server.url("/retry-after/1/later.jpg")].attempts == 2
    assert outcomes[server.url("/status/500")].attempts == FAST.max_attempts  # 5xx is retried
    assert outcomes[server.url("/status/404")].attempts == 1  # 404 is not
    assert outcomes[server.url("/status/404")].status == 404
    assert other_loopback.requests == []  # the redirect hop was refused before connecting


def test_retry_after_is_honoured(server):
    outcome = fetch_one(server.url("/retry-after/1/x.jpg"))
    assert outcome.ok and outcome.attempts == 2
    assert server.requests.count("/retry-after/1/x.jpg") == 2


def test_5xx_is_retried_a_bounded_number_of_times(server):
    outcome = fetch_one(server.url("/always/503"), dataclasses.replace(FAST, max_attempts=2))
    assert (outcome.reason, outcome.status, outcome.attempts) == ("http_5xx", 503, 2)
    assert server.requests.count("/always/503") == 2


def test_per_host_concurrency_cap_holds(server):
    settings = dataclasses.replace(
        FAST, concurrency=16, per_host_concurrency=3, read_timeout=5, total_timeout=10
    )
    urls = [server.url(f"/slow/0.5/{i}.jpg") for i in range(9)]
    assert all(o.ok for o in fetch_all(urls, settings).values())
    assert server.max_active == 3  # reached, never exceeded
    assert server.max_connections <= 3


def test_many_requests_in_flight_together(server):
    barrier = threading.Barrier(16, timeout=10)  # passes only if all 16 are in flight together

    def together(handler):
        try:
            barrier.wait()
            handler.send_body(200, image_bytes(8, 8, handler.path), "image/jpeg")
        except threading.BrokenBarrierError:
            handler.send_body(404, b"", "text/plain")

    urls = []
    for i in range(16):
        server.route(f"/together/{i}.jpg", together)
        urls.append(server.url(f"/together/{i}.jpg"))
    settings = dataclasses.replace(
        FAST, concurrency=16, per_host_concurrency=16, read_timeout=15, total_timeout=20
    )
    assert all(o.ok for o in fetch_all(urls, settings).values())
    assert server.max_active == 16


def test_per_host_rate_spaces_request_starts(server):
    settings = dataclasses.replace(FAST, concurrency=16, per_host_concurrency=16, per_host_rate=5)
    urls = [server.url(f"/img/8x8/{i}.jpg") for i in range(10)]
    assert all(o.ok for o in fetch_all(urls, settings).values())
    times = sorted(server.request_times)
    # five start at once (one second's worth), the next five 0.2 s apart
    assert times[-1] - times[0] >= 0.8


# ---------------------------------------------------------------- robots.txt


def robots_txt(server: ImageServer, status: int, text: str = "") -> None:
    server.route(
        "/robots.txt",
        lambda handler: handler.send_body(status, text.encode(), "text/plain"),
    )


def test_robots_txt_is_asked_once_and_a_disallowed_path_is_never_requested(server):
    robots_txt(server, 200, "User-agent: *\nDisallow: /private/\n")
    private = [server.url(f"/private/img/8x8/{i}.jpg") for i in range(3)]
    public = [server.url(f"/img/8x8/{i}.jpg") for i in range(3)]
    outcomes = fetch_all(private + public)
    assert [outcomes[u].reason for u in private] == ["robots_disallowed"] * 3
    assert all(outcomes[u].ok for u in public)
    assert server.requests.count("/robots.txt") == 1
    assert not [path for path in server.requests if path.startswith("/private/")]


def test_our_own_group_is_followed_over_the_wildcard(server):
    robots_txt(server, 200, "User-agent: *\nAllow: /\n\nUser-agent: corpora\nDisallow: /img/\n")
    url = server.url("/img/8x8/a.jpg")
    assert fetch_one(url).reason == "robots_disallowed" and server.requests == ["/robots.txt"]


def test_no_robots_txt_allows_everything(server):
    urls = [server.url(f"/img/8x8/{i}.jpg") for i in range(4)]  # the server answers 404
    assert all(o.ok for o in fetch_all(urls).values())
    assert server.requests.count("/robots.txt") == 1 and len(server.requests) == 5


def test_a_robots_txt_that_answers_503_blocks_the_host_with_its_reason(server):
    robots_txt(server, 503)
    urls = [server.url(f"/img/8x8/{i}.jpg") for i in range(3)]
    outcomes = fetch_all(urls, dataclasses.replace(FAST, max_attempts=2))
    assert {o.reason for o in outcomes.values()} == {"robots_unavailable"}
    assert outcomes[urls[0]].detail == "robots.txt: HTTP 503"
    assert server.requests == ["/robots.txt"] * 2  # retried like any 5xx, then given up


def test_a_redirect_hop_to_another_host_asks_that_host_s_robots_txt(server):
    with ImageServer("127.0.0.1") as other:
        robots_txt(other, 200, "User-agent: *\nDisallow: /\n")
        hop = server.url("/redirect?to=" + other.url("/img/8x8/there.jpg"))
        assert fetch_one(hop).reason == "robots_disallowed"
        assert other.requests == ["/robots.txt"]


def test_crawl_delay_spaces_a_host_s_requests_on_the_fetcher_s_clock(server, clock):
    robots_txt(server, 200, "User-agent: *\nCrawl-delay: 2\n")
    started = []

    def image(handler):
        started.append(clock.now)
        handler.send_body(200, image_bytes(8, 8, handler.path), "image/jpeg")

    urls = []
    for i in range(4):
        server.route(f"/delayed/{i}.jpg", image)
        urls.append(server.url(f"/delayed/{i}.jpg"))

    def sleep(seconds: float) -> None:
        clock.now += seconds

    with Fetcher(FAST, clock=clock, sleep=sleep) as fetcher:
        assert all(outcome.ok for _, outcome in fetcher.fetch(urls))
    gaps = [later - earlier for earlier, later in zip(started, started[1:])]
    assert len(started) == 4 and min(gaps) >= 2.0


def test_tdmrep_json_is_asked_once_where_asked_for_and_reserved_images_are_not_requested(
    server,
):
    server.route(
        "/.well-known/tdmrep.json",
        lambda handler: handler.send_body(
            200, b'[{"location": "/img/*", "tdm-reservation": 1}]', "application/json"
        ),
    )
    urls = [
        server.url("/img/8x8/a.jpg"),
        server.url("/img/8x8/b.jpg"),
        server.url("/png/8x8/c.png"),
    ]
    outcomes = fetch_all(urls, dataclasses.replace(FAST, tdmrep=True))
    assert [outcomes[u].reason for u in urls] == ["tdm_reserved", "tdm_reserved", None]
    assert server.requests == ["/robots.txt", "/.well-known/tdmrep.json", "/png/8x8/c.png"]
    del server.requests[:]
    assert all(o.ok for o in fetch_all(urls).values())  # not asked for: not read
    assert "/.well-known/tdmrep.json" not in server.requests
