from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import threading

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics

from corpora.lock.output import LOCK_NAME, Holder
from corpora.reader import verify_build
from corpora.stats.progress import Tally
from pipelines.launch import BuildOutcome, BuildProgress, counters_of
from pipelines.transforms import NAMESPACE
from tests.beam_services import python_env
from tests.fixtures import c4_lines, write_c4_json_gz
from tests.generated import mmc4_documents, write_mmc4
from tests.helpers import run_cli
from tests.pipelines.direct import direct_pipeline
from tests.servers import ImageServer, image_bytes


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
        "  … 0m00s: 0 records read, 0 shards complete",
        "  … 1m01s: 0 records read, 1 shard complete",
        "  … 60m00s: 0 records read, 12 shards complete",
    ]


# Issue 32, finding 6: a 300-document build printed "0 shard(s) complete" for
# minutes, beside a line from every fetch worker.
def test_progress_lines_add_up_the_workers_counts_with_a_rate_and_an_eta(tmp_path):
    now = [0.0]
    stream = io.StringIO()
    folder = str(tmp_path / "tallies")
    os.mkdir(folder)
    progress = BuildProgress(
        "unused",
        every=10,
        stream=stream,
        count=lambda: 0,
        clock=lambda: now[0],
        tallies=folder,
        input_bytes=1000,
    )
    reader, fetchers = Tally(folder, "read-1"), [Tally(folder, f"fetch-{i}") for i in (1, 2)]
    now[0] = 10.0
    reader.add(records_read=150)
    reader.set(bytes_read=500)
    reader.write()
    progress.tick()  # read half the input; no image yet: no ETA
    now[0] = 20.0
    reader.add(records_read=150)
    reader.set(bytes_read=1000)
    reader.write()
    for tally, (records, images, ok) in zip(fetchers, ((30, 60, 57), (45, 90, 84))):
        tally.add(records_fetched=records, images=images, images_ok=ok)
        tally.write()
    progress.tick()  # 75 of 300 records through the fetch stage, 150 images in the 10 s since
    assert stream.getvalue().splitlines() == [
        "  … 0m10s: 150 records read (50% of the input), 0 shards complete",
        "  … 0m20s: 300 records read (all of the input), 150 images fetched (94.0% ok, "
        "15.0/s), 0 shards complete, about 1m00s left",
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
        folder = progress.tallies
        assert os.path.isdir(folder)
    assert not progress.running  # stopped with the build: no line after it
    assert not os.path.exists(folder)  # the workers' counts go with it
    assert stream.getvalue().splitlines()[0].endswith(", 3 shards complete")


def test_no_progress_when_disabled():
    stream = io.StringIO()
    with BuildProgress("unused", every=0, stream=stream, count=lambda: 1) as progress:
        assert not progress.running
    assert stream.getvalue() == ""


# ------------------------------------------------ one writer per output, clean failure
# (issue 16, defects 3 and 7)

SMALL = (
    "--seq-len",
    "64",
    "--tokens-per-image",
    "4",
    "--image-size",
    "32",
    "--progress-every",
    "0",
)


def _gate(server: ImageServer, docs: list[dict]) -> tuple[threading.Event, threading.Event]:
    """The images of ``docs`` wait for ``opened``; ``arrived`` is set by the first request."""
    arrived, opened = threading.Event(), threading.Event()

    def gated(handler) -> None:
        arrived.set()
        opened.wait(timeout=600)
        handler.send_body(200, image_bytes(48, 48, handler.path), "image/jpeg")

    for doc in docs:
        for info in doc["image_info"]:
            server.route(info["raw_url"][len(server.base) :], gated)
    return arrived, opened


@pytest.mark.integration
@pytest.mark.slow
def test_two_builds_into_one_output_one_exits_2_naming_the_holder_the_other_completes(
    tmp_path, tokenizer_path
):
    server = ImageServer()
    docs = mmc4_documents(4, server.base)
    arrived, opened = _gate(server, docs)
    output = str(tmp_path / "out")
    args = [
        "build", "mmc4-pairs", "--input", write_mmc4(str(tmp_path / "docs.jsonl"), docs),
        "--output", output, "--tokenizer", tokenizer_path, "--allow-private-urls",
        "--read-timeout", "600", "--total-timeout", "600", *SMALL,
    ]  # fmt: skip
    with server:
        first = subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args],
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # the first build fetches only once it holds the lock: it holds it now
            assert arrived.wait(timeout=600), first.communicate()
            second = run_cli(*args)
        finally:
            opened.set()
            out, err = first.communicate(timeout=600)
    assert second.returncode == 2
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith(f"corpora: {os.path.join(output, LOCK_NAME)} is held by another build")
    assert f"(pid {first.pid} on {socket.gethostname()}, since " in line
    assert first.returncode == 0, err
    assert "Wrote 1 shard," in out
    assert verify_build(output) == []
    assert not os.path.exists(os.path.join(output, LOCK_NAME))  # given back at the end
    stats = run_cli("stats", output)
    assert stats.returncode == 0, stats.stderr


def _c4_args(inputs: list[str], output: str, *extra: str) -> list[str]:
    flags = [part for path in inputs for part in ("--input", path)]
    return ["build", "c4", *flags, "--output", output, *SMALL, *extra]


@pytest.mark.integration
def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_line(tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = Holder(**{**Holder.here().__dict__, "pid": dead.pid})
    (output / LOCK_NAME).write_bytes(stale.to_bytes())
    c4 = write_c4_json_gz(str(tmp_path), c4_lines())
    result = run_cli(*_c4_args([c4], str(output)))
    assert result.returncode == 0, result.stderr
    assert (
        f"Took over the stale lock {output / LOCK_NAME}: {stale.describe()};"
        f" pid {dead.pid} is no longer running." in result.stderr.splitlines()
    )
    assert not (output / LOCK_NAME).exists()


def _truncated_gz(directory: str) -> str:
    whole = write_c4_json_gz(directory, c4_lines() * 50, index=1, count=2)
    data = open(whole, "rb").read()
    with open(whole, "wb") as handle:
        handle.write(data[: len(data) // 2])
    return whole


@pytest.mark.integration
@pytest.mark.slow
def test_a_failed_overwrite_leaves_nothing_of_the_previous_build_nor_temporaries(tmp_path):
    output, temporary = tmp_path / "out", tmp_path / "tmp"
    temporary.mkdir()
    good = write_c4_json_gz(str(tmp_path), c4_lines())
    assert run_cli(*_c4_args([good], str(output))).returncode == 0
    assert (output / "stats.json").exists() and (output / "manifest.json").exists()
    (output / "beam-temp-stats-0123").mkdir()  # what a failed attempt of Beam's sinks leaves
    (output / "beam-temp-stats-0123" / "part").write_bytes(b"half")

    failed = run_cli(
        *_c4_args([good, _truncated_gz(str(tmp_path))], str(output), "--overwrite"),
        env={"TMPDIR": str(temporary)},
    )
    assert failed.returncode != 0
    left = sorted(p.name for p in output.iterdir())
    assert "stats.json" not in left and "manifest.json" not in left  # the previous build's
    assert not [name for name in left if ".tmp-" in name or name.startswith("beam-temp-")]
    assert LOCK_NAME not in left
    assert not list(temporary.glob("beam-pipeline-temp*"))


@pytest.mark.integration
@pytest.mark.slow
def test_files_a_build_writes_are_replaced_only_with_overwrite(tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "stats.json").write_text('{"mine": true}')
    (output / "failures.parquet").write_bytes(b"my own")
    c4 = write_c4_json_gz(str(tmp_path), c4_lines())
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    refused = run_cli(*_c4_args([c4], str(output)), env={"TMPDIR": str(temporary)})
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "failures.parquet" in line and "stats.json" in line and "--overwrite" in line
    assert (output / "stats.json").read_text() == '{"mine": true}'
    assert (output / "failures.parquet").read_bytes() == b"my own"
    assert sorted(p.name for p in output.iterdir()) == ["failures.parquet", "stats.json"]
    assert not list(temporary.iterdir())  # Beam's folder for the pipeline it was to run

    replaced = run_cli(*_c4_args([c4], str(output), "--overwrite"))
    assert replaced.returncode == 0, replaced.stderr
    assert "mine" not in (output / "stats.json").read_text()
