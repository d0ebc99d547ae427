"""coach.storage.checkpoints: which checkpoint of a job's folder is the newest complete one."""

from __future__ import annotations

from coach.storage.checkpoints import FileCheckpointStore, MemoryCheckpointStore, tag_step


def save(store: FileCheckpointStore, job: str, tag: str, *suffixes: str) -> str:
    prefix = store.prefix(job, tag)
    for suffix in suffixes or (".params", ".states"):
        with open(prefix + suffix, "wb") as handle:
            handle.write(b"x")
    return prefix


def test_a_tag_names_its_step():
    assert tag_step("epoch-0003") == ("epoch", 3)
    assert tag_step("/run/checkpoints/job/calibration-2") == ("calibration", 2)
    assert tag_step("epoch-0003.params") is None and tag_step("notes") is None and tag_step("epoch-") is None


def test_the_newest_complete_checkpoint_is_the_latest_step_whose_files_are_both_there(tmp_path):
    store = FileCheckpointStore(tmp_path / "checkpoints")
    assert store.newest_complete("job") is None  # no folder yet
    save(store, "job", "calibration-4")
    assert store.newest_complete("job") == str((tmp_path / "checkpoints" / "job" / "calibration-4").resolve())
    save(store, "job", "epoch-0002")
    save(store, "job", "epoch-0010")
    save(store, "job", "epoch-0011", ".params")  # its states were never renamed in: incomplete
    (tmp_path / "checkpoints" / "job" / "epoch-0012.params.tmp").write_bytes(b"half")

    assert store.newest_complete("job").endswith("/job/epoch-0010")  # by number, not by name: 10 > 2
    assert store.newest_complete("other") is None


def test_the_memory_store_answers_the_same_way():
    store = MemoryCheckpointStore()
    for tag in ("calibration-3", "epoch-0001", "epoch-0009"):
        store.mark_saved(store.prefix("job", tag))
    store.mark_saved(store.prefix("other", "epoch-0020"))

    assert store.newest_complete("job") == "mem://job/epoch-0009"
