"""Workload files -> SimJobs: both formats on hand-made files and on the published data, and every refusal."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.support import needs, pollux_data
from coach.simulator.workloads import APP_BATCH_RANGES, SimJob, WorkloadError, load_workload

DATA = pollux_data()
POLLUX_HEADER = "name,time,application,num_replicas,batch_size\n"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, text: str | bytes, name: str = "w.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_pollux_workload_is_taken_as_written_and_sorted_by_arrival_then_name(tmp_path: Path) -> None:
    path = write(tmp_path, POLLUX_HEADER + "b,20,cifar10,6,2048\na,20,ncf,1,32768\nc,5.5,yolov3,4,64\n\n")
    assert load_workload(path) == [
        SimJob("c", 5.5, "yolov3", 4, 64),
        SimJob("a", 20.0, "ncf", 1, 32768),
        SimJob("b", 20.0, "cifar10", 6, 2048),
    ]


@pytest.mark.parametrize(("folder", "jobs"), [("workloads", 160), ("workloads-0.5", 80), ("workloads-1.5", 240),
                                              ("workloads-2.0", 320), ("workloads-realistic", 160)])
@needs(DATA)
def test_every_published_workload_parses(folder: str, jobs: int) -> None:
    files = sorted((DATA / folder).glob("workload-*.csv"))
    assert len(files) == 8
    for path in files:
        loaded = load_workload(path)
        assert len(loaded) == jobs
        assert [(j.arrival_s, j.name) for j in loaded] == sorted((j.arrival_s, j.name) for j in loaded)
        assert {j.app for j in loaded} <= set(APP_BATCH_RANGES)
        assert all(j.duration_s is None and j.batch >= j.gpus >= 1 for j in loaded)


@needs(DATA)
def test_published_workload_6_first_and_last_jobs() -> None:
    jobs = load_workload(DATA / "workloads" / "workload-6.csv")
    assert jobs[0] == SimJob("cifar10-0", 53.0, "cifar10", 6, 2048)
    assert jobs[-1] == SimJob("cifar10-159", 28189.0, "cifar10", 8, 2048)


def test_philly_rows_map_by_gpu_time_like_pollux_sampled_its_workloads(tmp_path: Path) -> None:
    rows = [
        "2017-10-09 07:00:10,100.0,1,100.0,a",  # 0.03 GPU-h: cifar10 or ncf
        "2017-10-09 07:00:00,7200.0,2,14400.0,a",  # 4 GPU-h: deepspeech2 or bert
        "2017-10-09 08:00:00,36000.0,4,144000.0,b",  # 40 GPU-h: yolov3
        "2017-10-10 07:00:00,100000.0,8,800000.0,b",  # 222 GPU-h: imagenet
        "2017-10-09 07:00:00,3600.0,128,460800.0,c",  # 128 GPU-h on 128 GPUs: imagenet, batch capped
    ]
    jobs = load_workload(write(tmp_path, PHILLY_HEADER + "\n".join(rows) + "\n"), seed=3)
    assert [j.arrival_s for j in jobs] == [0.0, 0.0, 10.0, 3600.0, 86400.0]
    by_arrival = {(j.arrival_s, j.duration_s): j for j in jobs}
    assert by_arrival[(10.0, 100.0)].app in {"cifar10", "ncf"}
    assert by_arrival[(0.0, 7200.0)].app in {"deepspeech2", "bert"}
    yolo = by_arrival[(3600.0, 36000.0)]
    assert (yolo.app, yolo.gpus, yolo.batch) == ("yolov3", 4, 32)  # M0 8 per GPU
    imagenet = by_arrival[(86400.0, 100000.0)]
    assert (imagenet.app, imagenet.gpus, imagenet.batch) == ("imagenet", 8, 1600)
    big = by_arrival[(0.0, 3600.0)]
    assert (big.app, big.gpus, big.batch) == ("imagenet", 128, 12800)  # capped at imagenet's max batch
    assert sorted(j.name.rsplit("-", 1)[1] for j in jobs) == ["0", "1", "2", "3", "4"]
    assert all(j.name.startswith(j.app + "-") for j in jobs)


def test_philly_pairs_are_drawn_by_seed_reproducibly(tmp_path: Path) -> None:
    rows = [f"2017-10-09 07:{i // 60:02d}:{i % 60:02d},100.0,1,100.0,a" for i in range(200)]
    path = write(tmp_path, PHILLY_HEADER + "\n".join(rows) + "\n")
    first = [j.app for j in load_workload(path, seed=1)]
    assert first == [j.app for j in load_workload(path, seed=1)]
    assert first != [j.app for j in load_workload(path, seed=2)]
    assert 60 < Counter(first)["ncf"] < 140  # a fair coin


@needs(DATA)
def test_whole_philly_trace() -> None:
    jobs = load_workload(DATA / "traces" / "philly.csv")
    assert len(jobs) == 82247
    assert jobs[0].arrival_s == 0.0
    assert len({j.name for j in jobs}) == 82247
    assert all(j.duration_s is not None and j.duration_s > 0 for j in jobs)
    counts = Counter(j.app for j in jobs)
    # GPU-time categories of the trace: 63,162 under 1 GPU-h, 13,807 in 1-10, 3,575 in 10-100, 1,703 beyond.
    assert counts["cifar10"] + counts["ncf"] == 63162
    assert counts["deepspeech2"] + counts["bert"] == 13807
    assert (counts["yolov3"], counts["imagenet"]) == (3575, 1703)


BAD_CASES = [
    ("empty", b"", "{f}:1:1: empty file, expected a header line"),
    ("blank lines only", b"\n\n", "{f}:1:1: empty file, expected a header line"),
    ("unknown header", b"a,b,c\n1,2,3\n",
     "{f}:1:1: unknown header 'a,b,c', expected name,time,application,num_replicas,batch_size or "
     "timestamp,duration,num_gpus,gpu_time,cluster"),
    ("too few fields", (POLLUX_HEADER + "a,1,ncf,1\n").encode(),
     "{f}:2:5: expected 5 fields (name,time,application,num_replicas,batch_size), got 4"),
    ("too many fields", (POLLUX_HEADER + "a,1,ncf,1,256\nb,1,ncf,1,256,9\n").encode(),
     "{f}:3:6: expected 5 fields (name,time,application,num_replicas,batch_size), got 6"),
    ("time not a number", (POLLUX_HEADER + "a,soon,ncf,1,256\n").encode(),
     "{f}:2:2: time is not a number: 'soon'"),
    ("negative time", (POLLUX_HEADER + "a,-1,ncf,1,256\n").encode(), "{f}:2:2: time must be >= 0, got '-1'"),
    ("nan time", (POLLUX_HEADER + "a,nan,ncf,1,256\n").encode(), "{f}:2:2: time must be finite, got 'nan'"),
    ("inf batch", (POLLUX_HEADER + "a,1,ncf,1,inf\n").encode(), "{f}:2:5: batch_size must be finite, got 'inf'"),
    ("zero replicas", (POLLUX_HEADER + "a,1,ncf,0,256\n").encode(), "{f}:2:4: num_replicas must be > 0, got '0'"),
    ("negative replicas", (POLLUX_HEADER + "a,1,ncf,-2,256\n").encode(),
     "{f}:2:4: num_replicas must be > 0, got '-2'"),
    ("fractional replicas", (POLLUX_HEADER + "a,1,ncf,1.5,256\n").encode(),
     "{f}:2:4: num_replicas must be a whole number, got '1.5'"),
    ("batch below replicas", (POLLUX_HEADER + "a,1,cifar10,8,4\n").encode(),
     "{f}:2:5: batch_size 4 is smaller than num_replicas 8"),
    ("unknown application", (POLLUX_HEADER + "a,1,gpt5,1,256\n").encode(),
     "{f}:2:3: unknown application 'gpt5', expected one of bert, cifar10, deepspeech2, imagenet, ncf, yolov3"),
    ("duplicate name", (POLLUX_HEADER + "a,1,ncf,1,256\nb,2,ncf,1,256\na,3,ncf,1,256\n").encode(),
     "{f}:4:1: duplicate job name 'a' (first on line 2)"),
    ("empty name", (POLLUX_HEADER + " ,1,ncf,1,256\n").encode(), "{f}:2:1: name is empty"),
    ("not utf-8", (POLLUX_HEADER + "a,1,ncf,1,256\nb,2,n\xe9f,1,256\n").encode("latin-1"),
     "{f}:3:3: not UTF-8 (byte 0xe9)"),
    ("philly bad timestamp", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,1,1.0,a\n2017-13-09 07:00:00,1.0,1,1.0,a\n")
     .encode(), "{f}:3:1: timestamp is not YYYY-MM-DD HH:MM:SS: '2017-13-09 07:00:00'"),
    ("philly zero gpus", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,0,1.0,a\n").encode(),
     "{f}:2:3: num_gpus must be > 0, got '0'"),
    ("philly nan duration", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,1,1.0,a\n2017-10-09 07:00:00,NaN,1,1.0,a\n")
     .encode(), "{f}:3:2: duration must be finite, got 'NaN'"),
    ("philly negative gpu time", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,1,-1.0,a\n").encode(),
     "{f}:2:4: gpu_time must be > 0, got '-1.0'"),
    ("philly text gpus", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,two,1.0,a\n").encode(),
     "{f}:2:3: num_gpus is not a number: 'two'"),
    ("philly short row", (PHILLY_HEADER + "2017-10-09 07:00:00,1.0,1\n").encode(),
     "{f}:2:4: expected 5 fields (timestamp,duration,num_gpus,gpu_time,cluster), got 3"),
]


@pytest.mark.parametrize(("case", "content", "message"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_malformed_workload_is_one_exact_line(tmp_path: Path, case: str, content: bytes, message: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(WorkloadError) as caught:
        load_workload(path)
    assert str(caught.value) == message.format(f=path)
    assert "\n" not in str(caught.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"^.*nowhere\.csv:0:0: no such file$"):
        load_workload(tmp_path / "nowhere.csv")


def test_workload_error_is_a_value_error() -> None:
    assert issubclass(WorkloadError, ValueError)
