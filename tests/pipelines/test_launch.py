from __future__ import annotations

import io
import threading

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.launch import BuildOutcome, BuildProgress, counters_of
from pipelines.transforms import NAMESPACE
from tests.pipelines.direct import direct_pipeline


def _count(element):
    Metrics.counter(NAMESPACE, "images.ok").inc(element)
    Metrics.counter("elsewhere", "ignored").inc()
    return element


def test_counters_come_from_beams_metrics_of_a_real_run():
    pipeline = direct_pipeline()
    _ = pipeline | beam.Create([1, 2, 3]) | beam.Map(_count)
    result = pipeline.run()
    result.wait_until_finish()
    assert counters_of(result) == {"images.ok": 6}


def test_throughput_is_over_the_wall_time_of_the_run():
    manifest = {"funnel": {"input": 100}, "totals": {"documents": 80, "bytes": 4_000_000}}
    rates = BuildOutcome(manifest, {"images.ok": 60}, seconds=20.0).throughput()
    assert rates == {
        "input_per_s": 5.0,
        "documents_per_s": 4.0,
        "images_per_s": 3.0,
        "megabytes_per_s": 0.2,
    }


def test_progress_lines_give_the_elapsed_time_and_the_complete_shards():
    now = [100.0]
    stream = io.StringIO()
    shards = iter([0, 1, 12])
    progress = BuildProgress(
        "unused", every=10, stream=stream, count=lambda: next(shards), clock=lambda: now[0]
    )
    for later in (100.0, 161.0, 3700.5):
        now[0] = later
        progress.tick()
    assert stream.getvalue().splitlines() == [
        "  … 0m00s, 0 shard(s) complete",
        "  … 1m01s, 1 shard(s) complete",
        "  … 60m00s, 12 shard(s) complete",
    ]


def test_progress_runs_while_the_build_runs_and_stops_with_it():
    stream = io.StringIO()
    counted = threading.Event()

    def count() -> int:
        counted.set()
        return 3

    with BuildProgress("unused", every=0.01, stream=stream, count=count) as progress:
        assert counted.wait(timeout=60)  # a line was written while the build ran
        assert progress.running
    assert not progress.running  # stopped with the build: no line after it
    assert stream.getvalue().splitlines()[0].endswith(", 3 shard(s) complete")


def test_no_progress_when_disabled():
    stream = io.StringIO()
    with BuildProgress("unused", every=0, stream=stream, count=lambda: 1) as progress:
        assert not progress.running
    assert stream.getvalue() == ""
