"""Fixtures more than one test folder uses: the loopback S3 server and a clean AWS environment around it."""

from __future__ import annotations

import itertools

import pytest

from tests.fakes.s3 import LoopbackS3

_buckets = itertools.count(1)


@pytest.fixture(scope="module")
def s3_server():
    with LoopbackS3() as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch, tmp_path):
    """The environment a controller and its function hosts read: this server, fake credentials, no other AWS
    setup (no profile, no config or credentials file of the machine's user)."""
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.fixture
def bucket(s3_env) -> str:
    """A fresh bucket's name (moto's state is per process: every test gets its own)."""
    return s3_env.make_bucket(f"coach-test-{next(_buckets)}")[len("s3://"):]
