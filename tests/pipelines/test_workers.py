"""Warm workers: a multi-process DirectRunner pipeline runs on workers forked
by the build's zygote, fails as it would on Beam's own workers, still runs
when the zygote is gone, and leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines.runners import RunnerSettings, make_runner, pipeline_options
from pipelines.workers import BEAM_WORKER, SHIM, Zygote, set_worker_command, wanted

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def warm_pipeline(zygote: Zygote, *beam_args: str) -> beam.Pipeline:
    settings = RunnerSettings(runner="DirectRunner", workers=2, beam_args=beam_args)
    options = pipeline_options(settings)
    return beam.Pipeline(runner=make_runner(options, zygote.command), options=options)


def parent_and_square(value: int) -> tuple[int, int]:
    return os.getppid(), value * value


def test_workers_are_forked_by_the_zygote_and_compute_the_same():
    with Zygote() as zygote:
        with warm_pipeline(zygote) as pipeline:
            out = pipeline | beam.Create(range(20)) | beam.Reshuffle() | beam.Map(parent_and_square)
            assert_that(out, equal_to([(zygote.pid, value * value) for value in range(20)]))


def wave_loaded(_) -> bool:
    return "wave" in sys.modules  # a module nothing here imports


def test_a_module_preloaded_by_the_zygote_is_in_its_workers():
    with Zygote() as zygote:
        zygote.preload("wave")
        with warm_pipeline(zygote) as pipeline:
            loaded = pipeline | beam.Create([1, 2]) | beam.Map(wave_loaded)
            assert_that(loaded, equal_to([True, True]))


def fail(value: int) -> int:
    raise ValueError(f"record {value} is broken")


def test_a_failing_worker_fails_the_pipeline_with_its_error():
    with Zygote() as zygote:
        # the worker logs nothing: this process would print its error (relayed late) to a
        # later test's output
        pipeline = warm_pipeline(zygote, "--default_sdk_harness_log_level=CRITICAL")
        pipeline | beam.Create([7]) | beam.Map(fail)
        with pytest.raises(Exception, match="record 7 is broken"):
            pipeline.run().wait_until_finish()


def test_without_a_zygote_the_workers_start_as_beams_own():
    zygote = Zygote()
    zygote.close()  # as if it had failed to start: nothing listens on its socket
    with warm_pipeline(zygote) as pipeline:
        out = pipeline | beam.Create(range(5)) | beam.Map(parent_and_square)
        assert_that(out | beam.Values(), equal_to([0, 1, 4, 9, 16]))
        forked = out | beam.Keys() | beam.Map(int.__eq__, zygote.pid) | beam.Distinct()
        assert_that(forked, equal_to([False]), label="NotForked")


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(child) for child in handle.read().split()]


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_ends_when_the_script_that_stands_for_it_is_killed():
    with Zygote() as zygote:
        # a worker whose runner never answers: it waits on the control address
        environ = dict(os.environ, CONTROL_API_SERVICE_DESCRIPTOR='url: "localhost:9"')
        script = subprocess.Popen(
            [sys.executable, "-I", "-S", SHIM, zygote.path],
            env=environ,
            stderr=subprocess.DEVNULL,
        )
        while not children(zygote.pid):  # the zygote forks it
            assert script.poll() is None
            time.sleep(0.01)
        (worker,) = children(zygote.pid)
        assert running(worker)
        script.send_signal(signal.SIGKILL)
        script.wait()
        while running(worker):
            time.sleep(0.01)
    assert zygote.exited


def test_the_zygote_exits_and_leaves_nothing_when_closed():
    zygote = Zygote()
    folder = os.path.dirname(zygote.path)
    assert os.path.exists(zygote.path)
    zygote.close()
    assert zygote.exited and not os.path.exists(folder)


def test_only_beams_own_worker_command_is_replaced():
    from apache_beam.portability import python_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    proto = beam_runner_api_pb2.Pipeline()
    environments = proto.components.environments
    environments["beam"].urn = python_urns.SUBPROCESS_SDK
    environments["beam"].payload = f"{sys.executable} {BEAM_WORKER}".encode()
    environments["user"].urn = python_urns.SUBPROCESS_SDK
    environments["user"].payload = b"/opt/my-worker --flag"
    set_worker_command(proto, "warm")
    assert environments["beam"].payload == b"warm"
    assert environments["user"].payload == b"/opt/my-worker --flag"


def test_warm_workers_are_for_local_multi_process_builds_only(monkeypatch):
    assert wanted(RunnerSettings(workers=2))
    assert not wanted(
        RunnerSettings(workers=2, beam_args=("--direct_running_mode=multi_threading",))
    )
    assert not wanted(RunnerSettings("PortableRunner", 2, job_endpoint="localhost:1"))
    monkeypatch.setenv("CORPORA_WORKERS", "spawn")
    assert not wanted(RunnerSettings(workers=2))
