import io

from corpora.fetch.progress import FetchProgress


def test_progress_prints_done_share_and_rate_every_interval():
    now = [0.0]
    out = io.StringIO()
    progress = FetchProgress(interval=10, stream=out, clock=lambda: now[0], label="fetch")
    for i in range(20):
        now[0] = i * 1.0
        progress.update(ok=i % 4 != 0)
    assert out.getvalue() == "fetch: 11 URLs done, 72.7% ok, 0.8 images/s\n"
    assert progress.line(now=20.0) == "fetch: 20 URLs done, 75.0% ok, 0.8 images/s"
    one = FetchProgress(interval=10, stream=out, clock=lambda: now[0], label="fetch")
    one.update(ok=True)
    assert one.line().startswith("fetch: 1 URL done, ")  # issue 32, finding 8


def test_progress_interval_zero_prints_nothing():
    out = io.StringIO()
    progress = FetchProgress(interval=0, stream=out)
    for _ in range(100):
        progress.update(ok=True)
    assert out.getvalue() == "" and progress.done == 100
