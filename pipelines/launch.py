"""Running a build: take the output's lock, prepare (or resume) the output,
run the pipeline on the chosen runner, show progress on long local builds,
clean up (after a failure too), and summarise the run from Beam's metrics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Sequence, TextIO

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import TestOptions

from corpora.config import catalog
from corpora.config.settings import BuildSettings
from corpora.lock import output as lock
from corpora.shards import resume as core_resume
from corpora.shards.manifest import MANIFEST
from corpora.stats.progress import progress_line, read_tallies
from corpora.tokens.tokenizer import Tokenizer
from pipelines import resume, storage
from pipelines.build import build_pipeline, fetch_pipeline
from pipelines.inputs import input_bytes
from pipelines.memory import LAUNCHER_PID, steady_memory
from pipelines.runners import RunnerError, RunnerSettings, make_runner, pipeline_options
from pipelines.transforms import NAMESPACE


@dataclasses.dataclass
class BuildOutcome:
    manifest: dict[str, Any] | None  # None for a dry run
    counters: dict[str, int]
    seconds: float
    resumed_shards: int = 0
    result: Any = None  # Beam's PipelineResult (a dry run's holds the job)

    def throughput(self) -> dict[str, float]:
        """Rates over the wall time of the run."""
        seconds = max(self.seconds, 1e-9)
        totals = (self.manifest or {}).get("totals", {})
        funnel = (self.manifest or {}).get("funnel", {})
        return {
            "input_per_s": funnel.get("input", 0) / seconds,
            "documents_per_s": totals.get("documents", 0) / seconds,
            "images_per_s": self.counters.get("images.ok", 0) / seconds,
            "megabytes_per_s": totals.get("bytes", 0) / seconds / 1e6,
        }


def counters_of(result: Any) -> dict[str, int]:
    """The ``corpora`` counters of a finished run (empty where the runner has none)."""
    try:
        query = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))
    except Exception:  # a runner without metrics, or a dry run
        return {}
    counters: dict[str, int] = {}
    for counter in query.get("counters", []):
        value = counter.committed if counter.committed is not None else counter.attempted
        counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + int(
            value or 0
        )
    return counters


class BuildProgress:
    """Every ``every`` seconds, one line: the records read (and the share of
    the input, ``input_bytes`` long), the images fetched and their rate, the
    shards complete, and an ETA (:func:`corpora.stats.progress.progress_line`),
    from the workers' counts in ``tallies`` (a folder this object makes and
    removes when none is given). The clock is injectable, so a test needs no
    sleeps."""

    def __init__(
        self,
        output: str,
        every: float,
        stream: TextIO = sys.stderr,
        count: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
        tallies: str | None = None,
        input_bytes: int | None = None,
        fetches: bool = True,
    ):
        self._output = output
        self._every = every
        self._stream = stream
        self._count = count or self._count_markers
        self._clock = clock
        self._own = tallies is None and every > 0
        self.tallies = tempfile.mkdtemp(prefix="corpora-progress-") if self._own else tallies
        self._input_bytes = input_bytes
        self._fetches = fetches
        self._fetching_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="corpora-progress")
        self._start = clock()

    def _count_markers(self) -> int:
        pattern = FileSystems.join(self._output, core_resume.SHARD_MARKERS, "*.json")
        try:
            return len(FileSystems.match([pattern])[0].metadata_list)
        except Exception:
            return 0

    def tick(self) -> None:
        """Write one progress line."""
        elapsed = self._clock() - self._start
        totals = read_tallies(self.tallies) if self.tallies else {}
        if not totals.get("images"):
            self._fetching_since = elapsed  # the first image comes after this line
        line = progress_line(
            elapsed,
            totals,
            self._input_bytes,
            self._count(),
            self._fetching_since,
            self._fetches,
        )
        self._stream.write(line + "\n")
        self._stream.flush()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            self.tick()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> "BuildProgress":
        if self._every > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._own and self.tallies:
            shutil.rmtree(self.tallies, ignore_errors=True)


def new_pipeline(
    runner: RunnerSettings, verbose: bool = False, worker_command: str | None = None
) -> beam.Pipeline:
    """An empty pipeline on ``runner`` (its options as ``pipeline.options``),
    this process's file systems and, for a local run, its memory set up to
    match; a multi-process DirectRunner starts its workers with
    ``worker_command`` when given (:class:`pipelines.workers.Zygote`).
    :class:`RunnerError` where Beam refuses the options."""
    options = pipeline_options(runner, verbose=verbose)
    if runner.local:
        steady_memory()
    os.environ[LAUNCHER_PID] = str(os.getpid())  # its workers settle their GC, not it
    FileSystems.set_options(options)  # s3 endpoint and keys for this process's own reads and writes
    try:  # Beam validates the options for the runner here (project id, temp location, …)
        return beam.Pipeline(runner=make_runner(options, worker_command), options=options)
    except ValueError as exc:
        raise RunnerError(
            f"invalid options for {runner.runner}: {' '.join(str(exc).split())}"
        ) from None


def execute(
    settings: BuildSettings,
    runner: RunnerSettings,
    overwrite: bool = False,
    verbose: bool = False,
    progress_every: float = 0,
    worker_command: str | None = None,
) -> BuildOutcome:
    """Build ``settings`` on ``runner``; resume the output if it holds an
    interrupted attempt of the same build. A multi-process DirectRunner
    starts its workers with ``worker_command`` when given
    (:class:`pipelines.workers.Zygote`).

    The build holds the output's lock (:mod:`corpora.lock.output`) from before it
    touches the output to its end: a second build into the same output gets
    :class:`corpora.lock.OutputLocked`. A failed build leaves no temporaries,
    in the output or in the temporary directory."""
    tokenizer = Tokenizer(
        settings.tokenizer,
        settings.tokens_per_image,
        settings.image_token_id,
        settings.pad_id,
        settings.image_token_reserved,
    )
    pipeline = new_pipeline(runner, verbose, worker_command)
    options = pipeline.options
    build = functools.partial(
        _run, pipeline, settings, runner, tokenizer, overwrite, progress_every
    )
    try:
        if options.view_as(TestOptions).dry_run:  # writes nothing, so takes no lock either
            return build(dry_run=True)
        s3_options = options.get_all_options() if storage.scheme(settings.output) == "s3" else None
        held = lock.acquire(settings.output, s3_options=s3_options)
        try:
            outcome = build()
        except BaseException:
            with contextlib.suppress(lock.LockError):  # the build's own failure is the one to tell
                held.release()
            raise
        held.release()
        return outcome
    finally:
        # Beam makes this folder with the pipeline and removes it only once the pipeline runs
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)


def _run(
    pipeline: beam.Pipeline,
    settings: BuildSettings,
    runner: RunnerSettings,
    tokenizer: Tokenizer,
    overwrite: bool,
    progress_every: float,
    dry_run: bool = False,
) -> BuildOutcome:
    prepared = False
    try:
        found = {"complete_shards": 0}
        if not dry_run:
            found = resume.prepare_output(settings, tokenizer.info, overwrite=overwrite)
            prepared = True
        every = progress_every if runner.local and not dry_run else 0
        with BuildProgress(
            settings.output,
            every,
            input_bytes=input_bytes(settings) if every else None,
            fetches=catalog.get(settings.corpus).images,
        ) as progress:
            build_pipeline(pipeline, settings, tokenizer, progress.tallies)
            if dry_run and runner.runner == "DirectRunner":  # Beam's FnApiRunner would run it all
                return BuildOutcome(None, {}, 0.0)
            start = time.monotonic()
            result = pipeline.run()
            result.wait_until_finish()
        seconds = time.monotonic() - start
    except BaseException:
        if prepared:  # a refused build leaves the output as it found it
            resume.remove_temporaries(settings.output, settings.corpus)
        raise
    if dry_run:
        return BuildOutcome(None, {}, seconds, result=result)
    resume.remove_temporaries(settings.output, settings.corpus)
    manifest = storage.read_json(FileSystems.join(settings.output, MANIFEST))
    resume.remove_stale_shards(
        settings.output, settings.corpus, (s["path"] for s in manifest["shards"])
    )
    counters = counters_of(result)
    return BuildOutcome(
        manifest, counters, seconds, resumed_shards=found["complete_shards"], result=result
    )


def run_build(
    settings: BuildSettings,
    runner: str = "DirectRunner",
    workers: int = 1,
    beam_args: Sequence[str] = (),
    verbose: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Build a corpus and return its manifest (read back from the output).

    Re-running an interrupted build resumes it (``pipelines/launch.py``)."""
    runner_settings = RunnerSettings(runner=runner, workers=workers, beam_args=tuple(beam_args))
    return execute(settings, runner_settings, overwrite=overwrite, verbose=verbose).manifest


def run_fetch(
    settings: BuildSettings, runner: RunnerSettings, worker_command: str | None = None
) -> tuple[dict[str, int], float]:
    """Run :func:`pipelines.build.fetch_pipeline` (its workers started with ``worker_command``
    when given, as :func:`execute`'s); the run's ``corpora``
    counters (``images.<outcome>``, ``arrived.<arrival>``) and its wall time."""
    pipeline = new_pipeline(runner, worker_command=worker_command)
    fetch_pipeline(pipeline, settings)
    start = time.monotonic()
    result = pipeline.run()
    result.wait_until_finish()
    return counters_of(result), time.monotonic() - start
