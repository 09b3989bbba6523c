from __future__ import annotations

import io
import time

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.launch import BuildOutcome, Progress, counters_of
from pipelines.runners import RunnerSettings, make_runner, pipeline_options
from pipelines.transforms import NAMESPACE


def _count(element):
    Metrics.counter(NAMESPACE, "images.ok").inc(element)
    Metrics.counter("elsewhere", "ignored").inc()
    return element


def test_counters_come_from_beams_metrics_of_a_real_run():
    options = pipeline_options(RunnerSettings(workers=1))
    pipeline = beam.Pipeline(runner=make_runner(options), options=options)
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


def test_progress_prints_elapsed_time_and_complete_shards_until_the_build_ends():
    stream = io.StringIO()
    shards = iter(range(100))
    with Progress("unused", every=0.05, stream=stream, count=lambda: next(shards)):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3
    assert lines[0] == "  … 0m00s, 0 shard(s) complete"
    assert lines[1].endswith(", 1 shard(s) complete")
    count = len(lines)
    time.sleep(0.15)
    assert len(stream.getvalue().splitlines()) == count  # stopped with the build


def test_no_progress_when_disabled():
    stream = io.StringIO()
    with Progress("unused", every=0, stream=stream, count=lambda: 1):
        time.sleep(0.1)
    assert stream.getvalue() == ""
