"""Inputs and outputs on other storage: s3:// through Beam's FileSystems
against a real S3 API server (moto) on loopback; fsspec protocols (hf://)
for inputs."""

from __future__ import annotations

import dataclasses
import json

import boto3
import fsspec
import pytest
from google.auth.credentials import AnonymousCredentials

from corpora.config.settings import corpus_settings
from corpora.lock.output import Holder
from pipelines import storage
from pipelines.launch import execute
from pipelines.runners import RunnerSettings
from tests.beam_services import gcs_server, s3_server
from tests.generated import mmc4_documents, write_mmc4
from tests.helpers import read_tar, run_cli


def test_paths_are_routed_to_beam_or_fsspec():
    assert not storage.uses_fsspec("/data/docs.jsonl")
    assert not storage.uses_fsspec("s3://bucket/docs.jsonl")
    assert not storage.uses_fsspec("gs://bucket/docs.jsonl")
    assert storage.uses_fsspec("hf://datasets/kakaobrain/coyo-700m/data/*.parquet")
    assert storage.uses_fsspec("memory://corpus/docs.jsonl")


def test_fsspec_inputs_are_listed_and_opened(tmp_path):
    with fsspec.open("memory://listing/b.jsonl", "wb") as handle:
        handle.write(b"second\n")
    with fsspec.open("memory://listing/a.jsonl", "wb") as handle:
        handle.write(b"first\n")
    assert storage.match("memory://listing/*.jsonl") == [
        "memory:///listing/a.jsonl",
        "memory:///listing/b.jsonl",
    ]
    readable = storage.FsspecFile("memory:///listing/a.jsonl")
    assert readable.metadata.path == "memory:///listing/a.jsonl"
    with readable.open() as stream:
        assert stream.read() == b"first\n"


def test_manifest_style_writes_are_atomic_and_replace(tmp_path):
    path = str(tmp_path / "manifest.json")
    storage.write_json(path, {"shards": 1})
    storage.write_json(path, {"shards": 2})
    assert json.loads(open(path).read()) == {"shards": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]  # no temporary left


@pytest.mark.slow
def test_build_reads_an_fsspec_input_in_a_beam_pipeline(tmp_path, image_server, tokenizer_path):
    local = write_mmc4(str(tmp_path / "docs.jsonl"), mmc4_documents(3, image_server.base))
    with open(local, "rb") as source, fsspec.open("memory://hub/docs.jsonl", "wb") as target:
        target.write(source.read())
    settings = corpus_settings(
        "mmc4-pairs",
        ("memory://hub/*.jsonl",),
        str(tmp_path / "out"),
        tokenizer=tokenizer_path,
        seq_len=64,
        tokens_per_image=4,
        samples_per_shard=100,
    )
    settings = settings.replace(
        fetch=dataclasses.replace(settings.fetch, image_size=32, allow_private_urls=True)
    )
    outcome = execute(settings, RunnerSettings(workers=1))
    assert outcome.manifest["funnel"] == {"unit": "pair", "input": 6, "kept": 6, "dropped": {}}
    samples = read_tar(str(tmp_path / "out" / "mmc4-pairs-000000.tar"))
    documents = [doc for sample in samples for doc in sample["json"]["documents"]]
    assert len(documents) == 6
    assert {doc["meta"]["source_file"] for doc in documents} == {"docs.jsonl"}
    assert outcome.counters["images.ok"] == 6


class Interrupted(Exception):
    pass


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "stats.json")
    storage.write_atomically(path, b"old")
    with pytest.raises(Interrupted):
        with storage.create_atomically(path) as stream:
            stream.write(b"half of the new")
            raise Interrupted
    assert open(path, "rb").read() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["stats.json"]


def test_temporary_names_are_unique_per_write(tmp_path):
    path = str(tmp_path / "shard.tar")
    with storage.create_atomically(path) as first, storage.create_atomically(path) as second:
        first.write(b"first")
        second.write(b"second")
        assert len(list(tmp_path.glob(f"shard.tar{storage.TEMPORARY}*"))) == 2
    assert open(path, "rb").read() == b"first"  # the write that finished last wins
    assert [p.name for p in tmp_path.iterdir()] == ["shard.tar"]


@pytest.mark.slow
@pytest.mark.integration
def test_an_object_store_gets_whole_objects_only():
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    with s3_server("whole") as options:
        FileSystems.set_options(PipelineOptions([f"--{k}={v}" for k, v in options.items()]))
        client = boto3.client(
            "s3",
            endpoint_url=options["s3_endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        storage.write_atomically("s3://whole/out/stats.json", b'{"a": 1}')
        with pytest.raises(Interrupted):
            with storage.create_atomically("s3://whole/out/manifest.json") as stream:
                stream.write(b'{"half": ')
                raise Interrupted
        listed = client.list_objects_v2(Bucket="whole", Prefix="out/")["Contents"]
        assert [o["Key"] for o in listed] == ["out/stats.json"]  # nothing else, no temporary
        body = client.get_object(Bucket="whole", Key="out/stats.json")["Body"].read()
        assert body == b'{"a": 1}'


@pytest.mark.slow
@pytest.mark.integration
def test_s3_round_trip_reads_inputs_from_and_writes_shards_to_a_bucket(
    tmp_path, image_server, tokenizer_path
):
    docs = write_mmc4(
        str(tmp_path / "docs.jsonl"), mmc4_documents(5, image_server.base, broken_every=4)
    )
    with s3_server("corpus") as options:
        client = boto3.client(
            "s3",
            endpoint_url=options["s3_endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.upload_file(docs, "corpus", "mmc4/docs.jsonl")
        args = [
            "build",
            "mmc4-pairs",
            "--input",
            "s3://corpus/mmc4/",
            "--output",
            "s3://corpus/built",
            "--tokenizer",
            tokenizer_path,
            "--seq-len",
            "64",
            "--tokens-per-image",
            "4",
            "--image-size",
            "32",
            "--samples-per-shard",
            "2",
            "--allow-private-urls",
            "--workers",
            "2",
            "--progress-every",
            "0",
            "--",
            *(f"--{key}={value}" for key, value in options.items()),
        ]
        result = run_cli(*args)  # two worker processes: the S3 options must reach them
        assert result.returncode == 0, result.stderr

        keys = sorted(
            o["Key"] for o in client.list_objects_v2(Bucket="corpus", Prefix="built/")["Contents"]
        )
        manifest = json.loads(
            client.get_object(Bucket="corpus", Key="built/manifest.json")["Body"].read()
        )
        shard_keys = [k for k in keys if k.endswith(".tar") and "/image-store/" not in k]
        assert shard_keys == [f"built/{s['path']}" for s in manifest["shards"]]
        # the image store is in the bucket too (s3fs, with the --s3_* options; issue 31)
        assert "built/image-store/splits/docs.jsonl/complete.json" in keys
        assert manifest["settings"]["store"]["uri"] == "s3://corpus/built/image-store"
        assert not [k for k in keys if ".tmp-" in k]
        funnel = manifest["funnel"]
        assert (
            funnel["input"] == 10 and funnel["dropped"] == {"http_404": 2} and funnel["kept"] == 8
        )
        documents = 0
        for key in shard_keys:
            data = client.get_object(Bucket="corpus", Key=key)["Body"].read()
            path = tmp_path / key.replace("/", "_")
            path.write_bytes(data)
            samples = read_tar(str(path))
            documents += sum(len(s["json"]["documents"]) for s in samples)
            assert all(s["input_ids.npy"].shape == (64,) for s in samples)
        assert documents == 8

        again = run_cli(*args)  # the same command on a finished bucket build: nothing rewritten
        assert again.returncode == 0, again.stderr
        assert f"Resumed: {len(shard_keys)} shard(s) were already complete" in again.stdout
        assert "built/corpora.lock" not in keys  # the lease was given back

        # a build holding the bucket output's lease: a second build exits 2 naming it
        holder = Holder.here()
        client.put_object(Bucket="corpus", Key="built/corpora.lock", Body=holder.to_bytes())
        locked = run_cli(*args)
        assert locked.returncode == 2
        assert locked.stderr.strip().splitlines() == [
            f"corpora: s3://corpus/built/corpora.lock is held by another build "
            f"({holder.describe()}); wait for it to finish, or remove "
            "s3://corpus/built/corpora.lock if no build is writing this output"
        ]


@pytest.mark.slow
@pytest.mark.integration
def test_a_store_in_a_bucket_serves_a_rebuild_with_another_seq_len_without_a_request(
    tmp_path, image_server, tokenizer_path
):
    """The image store of an s3:// output is written there through s3fs, its
    tars read back by ranged reads (by keyword: s3fs's second parameter of
    ``cat_file`` is ``version_id``); a rebuild from it fetches nothing."""
    docs = write_mmc4(
        str(tmp_path / "docs.jsonl"), mmc4_documents(6, image_server.base, broken_every=4)
    )
    with s3_server("corpus") as options:

        def build(output: str, seq_len: str, *extra: str):
            return run_cli(
                "build", "mmc4-pairs", "--input", docs, "--output", output,
                "--tokenizer", tokenizer_path, "--seq-len", seq_len, "--tokens-per-image", "4",
                "--image-size", "32", "--samples-per-shard", "2", "--allow-private-urls",
                "--workers", "2", "--progress-every", "0", *extra,
                "--", *(f"--{key}={value}" for key, value in options.items()),
            )  # fmt: skip

        first = build("s3://corpus/first", "64")
        assert first.returncode == 0, first.stderr
        fetched = [path for path in image_server.requests if path != "/robots.txt"]
        assert fetched
        image_server.requests.clear()
        again = build("s3://corpus/again", "48", "--image-store", "s3://corpus/first/image-store")
        assert again.returncode == 0, again.stderr
        assert [path for path in image_server.requests if path != "/robots.txt"] == []
        client = boto3.client(
            "s3",
            endpoint_url=options["s3_endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        manifests = [
            json.loads(
                client.get_object(Bucket="corpus", Key=f"{name}/manifest.json")["Body"].read()
            )
            for name in ("first", "again")
        ]
    assert [m["totals"]["images"] for m in manifests] == [manifests[0]["totals"]["images"]] * 2
    assert manifests[0]["totals"]["images"] > 0
    assert manifests[1]["funnel"]["dropped"] == manifests[0]["funnel"]["dropped"]
    assert manifests[1]["images_arrived"].get("fetched", 0) == 0, manifests[1]["images_arrived"]


def test_s3_options_reach_botocore_through_the_environment():
    from pipelines.runners import S3_ENVIRONMENT, s3_environment

    given = {name: f"value-{index}" for index, name in enumerate(S3_ENVIRONMENT)}
    assert s3_environment(given) == {
        "AWS_ACCESS_KEY_ID": "value-0",
        "AWS_SECRET_ACCESS_KEY": "value-1",
        "AWS_SESSION_TOKEN": "value-2",
        "AWS_DEFAULT_REGION": "value-3",
        "AWS_ENDPOINT_URL_S3": "value-4",
    }


@pytest.mark.slow
@pytest.mark.integration
def test_a_store_in_a_gcs_bucket_serves_a_rebuild_with_another_seq_len_without_a_request(
    tmp_path, image_server, tokenizer_path
):
    """The same on fake-gcs-server: the store of a gs:// output is written
    there through gcsfs and a rebuild from it fetches nothing."""
    from google.cloud import storage as gcs

    docs = write_mmc4(
        str(tmp_path / "docs.jsonl"), mmc4_documents(6, image_server.base, broken_every=4)
    )
    with gcs_server("corpus", str(tmp_path)) as environment:

        def build(output: str, seq_len: str, *extra: str):
            return run_cli(
                "build", "mmc4-pairs", "--input", docs, "--output", output,
                "--tokenizer", tokenizer_path, "--seq-len", seq_len, "--tokens-per-image", "4",
                "--image-size", "32", "--samples-per-shard", "2", "--allow-private-urls",
                "--workers", "2", "--progress-every", "0", *extra, env=environment,
            )  # fmt: skip

        first = build("gs://corpus/first", "64")
        assert first.returncode == 0, first.stderr
        fetched = [path for path in image_server.requests if path != "/robots.txt"]
        assert fetched
        image_server.requests.clear()
        again = build("gs://corpus/again", "48", "--image-store", "gs://corpus/first/image-store")
        assert again.returncode == 0, again.stderr
        assert [path for path in image_server.requests if path != "/robots.txt"] == []

        client = gcs.Client(
            project="test",
            client_options={"api_endpoint": environment["STORAGE_EMULATOR_HOST"]},
            credentials=AnonymousCredentials(),
        )
        names = sorted(blob.name for blob in client.list_blobs("corpus"))
        manifests = [
            json.loads(client.bucket("corpus").blob(f"{name}/manifest.json").download_as_bytes())
            for name in ("first", "again")
        ]
    assert "first/image-store/splits/docs.jsonl/complete.json" in names
    assert not [name for name in names if ".tmp-" in name]
    assert manifests[0]["settings"]["store"]["uri"] == "gs://corpus/first/image-store"
    assert [m["totals"]["images"] for m in manifests] == [manifests[0]["totals"]["images"]] * 2
    assert manifests[0]["totals"]["images"] > 0
    assert manifests[1]["funnel"]["dropped"] == manifests[0]["funnel"]["dropped"]
    assert manifests[1]["images_arrived"].get("fetched", 0) == 0, manifests[1]["images_arrived"]
