"""One contract for every CheckpointStore: the file store, the memory store where it applies, and the s3 store
against a real S3-protocol server on loopback (moto's server mode, tests.fakes.s3).

A backend writes a checkpoint's parts as a worker would (`write(prefix, parts)`), so the suite can leave
checkpoints half-written: for the file store one file without the other, for the s3 store objects without their
completion marker or a marker without one of its objects. Then the writer side itself, coach_functions/checkpoints.py,
saves a real Gluon net and trainer through each store's prefixes and loads them back.
"""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import boto3
import pytest

from coach.storage.checkpoints import FileCheckpointStore, MemoryCheckpointStore
from coach.storage.s3 import MARKER, S3CheckpointStore, describe, parse_s3_url
from coach_functions import checkpoints as fn

PARAMS, STATES = ".params", ".states"


class FileBackend:
    full = (PARAMS, STATES)  # a worker renames each file into place
    partials = [(PARAMS,), (STATES,)]

    def __init__(self, root: Path):
        self.store = FileCheckpointStore(root)

    def write(self, prefix: str, parts) -> None:
        for part in parts:
            Path(prefix + part).write_bytes(b"weights")

    def tags_left(self, job: str) -> set[str]:
        folder = self.store.root / job
        return {path.name.split(".")[0] for path in folder.iterdir()} if folder.is_dir() else set()

    def close(self) -> None:
        pass


class S3Backend:
    full = (PARAMS, STATES, MARKER)  # rank 0 uploads the marker last
    partials = [(PARAMS, STATES), (PARAMS, MARKER), (STATES, MARKER), (MARKER,)]

    def __init__(self, bucket: str, page_keys: int = 1000):
        self.store = S3CheckpointStore(f"s3://{bucket}/runs/r1", page_keys=page_keys)
        self.bucket = bucket
        self.client = boto3.session.Session().client("s3")

    def write(self, prefix: str, parts) -> None:
        key = parse_s3_url(prefix).key
        for part in parts:
            self.client.put_object(Bucket=self.bucket, Key=key + part, Body=b"weights")

    def tags_left(self, job: str) -> set[str]:
        listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=f"runs/r1/{job}/")
        return {item["Key"].rsplit("/", 1)[1].split(".")[0] for item in listed.get("Contents", ())}

    def close(self) -> None:
        self.store.close()
        self.client.close()


class MemoryBackend:
    full = ("",)  # a simulated worker only names what it saved
    partials: list = []

    def __init__(self):
        self.store = MemoryCheckpointStore()

    def write(self, prefix: str, parts) -> None:
        self.store.mark_saved(prefix)

    def tags_left(self, job: str) -> set[str]:
        return {prefix.rsplit("/", 1)[1] for prefix in self.store.saved.get(job, ())}

    def close(self) -> None:
        pass


def make_backend(kind: str, request, tmp_path: Path):
    if kind == "file":
        return FileBackend(tmp_path / "checkpoints")
    if kind == "memory":
        return MemoryBackend()
    return S3Backend(request.getfixturevalue("bucket"))


@pytest.fixture(params=["file", "s3", "memory"])
def backend(request, tmp_path):
    made = make_backend(request.param, request, tmp_path)
    yield made
    made.close()


@pytest.fixture(params=["file", "s3"])
def written(request, tmp_path):
    """The stores whose checkpoints are files or objects, which a crash can leave half-written."""
    made = make_backend(request.param, request, tmp_path)
    yield made
    made.close()


#: Every way a crash leaves a checkpoint half-written, per store.
HALF_WRITTEN = [("file", FileBackend.partials), ("s3", S3Backend.partials)]


def save(backend, job: str, tag: str, parts=None) -> str:
    prefix = backend.store.prefix(job, tag)
    backend.write(prefix, backend.full if parts is None else parts)
    return prefix


# --------------------------------------------------------------------------- the contract


def test_a_saved_checkpoint_is_complete_and_only_it(backend):
    assert backend.store.check() is None
    prefix = save(backend, "job", "epoch-0001")

    assert prefix.endswith("job/epoch-0001")
    assert backend.store.complete(prefix)
    assert not backend.store.complete(backend.store.prefix("job", "epoch-0002"))  # never saved
    assert not backend.store.complete(backend.store.prefix("other", "epoch-0001"))
    assert not backend.store.complete(None) and not backend.store.complete("")


def test_the_newest_complete_checkpoint_is_the_latest_step_epochs_after_calibration_by_number(backend):
    assert backend.store.newest_complete("job") is None
    for tag in ("calibration-9", "calibration-2"):
        save(backend, "job", tag)
    assert backend.store.newest_complete("job") == backend.store.prefix("job", "calibration-9")
    for tag in ("epoch-0002", "epoch-0010", "epoch-0009"):
        save(backend, "job", tag)
    save(backend, "other", "epoch-0020")

    assert backend.store.newest_complete("job") == backend.store.prefix("job", "epoch-0010")  # 10 > 9 > 2
    assert backend.store.newest_complete("other") == backend.store.prefix("other", "epoch-0020")
    assert backend.store.newest_complete("nobody") is None


def test_prune_keeps_only_the_checkpoint_it_is_told_to_keep(backend):
    for tag in ("calibration-1", "epoch-0001", "epoch-0002"):
        save(backend, "job", tag)
    keep = save(backend, "job", "epoch-0003")
    save(backend, "other", "epoch-0001")

    removed = backend.store.prune("job", keep)

    assert backend.tags_left("job") == {"epoch-0003"}
    assert removed == 3 * len(backend.full)
    assert backend.store.complete(keep)
    assert backend.store.newest_complete("job") == keep
    assert backend.tags_left("other") == {"epoch-0001"}  # another job's checkpoints are not touched


def test_a_logged_prefix_is_located_where_the_store_has_it(backend):
    prefix = save(backend, "job", "epoch-0004")

    assert backend.store.locate("job", prefix) == prefix
    assert backend.store.complete(backend.store.locate("job", prefix))


@pytest.mark.parametrize("kind, parts", [(kind, parts) for kind, partials in HALF_WRITTEN for parts in partials])
def test_a_half_written_checkpoint_is_never_complete_nor_newest(request, tmp_path, kind, parts):
    written = make_backend(kind, request, tmp_path)
    older = save(written, "job", "epoch-0001")
    half = save(written, "job", "epoch-0002", parts)

    assert not written.store.complete(half)
    assert written.store.newest_complete("job") == older  # the newer step is not done
    written.close()


def test_a_half_written_checkpoint_is_pruned_like_any_other_old_one(written):
    save(written, "job", "epoch-0001", written.partials[0])
    keep = save(written, "job", "epoch-0002")
    save(written, "job", "epoch-0003", written.partials[-1])  # a later attempt that crashed half-way

    written.store.prune("job", keep)

    assert written.tags_left("job") == {"epoch-0002"}


def test_pages_of_a_long_listing_are_all_read_and_deleted_in_batches(bucket):
    backend = S3Backend(bucket, page_keys=2)  # 2 keys a page, 2 keys a delete: every call here spans pages
    try:
        for number in range(1, 6):
            save(backend, "job", f"epoch-{number:04d}")
        save(backend, "job", "epoch-0006", (PARAMS, STATES))

        assert backend.store.newest_complete("job") == backend.store.prefix("job", "epoch-0005")
        assert backend.store.prune("job", backend.store.prefix("job", "epoch-0005")) == 4 * 3 + 2
        assert backend.tags_left("job") == {"epoch-0005"}
    finally:
        backend.close()


# --------------------------------------------------------------------------- what only one store does


def test_the_file_store_finds_a_logged_prefix_in_a_moved_folder(tmp_path):
    before = FileCheckpointStore(tmp_path / "old" / "checkpoints")
    logged = save(FileBackend(before.root), "job", "epoch-0002")
    (tmp_path / "old").rename(tmp_path / "new")
    after = FileCheckpointStore(tmp_path / "new" / "checkpoints")

    assert not after.complete(logged)
    assert after.locate("job", logged) == str((tmp_path / "new" / "checkpoints" / "job" / "epoch-0002").resolve())
    assert after.locate("job", "checkpoints/job/epoch-0002") == after.locate("job", logged)  # a relative one
    assert after.locate("job", str(tmp_path / "gone" / "epoch-0009")) == str(tmp_path / "gone" / "epoch-0009")


def test_a_file_store_whose_root_is_a_file_says_so(tmp_path):
    (tmp_path / "checkpoints").write_text("not a folder")

    assert FileCheckpointStore(tmp_path / "checkpoints").check() == f"{tmp_path / 'checkpoints'} is not a folder"


def test_an_s3_url_names_a_bucket_and_a_key_prefix():
    assert parse_s3_url("s3://b/runs/r1/") == parse_s3_url("s3://b/runs/r1")
    assert parse_s3_url("s3://b/runs/r1").key == "runs/r1" and parse_s3_url("s3://b").key == ""
    assert S3CheckpointStore("s3://b", client=object()).prefix("job", "epoch-0001") == "s3://b/job/epoch-0001"
    for bad, why in [("s3:///prefix", "no bucket"), ("s3://user@b/p", "no bucket"), ("s3://b/p?x=1", "no query"),
                     ("s3://b/a//c", "empty folder"), ("http://b/p", "not an s3:// URL")]:
        with pytest.raises(ValueError, match=why):
            parse_s3_url(bad)


def test_a_missing_bucket_is_one_line_naming_it(s3_env):
    store = S3CheckpointStore("s3://coach-no-such-bucket/run")
    try:
        assert store.check() == "bucket 'coach-no-such-bucket' does not exist"
    finally:
        store.close()


def test_refused_access_is_one_line():
    from botocore.exceptions import ClientError

    denied = ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                          "ResponseMetadata": {"HTTPStatusCode": 403}}, "HeadBucket")
    assert describe(denied, "b") == "access denied to bucket 'b' (AccessDenied)"


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_store_nobody_answers_for_fails_as_values(s3_env, monkeypatch):
    """Bounded retries: every call returns (the suite's timeout catches a hang), each failure a value."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{closed_port()}")
    store = S3CheckpointStore("s3://coach-anything/run")
    try:
        problem = store.check()
        prefix = store.prefix("job", "epoch-0001")
        answers = (store.complete(prefix), store.newest_complete("job"), store.prune("job", prefix))
    finally:
        store.close()

    assert problem.startswith("EndpointConnectionError: Could not connect to the endpoint URL") and "\n" not in problem
    assert answers == (False, None, 0)


def test_the_two_sides_agree_on_the_names_of_a_checkpoint():
    from coach.storage.checkpoints import SUFFIXES

    assert (fn.MARKER, fn.SUFFIXES) == (MARKER, SUFFIXES)


# --------------------------------------------------------------------------- the writer: coach_functions/checkpoints.py


@pytest.fixture(scope="module")
def mx():
    import mxnet

    return mxnet


@pytest.fixture
def temp_folder(tmp_path, monkeypatch) -> Path:
    """Where coach_functions/checkpoints.py puts its temp files during the test (checked empty afterwards)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def tiny_net(mx, initialise: bool = True):
    net = mx.gluon.nn.Dense(3, in_units=4)
    if initialise:
        mx.random.seed(7)
        net.initialize(mx.init.Xavier())
    return net


def adam(mx, net):
    return mx.gluon.Trainer(net.collect_params(), "adam", {"learning_rate": 0.1}, kvstore=None)


def train_step(mx, net, trainer, seed: int) -> None:
    import numpy as np

    rng = np.random.RandomState(seed)
    x, y = mx.nd.array(rng.rand(8, 4)), mx.nd.array(rng.randint(0, 3, 8))
    with mx.autograd.record():
        loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()(net(x), y)
    loss.backward()
    trainer.step(8)


def weights(net) -> list:
    return [net.weight.data().asnumpy(), net.bias.data().asnumpy()]


def same(a: list, b: list) -> bool:
    return all((x == y).all() for x, y in zip(a, b))


def test_a_net_and_its_optimizer_state_round_trip_through_each_store(written, mx, temp_folder):
    net = tiny_net(mx)
    trainer = adam(mx, net)
    for seed in (1, 2):  # Adam's moments are no longer zero
        train_step(mx, net, trainer, seed)
    prefix = written.store.prefix("job", "epoch-0002")

    fn.save_checkpoint(net, trainer, prefix)

    assert written.store.complete(prefix)
    assert written.store.newest_complete("job") == prefix
    loaded = tiny_net(mx, initialise=False)  # shapes come from the checkpoint
    fn.load_parameters(loaded, prefix)
    assert same(weights(loaded), weights(net))
    resumed = adam(mx, loaded)
    fn.load_states(resumed, prefix)
    fresh = tiny_net(mx, initialise=False)
    fn.load_parameters(fresh, prefix)
    without_state = adam(mx, fresh)
    for model, optimiser in ((net, trainer), (loaded, resumed), (fresh, without_state)):
        train_step(mx, model, optimiser, 3)
    assert same(weights(loaded), weights(net))  # the same step from the same state
    assert not same(weights(fresh), weights(net))  # the optimizer state mattered
    assert list(temp_folder.iterdir()) == []


def test_an_s3_checkpoint_without_its_marker_is_never_loaded(bucket, mx, temp_folder):
    backend = S3Backend(bucket)
    net = tiny_net(mx)
    prefix = backend.store.prefix("job", "epoch-0001")
    fn.save_checkpoint(net, adam(mx, net), prefix)
    backend.client.delete_object(Bucket=bucket, Key=parse_s3_url(prefix).key + MARKER)
    backend.close()

    with pytest.raises(fn.CheckpointError, match="no completion marker") as raised:
        fn.load_parameters(tiny_net(mx, initialise=False), prefix)

    assert prefix in str(raised.value) and "\n" not in str(raised.value)
    assert list(temp_folder.iterdir()) == []


def test_a_save_over_an_earlier_attempt_takes_its_marker_away_first(bucket, mx, monkeypatch):
    backend = S3Backend(bucket)
    net = tiny_net(mx)
    prefix = backend.store.prefix("job", "epoch-0001")
    fn.save_checkpoint(net, adam(mx, net), prefix)
    seen = []
    original = fn._client

    def watching():
        client = original()

        class Watch:
            def __getattr__(self, name):
                if name == "upload_file":
                    seen.append(backend.store.complete(prefix))
                return getattr(client, name)

        return Watch()

    monkeypatch.setattr(fn, "_client", watching)
    fn.save_checkpoint(net, adam(mx, net), prefix)

    assert seen == [False, False]  # while either object is replaced, the checkpoint is not complete
    assert backend.store.complete(prefix)
    backend.close()


@pytest.mark.parametrize("failure", ["missing bucket", "refused connection"])
def test_a_save_that_fails_is_one_line(s3_env, mx, temp_folder, monkeypatch, failure):
    if failure == "refused connection":
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{closed_port()}")
    prefix = "s3://coach-no-such-bucket/run/job/epoch-0001"
    net = tiny_net(mx)

    with pytest.raises(fn.CheckpointError) as raised:
        fn.save_checkpoint(net, adam(mx, net), prefix)

    message = str(raised.value)
    assert message.startswith(f"checkpoint {prefix}: ") and "\n" not in message
    assert ("NoSuchBucket" if failure == "missing bucket" else "Could not connect") in message
    assert list(temp_folder.iterdir()) == []
