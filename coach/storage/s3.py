"""An `s3://bucket/prefix` checkpoint store (AWS, MinIO, Ceph): checkpoints every node of a cluster reaches.

Step `tag` of job `job` lives under the key prefix `<prefix>/<job>/<tag>`: objects `<tag>.params` and
`<tag>.states`, then the completion marker `<tag>.complete`, which worker rank 0 uploads last
(coach_functions/checkpoints.py). A checkpoint without its marker is never complete, so it is never loaded, and a later
prune deletes it like any other old one.

The endpoint and the credentials come from the environment only, as boto3 reads them (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3), never from a job file; the
functions read the same variables. A custom endpoint (MinIO, Ceph, a test server) is addressed path-style.

Errors are values here: `check()` answers a one-line problem, `complete()` answers False, `prune()` deletes what
it can (the next prune deletes the rest). Side effects: network calls to the store; prune deletes objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

from coach.storage.checkpoints import SUFFIXES, _newest

MARKER = ".complete"  # the completion marker's suffix; coach_functions/checkpoints.py uploads it last
CONNECT_TIMEOUT_S = 3.0  # a store that does not answer fails the call, never hangs it
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3  # botocore's standard retry mode: the first try and two retries
MAX_KEYS = 1000  # the most keys one ListObjectsV2 page holds, and one DeleteObjects request takes
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")  # botocore's own, most specific first


@dataclass(frozen=True)
class S3Location:
    bucket: str  # the bucket's name
    key: str  # a key or key prefix inside it, without a leading or trailing slash ("" for the bucket's root)


def parse_s3_url(url: str) -> S3Location:
    """`s3://bucket/some/prefix` -> S3Location; ValueError (one line) for anything else."""
    parsed = urlparse(url)
    if parsed.scheme != "s3":
        raise ValueError("not an s3:// URL")
    if not parsed.netloc or "@" in parsed.netloc or ":" in parsed.netloc:
        raise ValueError("no bucket (expected s3://bucket/prefix)")
    if parsed.query or parsed.fragment or parsed.params:
        raise ValueError("an s3:// URL has no query or fragment")
    key = parsed.path.strip("/")
    if "//" in key:
        raise ValueError("an empty folder name (//) in the prefix")
    return S3Location(parsed.netloc, key)


def client_config():
    """botocore settings: bounded timeouts and retries; path-style and only-required checksums for a custom
    endpoint (MinIO and Ceph need path-style, and older ones refuse the checksums newer boto3 adds by default)."""
    from botocore.config import Config

    bounded = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                     retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"})
    if not any(os.environ.get(name) for name in ENDPOINT_VARIABLES):
        return bounded
    return bounded.merge(Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                                response_checksum_validation="when_required"))


def new_client():
    """An S3 client configured from the environment alone."""
    import boto3

    return boto3.session.Session().client("s3", config=client_config())


def describe(error: Exception, bucket: str) -> str:
    """One line for what an S3 call raised: a missing bucket, refused access, an endpoint that cannot be reached."""
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(error, NoCredentialsError):
        return "no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", "?"))
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket"):
            return f"bucket {bucket!r} does not exist"
        if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch") or status == 403:
            return f"access denied to bucket {bucket!r} ({code})"
        message = error.response.get("Error", {}).get("Message") or ""
        return " ".join(f"{code} {message} (HTTP {status})".split())
    return " ".join(f"{type(error).__name__}: {error}".split())


def _errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return BotoCoreError, ClientError


class S3CheckpointStore:
    """CheckpointStore over one bucket and key prefix; prefixes it hands out are `s3://` URLs."""

    def __init__(self, url: str, client=None, page_keys: int = MAX_KEYS):
        self.location = parse_s3_url(url)
        self._client = client if client is not None else new_client()
        self.page_keys = page_keys  # keys per listed page and per deleted batch (smaller only in tests)

    @property
    def url(self) -> str:
        return f"s3://{self.location.bucket}/{self.location.key}".rstrip("/")

    def _folder(self, job: str) -> str:
        """The key prefix of a job's objects, ending in a slash."""
        return f"{self.location.key}/{job}/" if self.location.key else f"{job}/"

    def check(self) -> str | None:
        """None when the bucket answers; else one line saying why not (asked once, before any job starts)."""
        try:
            self._client.head_bucket(Bucket=self.location.bucket)
        except _errors() as error:
            return describe(error, self.location.bucket)
        return None

    def prefix(self, job: str, tag: str) -> str:
        """`s3://bucket/prefix/<job>/<tag>`; rank 0 uploads `<tag>.params`, `<tag>.states`, `<tag>.complete`."""
        return f"s3://{self.location.bucket}/{self._folder(job)}{tag}"

    def locate(self, job: str, prefix: str) -> str:
        """A logged prefix is where it was: objects in a bucket do not move with the run folder."""
        return prefix

    def complete(self, prefix: str | None) -> bool:
        """True when the marker and both objects are there (one listing); False on any error."""
        if not prefix or not prefix.startswith("s3://"):
            return False
        try:
            where = parse_s3_url(prefix)
            names = set(self._keys(where.bucket, where.key + "."))
        except (ValueError,) + _errors():
            return False
        return all(where.key + suffix in names for suffix in SUFFIXES + (MARKER,))

    def newest_complete(self, job: str) -> str | None:
        """The newest step of `job` whose marker and objects are all there, or None (also when the store fails)."""
        folder = self._folder(job)
        try:
            names = [key[len(folder):] for key in self._keys(self.location.bucket, folder)]
        except _errors():
            return None
        found: dict[str, set[str]] = {}
        for name in names:
            for suffix in SUFFIXES + (MARKER,):
                if name.endswith(suffix) and "/" not in name:
                    found.setdefault(name[: -len(suffix)], set()).add(suffix)
        newest = _newest(tag for tag, suffixes in found.items() if len(suffixes) == len(SUFFIXES) + 1)
        return None if newest is None else self.prefix(job, newest)

    def prune(self, job: str, keep: str) -> int:
        """Delete the job's objects other than `keep`'s, in batches; returns how many were deleted. An error
        leaves the rest for the next prune (which deletes everything but its own `keep`)."""
        folder = self._folder(job)
        try:
            kept = parse_s3_url(keep)
        except ValueError:
            return 0
        if kept.bucket != self.location.bucket or not kept.key.startswith(folder):
            return 0  # not one of this job's prefixes: deleting "all but it" would delete everything
        removed = 0
        try:
            old = [key for key in self._keys(self.location.bucket, folder) if not key.startswith(kept.key + ".")]
            for start in range(0, len(old), self.page_keys):
                batch = old[start : start + self.page_keys]
                answer = self._client.delete_objects(
                    Bucket=self.location.bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True})
                removed += len(batch) - len(answer.get("Errors", []))
        except _errors():
            pass
        return removed

    def _keys(self, bucket: str, prefix: str):
        """The key of every object under `prefix`, page by page."""
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": self.page_keys})
        for page in pages:
            for item in page.get("Contents", ()):
                yield item["Key"]

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
