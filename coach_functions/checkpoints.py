"""The worker function's checkpoint I/O: a prefix is a file path on this machine or an `s3://bucket/key` URL.

A file checkpoint is `<prefix>.params` and `<prefix>.states`, each written to a temp file and renamed into place.
An s3 checkpoint is the objects `<key>.params` and `<key>.states`, then the completion marker `<key>.complete`,
uploaded last: the controller's store (coach/storage/s3.py) calls a checkpoint complete only with its marker, and
this side refuses to load one without it. MXNet saves and loads file paths only, so s3 objects pass through a
temp folder that is deleted afterwards.

The store's endpoint and credentials come from the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_DEFAULT_REGION, AWS_ENDPOINT_URL or AWS_ENDPOINT_URL_S3), as boto3 reads them; timeouts and retries are
bounded, so a store that fails makes the epoch fail with one line (CheckpointError), never hang.
Side effects: writes files or objects, and temp files that it deletes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import urlparse

import boto3  # imported once by the warm host, not in every epoch child (a slow import)
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

SUFFIXES = (".params", ".states")  # what a checkpoint holds: Gluon parameters, the Trainer's optimizer state
MARKER = ".complete"  # uploaded after both objects; coach/storage/s3.py checks the same suffix
CONNECT_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3  # botocore's standard retry mode: the first try and two retries
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
CLIENT_VARIABLES = ENDPOINT_VARIABLES + ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                                         "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE")

#: (pid, the variables above) -> the S3 client made for them: a forked child never reuses its parent's sockets,
#: and a process whose environment changed gets a client that follows it
_clients: dict[tuple, object] = {}


class CheckpointError(Exception):
    """A checkpoint that could not be saved or loaded; the message is one line naming it."""


def save_checkpoint(net, trainer, prefix: str) -> None:
    """Save `net`'s parameters and `trainer`'s state as the checkpoint `prefix` (a path or an s3:// URL)."""
    if prefix.startswith("s3://"):
        _save_s3(net, trainer, prefix)
        return
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    for suffix, save in ((".params", net.save_parameters), (".states", trainer.save_states)):
        tmp = f"{prefix}{suffix}.tmp"
        save(tmp)
        os.replace(tmp, prefix + suffix)


def load_parameters(net, prefix: str) -> None:
    """Load the checkpoint's parameters into `net` (the checkpoint gives every shape)."""
    _load(prefix, ".params", net.load_parameters)


def load_states(trainer, prefix: str) -> None:
    """Load the checkpoint's optimizer state into `trainer`."""
    _load(prefix, ".states", trainer.load_states)


def _load(prefix: str, suffix: str, load) -> None:
    if not prefix.startswith("s3://"):
        load(prefix + suffix)
        return
    bucket, key = _location(prefix)
    client = _client()
    with tempfile.TemporaryDirectory(prefix="coach-checkpoint-") as folder:
        path = os.path.join(folder, "checkpoint" + suffix)
        try:
            client.head_object(Bucket=bucket, Key=key + MARKER)
        except _errors() as error:
            raise CheckpointError(f"checkpoint {prefix}: no completion marker {key + MARKER!r} "
                                  f"({_describe(error)}); a half-written checkpoint is never loaded") from None
        try:
            client.download_file(bucket, key + suffix, path, Config=_transfer())
        except _errors() as error:
            raise CheckpointError(f"checkpoint {prefix}: download of {suffix} failed: {_describe(error)}") from None
        load(path)


def _save_s3(net, trainer, prefix: str) -> None:
    """Both objects, then the marker; a marker left by an earlier attempt at the same step is deleted first, so
    that no reader ever takes a mix of two attempts for a complete checkpoint."""
    bucket, key = _location(prefix)
    client = _client()
    with tempfile.TemporaryDirectory(prefix="coach-checkpoint-") as folder:
        step = "removing an old marker"
        try:
            client.delete_object(Bucket=bucket, Key=key + MARKER)
            for suffix, save in ((".params", net.save_parameters), (".states", trainer.save_states)):
                path = os.path.join(folder, "checkpoint" + suffix)
                save(path)
                step = f"upload of {suffix}"
                client.upload_file(path, bucket, key + suffix, Config=_transfer())
                os.unlink(path)
            step = "upload of the completion marker"
            client.put_object(Bucket=bucket, Key=key + MARKER, Body=b"")
        except _errors() as error:
            raise CheckpointError(f"checkpoint {prefix}: {step} failed: {_describe(error)}") from None


def _location(url: str) -> tuple[str, str]:
    """(bucket, key) of `s3://bucket/key`; CheckpointError for a URL without both."""
    parsed = urlparse(url)
    key = parsed.path.lstrip("/")
    if not parsed.netloc or not key:
        raise CheckpointError(f"checkpoint {url}: expected s3://bucket/key")
    return parsed.netloc, key


def _client():
    """This process's S3 client, configured from the environment alone (bounded timeouts and retries)."""
    key = (os.getpid(), *(os.environ.get(name) for name in CLIENT_VARIABLES))
    if key not in _clients:
        config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                        retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"})
        if any(os.environ.get(name) for name in ENDPOINT_VARIABLES):  # MinIO, Ceph: path-style, fewer checksums
            config = config.merge(Config(s3={"addressing_style": "path"}, request_checksum_calculation="when_required",
                                         response_checksum_validation="when_required"))
        _clients.clear()  # a parent's client, or one for other variables, is of no use any more
        _clients[key] = boto3.session.Session().client("s3", config=config)
    return _clients[key]


def _transfer() -> TransferConfig:
    """One part at a time, in this thread: an epoch child needs no transfer threads of its own."""
    return TransferConfig(use_threads=False)


def _errors() -> tuple[type[Exception], ...]:
    return BotoCoreError, ClientError, Boto3Error


def _describe(error: Exception) -> str:
    """One line for what boto3 raised."""
    if isinstance(error, NoCredentialsError):
        return "no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
    if isinstance(error, ClientError):
        details = error.response.get("Error", {})
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return " ".join(f"{details.get('Code', '?')} {details.get('Message') or ''} (HTTP {status})".split())
    return " ".join(f"{type(error).__name__}: {error}".split())
