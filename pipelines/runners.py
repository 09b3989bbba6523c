"""Pipeline options and runners.

``DirectRunner`` is run through Beam's FnApiRunner directly: Beam's own
DirectRunner first tries the Prism runner, which downloads a binary and
stalls on a machine without network.
"""

from __future__ import annotations

from typing import Sequence

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    WorkerOptions,
)


def pipeline_options(runner: str, workers: int, beam_args: Sequence[str] = (),
                     verbose: bool = False) -> PipelineOptions:
    options = PipelineOptions(list(beam_args))
    options.view_as(StandardOptions).runner = runner
    harness = options.view_as(WorkerOptions)
    if not verbose and harness.default_sdk_harness_log_level is None:
        harness.default_sdk_harness_log_level = "ERROR"  # worker processes log INFO to stderr otherwise
    if runner == "DirectRunner":
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers = workers
        if workers > 1 and "--direct_running_mode" not in " ".join(beam_args):
            direct.direct_running_mode = "multi_processing"
    return options


def make_runner(options: PipelineOptions):
    """The runner object for ``options`` (``None`` lets Beam choose by name)."""
    if options.view_as(StandardOptions).runner not in (None, "DirectRunner"):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # Hand the options to the workers, as Beam's DirectRunner does.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(provision_info=provision)
