"""pipelines.dask_runner on a dask.distributed scheduler and two worker
processes started on loopback: one test per correction of Beam's DaskRunner
(each fails on Beam's own runner), then every corpus of the byte-identity
test built through ``--runner DaskRunner`` against DirectRunner's bytes."""

from __future__ import annotations

import collections
import json
import os
import uuid

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.windowed_value import WindowedValue

from pipelines.dask_runner import DaskRunner
from tests import fixtures
from tests.beam_services import dask_cluster
from tests.cli.test_build_bytes import BUILDS, PORT, build_digests
from tests.helpers import SMALL_BUILD, load_manifest, run_cli
from tests.servers import ImageServer

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with dask_cluster(str(tmp_path_factory.mktemp("dask"))) as address:
        yield address


def run(cluster: str, build) -> None:
    options = PipelineOptions([f"--dask_client_address={cluster}"])
    pipeline = beam.Pipeline(runner=DaskRunner(), options=options)
    build(pipeline)
    pipeline.run().wait_until_finish()


def written(folder) -> list[str]:
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


class _Touch:
    """Writes one empty file per element into ``folder`` (named by the element)."""

    def __init__(self, folder: str):
        self._folder = folder

    def __call__(self, element) -> None:
        os.makedirs(self._folder, exist_ok=True)
        open(os.path.join(self._folder, str(element)), "w").close()


class _EvenOdd(beam.DoFn):
    def process(self, number: int):
        yield number if number % 2 == 0 else beam.pvalue.TaggedOutput("odd", number)


def test_each_output_of_a_multi_output_pardo_gets_its_own_tag(cluster, tmp_path):
    # Beam's runner hands every consumer every tag's elements
    def build(pipeline):
        split = (
            pipeline
            | beam.Create(range(6))
            | beam.ParDo(_EvenOdd()).with_outputs("odd", main="even")
        )
        even = split.even | "Even" >> beam.Map(lambda number: f"even-{number}")
        odd = split.odd | "Odd" >> beam.Map(lambda number: f"odd-{number}")
        _ = (even, odd) | beam.Flatten() | beam.Map(_Touch(str(tmp_path / "out")))

    run(cluster, build)
    assert written(tmp_path / "out") == ["even-0", "even-2", "even-4", "odd-1", "odd-3", "odd-5"]


def test_every_sink_runs_not_only_the_last(cluster, tmp_path):
    # Beam's runner computes only the last transform's bag
    def build(pipeline):
        numbers = pipeline | beam.Create([1, 2])
        _ = numbers | "First" >> beam.Map(_Touch(str(tmp_path / "first")))
        _ = numbers | "Second" >> beam.Map(_Touch(str(tmp_path / "second")))

    run(cluster, build)
    assert written(tmp_path / "first") == ["1", "2"]
    assert written(tmp_path / "second") == ["1", "2"]


class _CountInFinishBundle(beam.DoFn):
    def start_bundle(self):
        self._seen = 0

    def process(self, _):
        self._seen += 1
        return []

    def finish_bundle(self):
        yield WindowedValue(self._seen, 0, [GlobalWindow()])


def test_what_finish_bundle_emits_is_kept(cluster, tmp_path):
    # Beam's runner gathers a bundle's outputs before finish_bundle runs
    def build(pipeline):
        _ = (
            pipeline
            | beam.Create(range(10))
            | beam.ParDo(_CountInFinishBundle())
            | beam.CombineGlobally(sum)
            | beam.Map(_Touch(str(tmp_path / "total")))
        )

    run(cluster, build)
    assert written(tmp_path / "total") == ["10"]


def test_reshuffle_spreads_one_partition_over_both_workers(cluster, tmp_path):
    # Beam's runner makes Reshuffle a no-op: eight elements of one partition, one worker
    def build(pipeline):
        _ = (
            pipeline
            | beam.Create(range(8))
            | beam.Reshuffle()
            | beam.Map(lambda number: f"{os.getpid()}-{number}")
            | beam.Map(_Touch(str(tmp_path / "ran")))
        )

    run(cluster, build)
    ran = written(tmp_path / "ran")
    assert sorted(int(name.split("-")[1]) for name in ran) == list(range(8))
    assert len({name.split("-")[0] for name in ran}) == 2


def test_a_side_input_is_computed_once_for_all_its_readers(cluster, tmp_path):
    # Beam's runner computes a side input's bag again inside each task that reads it
    made = str(tmp_path / "made")

    def make(number):
        _Touch(made)(f"{number}-{uuid.uuid4().hex}")
        return number

    def build(pipeline):
        side = pipeline | "Side" >> beam.Create([1, 2, 3]) | "Make" >> beam.Map(make)
        main = pipeline | "Main" >> beam.Create(range(4)) | beam.Reshuffle()
        total = beam.pvalue.AsList(side)
        first = main | "A" >> beam.Map(lambda n, side: f"a{n}-{sum(side)}", total)
        second = main | "B" >> beam.Map(lambda n, side: f"b{n}-{sum(side)}", total)
        _ = (first, second) | beam.Flatten() | beam.Map(_Touch(str(tmp_path / "out")))

    run(cluster, build)
    assert sorted(name.split("-")[0] for name in written(made)) == ["1", "2", "3"]
    assert written(tmp_path / "out") == [f"{x}{n}-6" for x in "ab" for n in range(4)]


def test_a_primitive_without_translation_stops_the_run(cluster):
    # Beam's runner passes such a transform's input through, silently
    with pytest.raises(NotImplementedError, match="'Impulse'.*no translation"):
        run(cluster, lambda pipeline: pipeline | "Impulse" >> beam.Impulse())


@pytest.fixture(scope="module")
def server():
    with ImageServer(port=PORT) as shared:
        yield shared


def _markers(output: str) -> list[str]:
    splits = os.path.join(output, "image-store", "splits")
    return sorted(
        split
        for split in written(splits)
        if os.path.exists(os.path.join(splits, split, "complete.json"))
    )


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_corpus_builds_on_dask_to_direct_runner_bytes(name, cluster, server, tmp_path):
    direct = build_digests(name, BUILDS[name], str(tmp_path / "direct"), server)
    on_dask = build_digests(
        name,
        BUILDS[name],
        str(tmp_path / "dask"),
        server,
        "--runner",
        "DaskRunner",
        "--",
        f"--dask_client_address={cluster}",
    )
    assert on_dask == direct
    output = str(tmp_path / "dask" / "out")
    funnel = load_manifest(output)["funnel"]
    assert funnel["input"] == funnel["kept"] + sum(funnel["dropped"].values())
    assert _markers(output) == _markers(str(tmp_path / "direct" / "out"))
    if not name.startswith("c4"):  # c4 has no images
        assert _markers(output) == sorted(os.listdir(tmp_path / "dask" / "input"))


def test_fetch_batches_run_on_both_workers(cluster, tmp_path):
    """400 rows: five record batches, fetched on both workers, to DirectRunner's bytes."""
    from distributed import Client, get_task_stream

    with ImageServer() as images:
        rows = [
            fixtures._coyo_row(
                9100000000000 + index,
                fixtures._image(images, f"photo-{index}", 64, 48),
                f"A generated caption, number {index}, about a photograph.",
            )
            for index in range(400)
        ]
        given = fixtures.write_coyo_parquet(str(tmp_path / "part-00000.parquet"), rows)
        direct = run_cli(
            "build", "coyo", "--input", given, "--output", str(tmp_path / "direct"), *SMALL_BUILD
        )
        assert direct.returncode == 0, direct.stderr
        with Client(cluster) as client, get_task_stream(client) as stream:
            result = run_cli(
                "build",
                "coyo",
                "--input",
                given,
                "--output",
                str(tmp_path / "dask"),
                *SMALL_BUILD,
                "--runner",
                "DaskRunner",
                "--",
                f"--dask_client_address={cluster}",
            )
        assert result.returncode == 0, result.stderr
    fetched_on = collections.Counter(
        task["worker"] for task in stream.data if "pardo-Fetch" in str(task["key"])
    )
    assert len(fetched_on) == 2, fetched_on

    def shards(output):
        return {
            file: open(os.path.join(output, file), "rb").read()
            for file in os.listdir(output)
            if file.endswith(".tar") or file == "stats.json"
        }

    assert shards(str(tmp_path / "dask")) == shards(str(tmp_path / "direct"))
    manifest = load_manifest(str(tmp_path / "dask"))
    assert manifest["funnel"]["kept"] == 400
    assert (
        json.load(
            open(
                tmp_path
                / "dask"
                / "image-store"
                / "splits"
                / "part-00000.parquet"
                / "complete.json"
            )
        )["urls"]
        == 400
    )
