"""Runner selection and options, and the same build on other runners:
PortableRunner against a local job service (LOOPBACK and an EXTERNAL worker
pool) gives the DirectRunner's bytes; a Dataflow job is built offline."""

from __future__ import annotations

import glob
import os
import tarfile

import pytest
from apache_beam.options.pipeline_options import (
    DirectOptions,
    FlinkRunnerOptions,
    GoogleCloudOptions,
    PortableOptions,
    S3Options,
    SetupOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from corpora.config.bundled_sample import materialize_sample
from corpora.config.settings import corpus_settings
from pipelines.launch import execute
from pipelines.runners import (
    PYPROJECT,
    SMALL_INPUT_BYTES,
    RunnerError,
    RunnerSettings,
    check_beam_args,
    fit_to_input,
    pipeline_options,
    runner_settings_from_flags,
)
from tests.beam_services import job_service, worker_pool
from tests.generated import mmc4_documents, write_mmc4
from tests.helpers import load_manifest, run_cli

SMALL = (
    "--seq-len",
    "64",
    "--tokens-per-image",
    "4",
    "--image-size",
    "32",
    "--allow-private-urls",
    "--samples-per-shard",
    "3",
    "--pack-groups",
    "3",
    "--progress-every",
    "0",
)


def test_direct_runner_runs_multi_process_with_workers():
    options = pipeline_options(RunnerSettings(workers=3))
    assert options.view_as(StandardOptions).runner == "DirectRunner"
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    threads = pipeline_options(
        RunnerSettings(workers=3, beam_args=("--direct_running_mode=multi_threading",))
    )
    assert threads.view_as(DirectOptions).direct_running_mode == "multi_threading"


@pytest.mark.parametrize(
    "runner, args",
    [
        ("DirectRunner", ("--direct_running_mode=multi_threading", "--direct_num_workers", "2")),
        ("DataflowRunner", ("--dry_run=True", "--no_auth", "--experiments=use_runner_v2")),
        ("FlinkRunner", ("--flink_master=host:8081", "--parallelism=4")),
        ("SparkRunner", ("--spark_master_url=spark://h:7077",)),
        ("PortableRunner", ("--s3_endpoint_url=http://127.0.0.1:9000", "--sdk_location=x")),
    ],
)
def test_options_beam_knows_for_the_runner_pass(runner, args):
    check_beam_args(runner, args)


@pytest.mark.parametrize(
    "args, custom, message",
    [
        (
            ("--direct_running_mod=multi_threading",),
            (),
            "unknown Beam option after --: --direct_running_mod "
            "(did you mean --direct_running_mode?); "
            "pass options of your own with --custom-beam-option NAME",
        ),
        (("--my_option", "7", "--other=1"), ("my_option",), "--other"),
        (("stray",), (), "not a Beam option after --: 'stray'"),
        (
            ("--direct_num_workers=many",),
            (),
            "invalid Beam option after --: argument --direct_num_workers: invalid int value",
        ),
    ],
)
def test_other_arguments_after_the_dashes_are_refused_in_one_line(args, custom, message):
    with pytest.raises(RunnerError) as refused:
        RunnerSettings(beam_args=args, custom_options=custom)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_custom_options_go_through_with_or_without_a_value():
    settings = RunnerSettings(
        beam_args=("--my_option", "7", "--my_switch", "--direct_running_mode=multi_threading"),
        custom_options=("my_option", "--my_switch"),
    )
    assert settings.beam_args[:2] == ("--my_option", "7")


def test_runner_flags_default_to_every_core_locally_and_one_worker_remotely():
    assert runner_settings_from_flags().workers == (os.cpu_count() or 1)
    assert runner_settings_from_flags(workers=3, runner=None).workers == 3
    flink = runner_settings_from_flags(runner="FlinkRunner", flink_master="h:8081")
    assert flink.workers == 1 and flink.flink_master == "h:8081"
    with pytest.raises(RunnerError, match="no such runner flag: seq_len"):
        runner_settings_from_flags(seq_len=8)


def test_a_small_local_build_runs_one_worker_unless_the_user_chose_more():
    every_core = RunnerSettings(workers=8)
    assert fit_to_input(every_core, SMALL_INPUT_BYTES).workers == 1
    assert fit_to_input(every_core, SMALL_INPUT_BYTES + 1).workers == 8
    assert fit_to_input(every_core, None).workers == 8  # a size no file system said
    threads = RunnerSettings(workers=8, beam_args=("--direct_running_mode=multi_threading",))
    assert fit_to_input(threads, 10).workers == 8
    portable = RunnerSettings(runner="PortableRunner", workers=8, job_endpoint="localhost:1")
    assert fit_to_input(portable, 10).workers == 8


@pytest.mark.slow
def test_the_bundled_sample_builds_in_one_process_and_workers_given_stay(tmp_path):
    quick = ("--smoke", "--progress-every", "0", "--", "--dry_run=True")
    result = run_cli("build", "mmc4-pairs", "--output", str(tmp_path / "a"), *quick)
    assert "with DirectRunner (1 worker)" in result.stdout, result.stderr
    given = run_cli(
        "build", "mmc4-pairs", "--output", str(tmp_path / "b"), "--workers", "2", *quick
    )
    assert "with DirectRunner (2 workers)" in given.stdout, given.stderr


def test_a_direct_runner_dry_run_builds_the_pipeline_and_writes_nothing(tmp_path):
    output = tmp_path / "out"
    result = run_cli(
        "build", "mmc4-pairs", "--smoke", "--output", str(output), "--", "--dry_run=True"
    )
    assert result.returncode == 0, result.stderr
    assert "Dry run: the DirectRunner job was built" in result.stdout
    assert not output.exists()


def test_portable_spark_and_flink_flags_map_onto_beam_options():
    portable = pipeline_options(
        RunnerSettings(
            runner="PortableRunner",
            job_endpoint="jobs:8099",
            environment_type="external",
            environment_config="pool:50000",
        )
    )
    assert portable.view_as(PortableOptions).job_endpoint == "jobs:8099"
    assert portable.view_as(PortableOptions).environment_type == "EXTERNAL"
    assert portable.view_as(PortableOptions).environment_config == "pool:50000"

    spark = pipeline_options(
        RunnerSettings(
            runner="SparkRunner",
            spark_master_url="spark://m:7077",
            job_server_jar="/opt/beam-spark-job-server.jar",
            workers=4,
        )
    )
    assert spark.view_as(SparkRunnerOptions).spark_master_url == "spark://m:7077"
    assert (
        spark.view_as(SparkRunnerOptions).spark_job_server_jar == "/opt/beam-spark-job-server.jar"
    )
    assert int(spark.view_as(PortableOptions).sdk_worker_parallelism) == 4  # Beam keeps it a string

    flink = pipeline_options(
        RunnerSettings(
            runner="FlinkRunner",
            flink_master="m:8081",
            job_server_jar="/opt/beam-flink-job-server.jar",
        )
    )
    assert flink.view_as(FlinkRunnerOptions).flink_master == "m:8081"
    assert (
        flink.view_as(FlinkRunnerOptions).flink_job_server_jar == "/opt/beam-flink-job-server.jar"
    )


def test_dataflow_flags_stage_the_project_package_and_beam_args_win():
    options = pipeline_options(
        RunnerSettings(
            runner="DataflowRunner",
            project="p",
            region="europe-west4",
            temp_location="gs://b/tmp",
            beam_args=("--region=us-central1", "--s3_region_name=eu-west-1"),
        )
    )
    cloud = options.view_as(GoogleCloudOptions)
    assert (cloud.project, cloud.region, cloud.temp_location) == ("p", "us-central1", "gs://b/tmp")
    assert options.view_as(SetupOptions).setup_file == PYPROJECT
    assert options.view_as(S3Options).s3_region_name == "eu-west-1"


def test_a_loopback_run_is_local_whatever_the_case_of_its_environment():
    def portable(environment: str) -> RunnerSettings:
        return RunnerSettings("PortableRunner", job_endpoint="x:1", environment_type=environment)

    assert portable("loopback").local and portable("LOOPBACK").local  # they share this disk
    assert not portable("docker").local


def test_the_package_is_staged_only_to_workers_that_lack_it():
    def staged(**settings):
        return pipeline_options(RunnerSettings(**settings)).view_as(SetupOptions).setup_file

    assert staged(runner="SparkRunner") == PYPROJECT  # Beam's default DOCKER workers
    assert staged(runner="FlinkRunner", environment_type="PROCESS") == PYPROJECT
    assert (
        staged(runner="PortableRunner", job_endpoint="j:8099", environment_type="LOOPBACK") is None
    )
    assert (
        staged(
            runner="FlinkRunner", environment_type="EXTERNAL", environment_config="localhost:50000"
        )
        is None
    )
    assert (
        staged(
            runner="DataflowRunner",
            project="p",
            region="r",
            temp_location="gs://b/t",
            beam_args=("--sdk_container_image=europe-docker.pkg.dev/p/corpora/gpu:1",),
        )
        is None
    )
    assert staged(workers=2) is None


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(runner="PortableRunner"), "PortableRunner needs --job-endpoint"),
        (
            dict(runner="DataflowRunner", project="p"),
            "DataflowRunner needs --region, --temp-location",
        ),
        (
            dict(runner="DataflowRunner", project="p", region="r", temp_location="/tmp/x"),
            "must be a gs:// path",
        ),
        (dict(job_endpoint="jobs:8099"), "--job-endpoint does not apply to DirectRunner"),
        (
            dict(runner="FlinkRunner", spark_master_url="spark://m:7077"),
            "does not apply to FlinkRunner",
        ),
        (dict(environment_type="LOOPBACK"), "--environment-type does not apply to DirectRunner"),
        (
            dict(
                runner="DataflowRunner",
                project="p",
                region="r",
                temp_location="gs://b/t",
                environment_type="DOCKER",
            ),
            "--environment-type does not apply to DataflowRunner",
        ),
        (dict(runner="SamzaRunner"), "unknown runner"),
        (dict(workers=0), "at least 1"),
    ],
)
def test_runner_flags_that_cannot_work_are_refused(settings, message):
    with pytest.raises(RunnerError, match=message):
        RunnerSettings(**settings)


def test_required_flags_may_come_as_beam_options():
    RunnerSettings(runner="PortableRunner", beam_args=("--job_endpoint=jobs:8099",))


@pytest.mark.integration
def test_cli_reports_a_missing_job_endpoint_in_one_line(tmp_path):
    result = run_cli(
        "build", "mmc4-pairs", "--output", str(tmp_path / "out"), "--runner", "PortableRunner"
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "corpora: PortableRunner needs --job-endpoint"


def _shard_bytes(output: str) -> dict[str, bytes]:
    return {
        os.path.basename(p): open(p, "rb").read()
        for p in sorted(glob.glob(os.path.join(output, "*.tar")))
    }


@pytest.mark.slow
@pytest.mark.integration
def test_portable_runner_builds_the_same_bytes_as_the_direct_runner(
    tmp_path, image_server, tokenizer_path
):
    docs = write_mmc4(
        str(tmp_path / "docs.jsonl"), mmc4_documents(12, image_server.base, broken_every=7)
    )
    common = ("build", "mmc4-pairs", "--input", docs, "--tokenizer", tokenizer_path, *SMALL)

    direct = run_cli(*common, "--output", str(tmp_path / "direct"), "--workers", "2")
    assert direct.returncode == 0, direct.stderr
    expected = _shard_bytes(str(tmp_path / "direct"))
    assert len(expected) >= 3

    with job_service(str(tmp_path)) as endpoint, worker_pool(str(tmp_path)) as pool:
        loopback = run_cli(
            *common,
            "--output",
            str(tmp_path / "loopback"),
            "--runner",
            "PortableRunner",
            "--job-endpoint",
            endpoint,
            "--environment-type",
            "LOOPBACK",
        )
        assert loopback.returncode == 0, loopback.stderr
        external = run_cli(
            *common,
            "--output",
            str(tmp_path / "external"),
            "--runner",
            "PortableRunner",
            "--job-endpoint",
            endpoint,
            "--environment-type",
            "EXTERNAL",
            "--environment-config",
            pool,
        )
        assert external.returncode == 0, external.stderr

    for name in ("loopback", "external"):
        assert _shard_bytes(str(tmp_path / name)) == expected, name
        manifest, reference = (
            load_manifest(str(tmp_path / name)),
            load_manifest(str(tmp_path / "direct")),
        )
        assert manifest["shards"] == reference["shards"]
        assert manifest["funnel"] == reference["funnel"]
    assert "Funnel (pairs): input 24, kept" in loopback.stdout
    assert "Throughput over" in external.stdout


@pytest.mark.slow
def test_dataflow_job_is_built_offline_with_the_package_staged(tmp_path):
    docs = materialize_sample(str(tmp_path / "sample"))
    settings = corpus_settings(
        "mmc4-pairs", (docs,), "gs://fake-bucket/mmc4-pairs", seq_len=64, tokens_per_image=4
    )
    runner = RunnerSettings(
        runner="DataflowRunner",
        project="fake-project",
        region="us-central1",
        temp_location="gs://fake-bucket/tmp",
        beam_args=("--dry_run=True", "--no_auth"),
    )
    outcome = execute(settings, runner)

    assert outcome.manifest is None  # nothing ran, nothing was written
    job = outcome.result.job
    transforms = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    for stage in (
        "Read",
        "Fetch",
        "Tokenize",
        "PackSequences/Pack",
        "PackSequences/WriteShard",
        "Manifest",
        "Stats/WriteStatsJson",
    ):
        assert stage in transforms
    assert job.options.view_as(GoogleCloudOptions).project == "fake-project"
    assert job.root_staging_location.startswith("gs://fake-bucket/tmp")

    staged = {}
    for environment in job.proto_pipeline.components.environments.values():
        for artifact in environment.dependencies:
            from apache_beam.portability.api import beam_runner_api_pb2

            role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                artifact.role_payload
            )
            source = beam_runner_api_pb2.ArtifactFilePayload.FromString(artifact.type_payload)
            staged[role.staged_name] = source.path
    assert "workflow.tar.gz" in staged  # Beam installs this sdist on every worker
    with tarfile.open(staged["workflow.tar.gz"]) as sdist:
        names = sdist.getnames()
    assert any(n.endswith("pipelines/runners.py") for n in names)
    assert any(n.endswith("corpora/tokens/pack.py") for n in names)


@pytest.mark.slow
def test_dataflow_options_are_validated_before_anything_runs(tmp_path):
    settings = corpus_settings(
        "mmc4-pairs", ("x.jsonl",), str(tmp_path / "out"), seq_len=64, tokens_per_image=4
    )
    runner = RunnerSettings(
        runner="DataflowRunner",
        project="Not A Project!",
        region="us-central1",
        temp_location="gs://fake-bucket/tmp",
        beam_args=("--dry_run=True", "--no_auth"),
    )
    with pytest.raises(RunnerError, match="invalid options for DataflowRunner.*project"):
        execute(settings, runner)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.integration
def test_cli_dry_run_of_a_dataflow_job_touches_nothing(tmp_path):
    result = run_cli(
        "build",
        "mmc4-pairs",
        "--output",
        "gs://fake-bucket/mmc4-pairs",
        "--seq-len",
        "64",
        "--tokens-per-image",
        "4",
        "--runner",
        "DataflowRunner",
        "--project",
        "fake-project",
        "--region",
        "us-central1",
        "--temp-location",
        "gs://fake-bucket/tmp",
        "--",
        "--dry_run=True",
        "--no_auth",
    )
    assert result.returncode == 0, result.stderr
    assert (
        "Dry run: the DataflowRunner job was built and validated; nothing was run or written."
        in result.stdout
    )


def test_dask_runner_takes_beams_dask_options_and_runs_through_our_corrections():
    from apache_beam.runners.dask.dask_runner import DaskOptions

    from pipelines.dask_runner import DaskRunner
    from pipelines.runners import make_runner

    settings = runner_settings_from_flags(
        ["--dask_client_address=tcp://10.0.0.5:8786"], runner="DaskRunner"
    )
    assert settings.workers == 1 and not settings.local
    options = pipeline_options(settings)
    assert options.view_as(StandardOptions).runner == "DaskRunner"
    assert options.view_as(DaskOptions).address == "tcp://10.0.0.5:8786"
    assert isinstance(make_runner(options), DaskRunner)
    with pytest.raises(RunnerError, match="did you mean --dask_client_address"):
        RunnerSettings(runner="DaskRunner", beam_args=("--dask_client_adress=tcp://h:1",))


@pytest.mark.parametrize(
    "runner, flag, master, job_server",
    [
        ("SparkRunner", "--spark-master-url", "spark://spark-master:7077", "SparkJarJobServer"),
        ("FlinkRunner", "--flink-master", "flink-jobmanager:8081", "FlinkJarJobServer"),
    ],
)
def test_a_job_server_jar_the_user_has_is_run_as_it_is(
    runner, flag, master, job_server, tmp_path, monkeypatch
):
    """Beam's own job server for the runner is started from the given jar:
    nothing is downloaded (the command runs the local file)."""
    import importlib
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # Beam's artifacts folder
    jar = tmp_path / "job-server.jar"
    jar.write_bytes(b"PK")
    field = "spark_master_url" if runner == "SparkRunner" else "flink_master"
    settings = RunnerSettings(runner=runner, job_server_jar=str(jar), **{field: master})
    options = pipeline_options(settings)
    module = "spark_runner" if runner == "SparkRunner" else "flink_runner"
    server_class = getattr(
        importlib.import_module(f"apache_beam.runners.portability.{module}"), job_server
    )
    command, endpoint = server_class(options).subprocess_cmd_and_endpoint()
    assert command[command.index("-jar") + 1] == str(jar)
    assert command[command.index(flag) + 1] == master
    assert endpoint.startswith("localhost:")


def test_the_docs_name_only_job_server_jars_beam_publishes():
    import re

    import apache_beam
    from apache_beam.utils.subprocess_server import JavaJarServer

    with open(os.path.join(os.path.dirname(PYPROJECT), "docs", "runners.md")) as handle:
        named = set(re.findall(r"beam-runners-[a-z0-9.-]+-job-server-[0-9.]+\.jar", handle.read()))
    published = {
        JavaJarServer.path_to_beam_jar(f":runners:{target}:job-server:shadowJar").rsplit("/", 1)[1]
        for target in ["spark:3"]
        + [f"flink:{version}" for version in FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS]
    }
    assert named and named <= published, named - published
    assert all(apache_beam.__version__ in jar for jar in named)
