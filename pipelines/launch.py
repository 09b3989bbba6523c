"""Running a build: prepare (or resume) the output, run the pipeline on the
chosen runner, show progress on long local builds, and summarise the run
from Beam's metrics.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from typing import Any, Callable, TextIO

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import TestOptions

from corpora.settings import BuildSettings
from corpora.shards import resume as core_resume
from corpora.shards.manifest import MANIFEST
from corpora.tokenizer import Tokenizer
from pipelines import resume, storage
from pipelines.build import build_pipeline
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
    """Every ``every`` seconds, a line with the elapsed time and the shards
    written so far (a local build's only visible progress before it ends).
    The clock is injectable, so a test needs no sleeps."""

    def __init__(
        self,
        output: str,
        every: float,
        stream: TextIO = sys.stderr,
        count: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._output = output
        self._every = every
        self._stream = stream
        self._count = count or self._count_markers
        self._clock = clock
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
        elapsed = int(self._clock() - self._start)
        self._stream.write(
            f"  … {elapsed // 60}m{elapsed % 60:02d}s, {self._count()} shard(s) complete\n"
        )
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


def execute(
    settings: BuildSettings,
    runner: RunnerSettings,
    overwrite: bool = False,
    verbose: bool = False,
    progress_every: float = 0,
) -> BuildOutcome:
    """Build ``settings`` on ``runner``; resume the output if it holds an
    interrupted attempt of the same build."""
    tokenizer = Tokenizer(
        settings.tokenizer,
        settings.tokens_per_image,
        settings.image_token_id,
        settings.pad_id,
        settings.image_token_reserved,
    )
    options = pipeline_options(runner, verbose=verbose)
    FileSystems.set_options(options)  # s3 endpoint and keys for this process's own reads and writes
    dry_run = bool(options.view_as(TestOptions).dry_run)
    try:  # Beam validates the options for the runner here (project id, temp location, …)
        pipeline = beam.Pipeline(runner=make_runner(options), options=options)
    except ValueError as exc:
        raise RunnerError(
            f"invalid options for {runner.runner}: {' '.join(str(exc).split())}"
        ) from None
    found = {"complete_shards": 0}
    if not dry_run:  # a dry run writes nothing, so it does not touch the output either
        found = resume.prepare_output(settings, tokenizer.info, overwrite=overwrite)
    build_pipeline(pipeline, settings, tokenizer)
    start = time.monotonic()
    with BuildProgress(settings.output, progress_every if runner.local else 0):
        result = pipeline.run()
        result.wait_until_finish()
    seconds = time.monotonic() - start
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
