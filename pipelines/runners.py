"""Runners and pipeline options: the same pipeline on a laptop, Dataflow,
Spark or Flink.

``DirectRunner`` is run through Beam's FnApiRunner directly: Beam's own
DirectRunner first tries the Prism runner, which downloads a binary and
stalls on a machine without network. ``PortableRunner`` submits to a job
service (``--job-endpoint``), the path Flink and Spark clusters also take;
``SparkRunner`` and ``FlinkRunner`` start Beam's job server for their
cluster (from a local jar when the cluster has no Maven access);
``DataflowRunner`` stages this project's own package, built from
``pyproject.toml``, to its workers; ``DaskRunner`` submits to a
dask.distributed scheduler (``--dask_client_address`` after ``--``) through
:mod:`pipelines.dask_runner`, Beam's DaskRunner with the corrections it needs.

Arguments after ``--`` are Beam's: each must be an option one of Beam's
options classes knows once the chosen runner is loaded (the installed extras'
classes among them), or be named in ``custom_options`` (the user's own
``PipelineOptions``); anything else is refused before the build starts,
rather than dropped by Beam without a word.

Beam is imported inside the functions that need it, never at the top: every
``corpora`` command takes :data:`RUNNERS`, :data:`ENVIRONMENTS` and
:data:`RUNNER_FLAGS` from here for its flags, and ``corpora --help`` must not
pay Beam's import (3.4 s; ``tests/cli/test_startup.py`` checks it).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import os
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

RUNNERS = (
    "DirectRunner",
    "PortableRunner",
    "DataflowRunner",
    "SparkRunner",
    "FlinkRunner",
    "DaskRunner",
)
ENVIRONMENTS = ("DOCKER", "PROCESS", "EXTERNAL", "LOOPBACK")
# A DirectRunner build of inputs this small (the bundled sample is 4 KB) runs
# one worker inside this process unless --workers says otherwise: each worker
# process imports Beam and the fetch stack again (3 s and more of CPU), more
# than the whole build costs.
SMALL_INPUT_BYTES = 128 * 1024
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYPROJECT = os.path.join(PROJECT_ROOT, "pyproject.toml")


class RunnerError(ValueError):
    """Runner flags that cannot work together (reported as a usage error)."""


@dataclasses.dataclass(frozen=True)
class RunnerSettings:
    """Where and how a build runs; none of it changes the output bytes."""

    runner: str = "DirectRunner"
    workers: int = 1
    job_endpoint: str | None = None
    environment_type: str | None = None
    environment_config: str | None = None
    project: str | None = None
    region: str | None = None
    temp_location: str | None = None
    spark_master_url: str | None = None
    flink_master: str | None = None
    job_server_jar: str | None = None
    custom_options: tuple[str, ...] = ()  # names of the user's own options in beam_args
    beam_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise RunnerError(f"unknown runner {self.runner!r}; one of: {', '.join(RUNNERS)}")
        check_beam_args(self.runner, self.beam_args, self.custom_options)
        if self.workers < 1:
            raise RunnerError(f"workers must be at least 1, got {self.workers}")
        if self.environment_type is not None and self.environment_type.upper() not in ENVIRONMENTS:
            raise RunnerError(
                f"unknown environment type {self.environment_type!r}; "
                f"one of: {', '.join(ENVIRONMENTS)}"
            )
        needs = {
            "PortableRunner": {"--job-endpoint": self.job_endpoint},
            "DataflowRunner": {
                "--project": self.project,
                "--region": self.region,
                "--temp-location": self.temp_location,
            },
        }.get(self.runner, {})
        missing = [
            flag for flag, value in needs.items() if not value and not self._in_beam_args(flag)
        ]
        if missing:
            raise RunnerError(f"{self.runner} needs {', '.join(missing)}")
        if (
            self.runner == "DataflowRunner"
            and self.temp_location
            and not self.temp_location.startswith("gs://")
        ):
            raise RunnerError(
                f"--temp-location must be a gs:// path for DataflowRunner, got {self.temp_location}"
            )
        wrong = [
            flag
            for flag, value, runners in (
                ("--job-endpoint", self.job_endpoint, ("PortableRunner",)),
                ("--spark-master-url", self.spark_master_url, ("SparkRunner",)),
                ("--flink-master", self.flink_master, ("FlinkRunner",)),
                ("--job-server-jar", self.job_server_jar, ("SparkRunner", "FlinkRunner")),
                (
                    "--environment-type",
                    self.environment_type,
                    ("PortableRunner", "SparkRunner", "FlinkRunner"),
                ),
                (
                    "--environment-config",
                    self.environment_config,
                    ("PortableRunner", "SparkRunner", "FlinkRunner"),
                ),
                ("--project", self.project, ("DataflowRunner",)),
                ("--region", self.region, ("DataflowRunner",)),
            )
            if value and self.runner not in runners
        ]
        if wrong:
            raise RunnerError(f"{', '.join(wrong)} does not apply to {self.runner}")

    def _in_beam_args(self, flag: str) -> bool:
        beam_flag = flag.lstrip("-").replace("-", "_")
        return any(arg.split("=", 1)[0].lstrip("-") == beam_flag for arg in self.beam_args)

    @property
    def chose_running_mode(self) -> bool:
        """Whether the Beam options after ``--`` set the DirectRunner's running mode."""
        return any("direct_running_mode" in arg for arg in self.beam_args)

    @property
    def local(self) -> bool:
        """Whether the workers share this machine's disk (progress can look at it)."""
        return self.runner == "DirectRunner" or (self.environment_type or "").upper() == "LOOPBACK"


RUNNER_FLAGS = tuple(
    field.name for field in dataclasses.fields(RunnerSettings) if field.name != "beam_args"
)


# The module of each runner: importing it registers the options classes it brings.
RUNNER_MODULES = {
    "DirectRunner": "apache_beam.runners.direct.direct_runner",
    "PortableRunner": "apache_beam.runners.portability.portable_runner",
    "DataflowRunner": "apache_beam.runners.dataflow.dataflow_runner",
    "SparkRunner": "apache_beam.runners.portability.spark_runner",
    "FlinkRunner": "apache_beam.runners.portability.flink_runner",
    "DaskRunner": "apache_beam.runners.dask.dask_runner",
}


@functools.lru_cache(maxsize=None)
def _beam_option_parser(runner: str):
    from apache_beam.options import pipeline_options as beam_options

    try:
        importlib.import_module(RUNNER_MODULES[runner])
    except ImportError:  # the runner's extra is not installed: Beam will say so when it runs
        pass

    class Parser(beam_options._BeamArgumentParser):
        def error(self, message: str):
            raise RunnerError(f"invalid Beam option after --: {message}")

    parser = Parser(allow_abbrev=False, add_help=False)
    # the classes Beam itself parses options with (PipelineOptions.get_all_options)
    classes = {str(cls): cls for cls in beam_options.PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


def check_beam_args(
    runner: str, beam_args: Sequence[str], custom_options: Sequence[str] = ()
) -> None:
    """Refuse an argument after ``--`` that Beam does not know for ``runner``,
    unless ``custom_options`` names it (``--custom-beam-option NAME``).

    >>> check_beam_args("DirectRunner", ["--direct_running_mode=multi_threading"])
    >>> try:
    ...     check_beam_args("DirectRunner", ["--direct_running_mod=multi_threading"])
    ... except RunnerError as exc:
    ...     print(str(exc).partition("; ")[0])
    unknown Beam option after --: --direct_running_mod (did you mean --direct_running_mode?)
    >>> check_beam_args("DirectRunner", ["--my_option", "7"], custom_options=["my_option"])
    """
    if not beam_args:
        return
    parser = _beam_option_parser(runner)
    _, unknown = parser.parse_known_args(list(beam_args))
    custom = {name.lstrip("-") for name in custom_options}
    value_of_custom = False  # the previous argument was a custom option waiting for its value
    for arg in unknown:
        if not arg.startswith("-"):
            if value_of_custom:
                value_of_custom = False
                continue
            raise RunnerError(f"not a Beam option after --: {arg!r}")
        name, has_value, _ = arg.lstrip("-").partition("=")
        if name in custom:
            value_of_custom = not has_value
            continue
        known = [flag for action in parser._actions for flag in action.option_strings]
        close = difflib.get_close_matches(f"--{name}", known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise RunnerError(
            f"unknown Beam option after --: --{name}{hint}; "
            "pass options of your own with --custom-beam-option NAME"
        )


def runner_settings_from_flags(beam_args: Sequence[str] = (), **flags) -> RunnerSettings:
    """The runner flags of ``corpora build`` (named as :data:`RUNNER_FLAGS`; left
    out or ``None``: the default) and the Beam options after ``--``.

    A DirectRunner build uses every core unless ``workers`` says otherwise;
    remote runners size their own workers.

    >>> runner_settings_from_flags(runner="DataflowRunner", project="p", region="r",
    ...                            temp_location="gs://b/tmp").workers
    1
    """
    unknown = sorted(set(flags) - set(RUNNER_FLAGS))
    if unknown:
        raise RunnerError(f"no such runner flag: {unknown[0]}")
    given = {name: value for name, value in flags.items() if value is not None}
    runner = given.setdefault("runner", "DirectRunner")
    given.setdefault("workers", (os.cpu_count() or 1) if runner == "DirectRunner" else 1)
    return RunnerSettings(**given, beam_args=tuple(beam_args))


def fit_to_input(settings: RunnerSettings, input_bytes: int | None) -> RunnerSettings:
    """``settings`` for inputs of ``input_bytes`` in all (``None``: unknown)
    when the user did not choose the workers: a small DirectRunner build runs
    one worker in this process (:data:`SMALL_INPUT_BYTES`).

    >>> fit_to_input(RunnerSettings(workers=8), 9_000).workers
    1
    >>> fit_to_input(RunnerSettings(workers=8), 50_000_000).workers
    8
    """
    small = input_bytes is not None and input_bytes <= SMALL_INPUT_BYTES
    if (
        settings.runner != "DirectRunner"
        or not small
        or settings.chose_running_mode
        or settings.workers == 1
    ):
        return settings
    return dataclasses.replace(settings, workers=1)


def _stages_package(settings: RunnerSettings) -> bool:
    """Whether the workers run in containers that must install this project's
    package (built from pyproject.toml): Dataflow, and Portable/Spark/Flink
    with DOCKER or PROCESS workers. LOOPBACK and EXTERNAL workers already have
    it, and so does a custom container image."""
    if settings.runner == "DirectRunner":
        return False
    if any(
        arg.lstrip("-").split("=", 1)[0] in ("setup_file", "sdk_container_image")
        for arg in settings.beam_args
    ):
        return False
    if settings.runner == "DataflowRunner":
        return True
    return (settings.environment_type or "DOCKER").upper() in ("DOCKER", "PROCESS")


def _flags(settings: RunnerSettings) -> list[str]:
    """Beam flags for ``settings``; explicit Beam args after ``--`` come last and win."""
    flags = [f"--runner={settings.runner}"]
    mapped = {
        "job_endpoint": settings.job_endpoint,
        "environment_type": settings.environment_type.upper()
        if settings.environment_type
        else None,
        "environment_config": settings.environment_config,
        "project": settings.project,
        "region": settings.region,
        "temp_location": settings.temp_location,
        "spark_master_url": settings.spark_master_url,
        "flink_master": settings.flink_master,
    }
    if settings.job_server_jar:
        mapped[
            "spark_job_server_jar" if settings.runner == "SparkRunner" else "flink_job_server_jar"
        ] = settings.job_server_jar
    if _stages_package(settings):
        if not os.path.isfile(PYPROJECT):
            raise RunnerError(
                f"{settings.runner} workers need the corpora package, staged from {PYPROJECT}, "
                "which is missing; run from a source checkout or pass "
                "-- --sdk_container_image=IMAGE with corpora installed"
            )
        mapped["setup_file"] = PYPROJECT
    if settings.runner in ("PortableRunner", "SparkRunner", "FlinkRunner") and settings.workers > 1:
        mapped["sdk_worker_parallelism"] = str(settings.workers)
    flags += [f"--{name}={value}" for name, value in mapped.items() if value]
    return flags + list(settings.beam_args)


def pipeline_options(
    settings: RunnerSettings | str,
    workers: int = 1,
    beam_args: Sequence[str] = (),
    verbose: bool = False,
) -> PipelineOptions:
    """The Beam options for a run. ``pipeline_options("DirectRunner", 2)`` still
    works for callers that only choose a runner and a worker count."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, WorkerOptions

    if isinstance(settings, str):
        settings = RunnerSettings(runner=settings, workers=workers, beam_args=tuple(beam_args))
    options = PipelineOptions(_flags(settings))
    harness = options.view_as(WorkerOptions)
    if not verbose and harness.default_sdk_harness_log_level is None:
        harness.default_sdk_harness_log_level = (
            "ERROR"  # worker processes log INFO to stderr otherwise
        )
    if settings.runner == "DirectRunner":
        direct = options.view_as(DirectOptions)
        direct.direct_num_workers = settings.workers
        if settings.workers > 1 and not settings.chose_running_mode:
            direct.direct_running_mode = "multi_processing"
    return options


def use_filesystems(settings: RunnerSettings, verbose: bool = False) -> None:
    """Give this process's FileSystems the run's options (an s3 endpoint and
    keys), so that inputs can be checked before the pipeline starts."""
    from apache_beam.io.filesystems import FileSystems

    try:
        options = pipeline_options(settings, verbose=verbose)
    except SystemExit:  # Beam's argparse exits on a malformed option
        raise RunnerError("invalid Beam options after --") from None
    FileSystems.set_options(options)
    os.environ.update(s3_environment(options.get_all_options()))


# Beam's S3 options → the variables botocore reads: s3fs (the image store and
# the stash, through fsspec) then reaches the same endpoint with the same keys,
# here and in the worker processes this one starts (they inherit the variables).
S3_ENVIRONMENT = {
    "s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "s3_session_token": "AWS_SESSION_TOKEN",
    "s3_region_name": "AWS_DEFAULT_REGION",
    "s3_endpoint_url": "AWS_ENDPOINT_URL_S3",
}


def s3_environment(options: dict) -> dict[str, str]:
    """The environment variables of the ``--s3_*`` options that are set.

    >>> s3_environment({"s3_endpoint_url": "http://127.0.0.1:9000", "s3_region_name": None})
    {'AWS_ENDPOINT_URL_S3': 'http://127.0.0.1:9000'}
    """
    return {
        variable: str(options[name])
        for name, variable in S3_ENVIRONMENT.items()
        if options.get(name) is not None
    }


def make_runner(options: PipelineOptions, worker_command: str | None = None):
    """The runner object for ``options`` (``None`` lets Beam choose by name);
    a multi-process DirectRunner starts its workers with ``worker_command``
    when given (a :class:`pipelines.workers.Zygote`'s)."""
    from apache_beam.options.pipeline_options import StandardOptions

    chosen = options.view_as(StandardOptions).runner
    if chosen == "DaskRunner":
        try:
            from pipelines.dask_runner import DaskRunner
        except ImportError as exc:  # dask, distributed
            from corpora.config.extras import missing_extra

            raise RunnerError(missing_extra("dask", "DaskRunner", exc)) from None
        return DaskRunner()
    if chosen not in (None, "DirectRunner"):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # Hand the options to the workers, as Beam's DirectRunner does: worker
    # processes read them (S3 endpoint and keys, among others) from here.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    runner = fn_runner.FnApiRunner(provision_info=provision)
    if worker_command is not None:
        from pipelines.workers import set_worker_command

        run = runner.run_via_runner_api  # the one place Beam's pipeline proto passes through
        runner.run_via_runner_api = lambda proto, options: run(
            set_worker_command(proto, worker_command), options
        )
    return runner
