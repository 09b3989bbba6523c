"""The one way tests make a Beam pipeline: the DirectRunner, set up as a build sets it up."""

from __future__ import annotations

import apache_beam as beam

from pipelines.runners import RunnerSettings, make_runner, pipeline_options


def direct_pipeline(workers: int = 1) -> beam.Pipeline:
    """A pipeline on the DirectRunner: in process for one worker, ``workers``
    processes otherwise (the options go to the workers as in a build)."""
    options = pipeline_options(RunnerSettings(runner="DirectRunner", workers=workers))
    return beam.Pipeline(runner=make_runner(options), options=options)
