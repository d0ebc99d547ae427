"""Job, cluster and matrix files report unreadable YAML the same way: `FILE: (file): invalid YAML at line N`.

Job files add PyYAML's description of the problem; cluster and matrix files stop at the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coach.experiments.matrix import MatrixFileError, load_matrix
from coach.inputs.cluster import ClusterFileError, load_cluster
from coach.inputs.jobs import JobFileError, load_job

BROKEN = "name: x\nbudget: 1: 2\n"  # a mapping value where none may start, on line 2


def lines_of(load, error_type, path: Path) -> list[str]:
    with pytest.raises(error_type) as caught:
        load(path)
    return caught.value.lines


def test_a_job_file_names_the_line_and_the_problem(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(BROKEN)

    assert lines_of(load_job, JobFileError, path) == [
        f"{path}: (file): invalid YAML at line 2: mapping values are not allowed here"]


def test_a_cluster_file_names_the_line(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(BROKEN)

    assert lines_of(load_cluster, ClusterFileError, path) == [f"{path}: (file): invalid YAML at line 2"]


def test_a_matrix_file_names_the_line(tmp_path):
    path = tmp_path / "matrix.yaml"
    path.write_text(BROKEN)

    assert lines_of(load_matrix, MatrixFileError, path) == [f"{path}: (file): invalid YAML at line 2"]


def test_an_error_without_a_position_leaves_out_the_line(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: \x07\n")  # a control character: PyYAML's reader refuses it before parsing

    assert lines_of(load_cluster, ClusterFileError, path) == [f"{path}: (file): invalid YAML"]
