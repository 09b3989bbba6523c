"""Lease objects: the output lock (:mod:`corpora.lock.output`) on an object store.

A lease is created only if none exists (S3 ``If-None-Match: *``, GCS
``ifGenerationMatch=0``), so of two builds exactly one gets it, and deleted
only if it is still the generation that was judged (S3 ``If-Match`` on the
ETag, GCS ``ifGenerationMatch``), so a build never deletes a lease that
another build wrote since. The store must honour conditional writes (AWS S3
has since 2024; GCS always has). Cloud clients are imported only here, when
an output is on their store.

Each class answers what :class:`corpora.lock.OutputLock` asks of a store:
``create(data)`` (a version, or ``None`` when a lease exists), ``read()``
(``(data, version)`` or ``None``) and ``delete(version)`` (whether it deleted).
"""

from __future__ import annotations

from typing import Any, Mapping

from corpora.config.extras import missing_extra
from corpora.lock import LOCK_NAME, LockError


def _bucket_and_key(output: str) -> tuple[str, str]:
    bucket, _, prefix = output.split("://", 1)[1].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/{LOCK_NAME}" if prefix else LOCK_NAME


class S3Lease:
    """A lease object on S3; ``options`` are Beam's S3 options (``s3_endpoint_url`` …)."""

    OPTIONS = {
        "s3_endpoint_url": "endpoint_url",
        "s3_access_key_id": "aws_access_key_id",
        "s3_secret_access_key": "aws_secret_access_key",
        "s3_session_token": "aws_session_token",
        "s3_region_name": "region_name",
        "s3_api_version": "api_version",
        "s3_verify": "verify",
    }

    def __init__(self, output: str, options: Mapping[str, Any]):
        try:
            import boto3
            from botocore.exceptions import ClientError
        except ImportError as exc:
            raise LockError(str(missing_extra("s3", "an s3:// output", exc))) from None
        self.bucket, self.key = _bucket_and_key(output)
        self.location = f"s3://{self.bucket}/{self.key}"
        arguments = {name: options[key] for key, name in self.OPTIONS.items() if options.get(key)}
        if options.get("s3_disable_ssl"):
            arguments["use_ssl"] = False
        self.client = boto3.client("s3", **arguments)
        self.ClientError = ClientError

    def _code(self, exc) -> str:
        return str(exc.response.get("Error", {}).get("Code", ""))

    def create(self, data: bytes) -> Any | None:
        try:
            reply = self.client.put_object(
                Bucket=self.bucket, Key=self.key, Body=data, IfNoneMatch="*"
            )
        except self.ClientError as exc:
            if self._code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return None
            raise
        return reply["ETag"]

    def read(self) -> tuple[bytes, Any] | None:
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except self.ClientError as exc:
            if self._code(exc) in ("NoSuchKey", "404"):
                return None
            raise
        return reply["Body"].read(), reply["ETag"]

    def delete(self, version: Any) -> bool:
        # Checked first as well: some S3-compatible stores ignore If-Match on a delete.
        found = self.read()
        if found is None or found[1] != version:
            return False
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=version)
        except self.ClientError as exc:
            if self._code(exc) in ("PreconditionFailed", "412", "NoSuchKey", "404"):
                return False
            raise
        return True


class GcsLease:
    """A lease object on Google Cloud Storage (application default credentials)."""

    def __init__(self, output: str):
        try:
            from google.api_core import exceptions
            from google.cloud import storage
        except ImportError as exc:
            raise LockError(str(missing_extra("dataflow", "a gs:// output", exc))) from None
        bucket, key = _bucket_and_key(output)
        self.location = f"gs://{bucket}/{key}"
        self.bucket = storage.Client().bucket(bucket)
        self.key = key
        self.exceptions = exceptions

    def create(self, data: bytes) -> Any | None:
        blob = self.bucket.blob(self.key)
        try:
            blob.upload_from_string(data, if_generation_match=0)
        except self.exceptions.PreconditionFailed:
            return None
        return blob.generation

    def read(self) -> tuple[bytes, Any] | None:
        blob = self.bucket.get_blob(self.key)
        if blob is None:
            return None
        try:
            return blob.download_as_bytes(if_generation_match=blob.generation), blob.generation
        except (self.exceptions.NotFound, self.exceptions.PreconditionFailed):
            return None  # replaced or removed since it was listed: look again

    def delete(self, version: Any) -> bool:
        # Checked first as well: emulators (fake-gcs-server) ignore the precondition on a delete.
        blob = self.bucket.get_blob(self.key)
        if blob is None or blob.generation != version:
            return False
        try:
            blob.delete(if_generation_match=version)
        except (self.exceptions.NotFound, self.exceptions.PreconditionFailed):
            return False
        return True
