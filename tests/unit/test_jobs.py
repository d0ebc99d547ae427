"""coach.jobs: a job file becomes a frozen JobSpec, or every problem becomes one line.

Each error line reads ``FILE: FIELD: what is wrong`` where FILE is the path as the
caller gave it and FIELD is the YAML key (``(file)`` for the file as a whole).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from coach.domain.jobs import OPTIMIZERS, JobSpec

from coach.inputs.jobs import JobCheck, JobFileError, YamlLoader, check_job, load_job, load_jobs

VALID_MODEL = "def build_model():\n    return None\n\n\ndef load_data():\n    return None\n"

# The smallest valid job: every required field, as raw YAML values.
REQUIRED_FIELDS = {
    "name": "mnist",
    "model": "model.py",
    "batch_size": "64",
    "optimizer": "sgd",
    "learning_rate": "0.05",
    "target_loss": "0.3",
    "max_epochs": "20",
    "budget": "100.0",
}

NAME_RULE = (
    "must be 1-64 characters from letters, digits, '.', '_', '-' starting with "
    "a letter or digit (it is used as a file name), got "
)


def job_yaml(**changes: str | None) -> str:
    """REQUIRED_FIELDS as YAML; a change sets a raw YAML value, None drops the field."""
    fields = {**REQUIRED_FIELDS, **changes}
    return "".join(f"{key}: {value}\n" for key, value in fields.items() if value is not None)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder with a valid model.py and a few broken model files next to the jobs."""
    (tmp_path / "model.py").write_text(VALID_MODEL)
    (tmp_path / "models").mkdir()
    (tmp_path / "model.txt").write_text(VALID_MODEL)
    (tmp_path / "broken.py").write_text("def build_model()\n    return None\n")
    (tmp_path / "nobuild.py").write_text("def load_data():\n    return None\n")
    return tmp_path


def write(folder: Path, text: str, filename: str = "job.yaml") -> Path:
    path = folder / filename
    path.write_text(text)
    return path


def errors_of(path: Path | str) -> list[str]:
    with pytest.raises(JobFileError) as excinfo:
        load_job(path)
    return excinfo.value.lines


# --------------------------------------------------------------------------- valid jobs


def test_a_static_job_loads_with_every_field_as_written(folder: Path) -> None:
    path = write(
        folder,
        job_yaml(name="cifar.static_4x2", learning_rate="1e-3", budget="250")
        + "optimizer_params: {momentum: 0.9, wd: 1}\n"
        "consecutive: 2\n"
        "workers: 4\n"
        "servers: 2\n"
        "max_workers: 8\n"
        "max_servers: 2\n"
        "seed: 7\n"
        "epoch_timeout_s: 120\n",
    )

    spec = load_job(path)

    assert spec == JobSpec(
        name="cifar.static_4x2",
        source=folder / "job.yaml",
        model_path=folder / "model.py",
        batch_size=64,
        optimizer="sgd",
        optimizer_params={"momentum": 0.9, "wd": 1.0},
        learning_rate=0.001,  # YAML 1.2 style '1e-3' is read as a float
        target_loss=0.3,
        consecutive=2,
        max_epochs=20,
        budget=250.0,  # integer YAML accepted for a float field, stored as float
        workers=4,
        servers=2,
        max_workers=8,
        max_servers=2,
        seed=7,
        epoch_timeout_s=120.0,
    )
    assert spec.fixed_counts == (spec.workers, spec.servers)
    assert type(spec.budget) is float and type(spec.epoch_timeout_s) is float
    assert type(spec.optimizer_params) is dict


@pytest.mark.parametrize(("text", "per_worker", "scaling"), [
    ("64", 64, "fixed"),  # a plain number keeps meaning what it always meant
    ("{per_worker: 64}", 64, "fixed"),
    ("{per_worker: 32, scaling: linear}", 32, "linear"),
    ("{per_worker: 16, scaling: adaptive}", 16, "adaptive"),
])
def test_batch_size_is_a_number_or_per_worker_and_scaling(folder: Path, text, per_worker, scaling) -> None:
    spec = load_job(write(folder, job_yaml(batch_size=text)))

    assert (spec.batch_size, spec.batch_scaling) == (per_worker, scaling)
    # a run's manifest round-trips it, in the job file's own form
    assert JobSpec.from_dict(spec.to_dict()) == spec
    written = spec.to_dict()["batch_size"]
    assert written == (per_worker if scaling == "fixed" else {"per_worker": per_worker, "scaling": scaling})
    assert "batch_scaling" not in spec.to_dict()


def test_a_dynamic_job_gets_the_defaults(folder: Path) -> None:
    spec = load_job(write(folder, job_yaml()))

    assert spec == JobSpec(
        name="mnist",
        source=folder / "job.yaml",
        model_path=folder / "model.py",
        batch_size=64,
        optimizer="sgd",
        optimizer_params={},
        learning_rate=0.05,
        target_loss=0.3,
        consecutive=3,
        max_epochs=20,
        budget=100.0,
        workers=None,
        servers=None,
        max_workers=None,
        max_servers=None,
        seed=0,
        epoch_timeout_s=600.0,
    )
    assert spec.fixed_counts is None


def test_a_dynamic_job_may_set_upper_limits_and_explicit_nulls(folder: Path) -> None:
    spec = load_job(write(folder, job_yaml() + "workers: null\nservers: ~\nmax_workers: 6\n"))

    assert (spec.workers, spec.servers, spec.max_workers, spec.max_servers) == (None, None, 6, None)
    assert spec.fixed_counts is None


def test_model_path_is_resolved_from_the_job_folder_not_the_working_directory(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folder / "jobs").mkdir()
    write(folder / "jobs", job_yaml(model="../model.py"))
    monkeypatch.chdir(folder)

    spec = load_job("jobs/job.yaml")

    assert spec.source == folder / "jobs" / "job.yaml"
    assert spec.model_path == folder / "model.py"
    assert spec.source.is_absolute() and spec.model_path.is_absolute()


def test_job_spec_is_frozen_and_serialises_to_json(folder: Path) -> None:
    spec = load_job(write(folder, job_yaml() + "optimizer_params: {momentum: 0.9}\n"))

    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.budget = 1.0  # type: ignore[misc]
    as_dict = spec.to_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert as_dict["source"] == str(folder / "job.yaml")
    assert as_dict["model_path"] == str(folder / "model.py")
    assert as_dict["optimizer_params"] == {"momentum": 0.9}
    hash(spec)  # usable as a dict key despite the optimizer_params dict


def test_every_registered_optimizer_is_accepted(folder: Path) -> None:
    assert OPTIMIZERS == {"sgd", "nag", "adam", "rmsprop", "adagrad", "adadelta"}
    for name in sorted(OPTIMIZERS):
        assert load_job(write(folder, job_yaml(optimizer=name))).optimizer == name


# --------------------------------------------------------------------------- bad jobs

ALLOWED = "adadelta, adagrad, adam, nag, rmsprop, sgd"

# (job file text, expected error lines after "FILE: "; "{dir}" is the job's folder)
BAD_JOBS = [
    # unknown and misspelt fields
    pytest.param(job_yaml() + "colour: blue\n", ["colour: unknown field"], id="unknown-field"),
    pytest.param(
        job_yaml(learning_rate=None) + "learning_rte: 0.1\n",
        ["learning_rte: unknown field (did you mean 'learning_rate'?)",
         "learning_rate: required field missing"],
        id="misspelt-field-with-suggestion",
    ),
    pytest.param(
        job_yaml(learning_rate=None) + "lr: 0.1\n",
        ["lr: unknown field (did you mean 'learning_rate'?)",
         "learning_rate: required field missing"],
        id="lr-alias-suggestion",
    ),
    # strict types
    pytest.param(job_yaml(batch_size='"64"'), ["batch_size: expected an integer, got str '64'"],
                 id="string-batch-size"),
    pytest.param(job_yaml(batch_size="2.5"), ["batch_size: expected an integer, got float 2.5"],
                 id="float-batch-size"),
    pytest.param(job_yaml() + "workers: true\nservers: 2\n",
                 ["workers: expected an integer, got bool True"], id="bool-workers"),
    pytest.param(job_yaml(budget="lots"), ["budget: expected a number, got str 'lots'"],
                 id="string-budget"),
    pytest.param(job_yaml(learning_rate="yes"), ["learning_rate: expected a number, got bool True"],
                 id="bool-learning-rate"),
    pytest.param(job_yaml(budget=""), ["budget: expected a number, got null"], id="null-budget"),
    pytest.param(job_yaml(name="42"), ["name: expected a string, got int 42"], id="int-name"),
    # required fields
    *[
        pytest.param(job_yaml(**{key: None}), [f"{key}: required field missing"],
                     id=f"missing-{key}")
        for key in REQUIRED_FIELDS
    ],
    # ranges
    pytest.param(job_yaml(budget="0"), ["budget: must be > 0, got 0.0"], id="zero-budget"),
    pytest.param(job_yaml(budget="-1"), ["budget: must be > 0, got -1.0"], id="negative-budget"),
    pytest.param(job_yaml(budget=".inf"), ["budget: must be a finite number, got inf"],
                 id="infinite-budget"),
    pytest.param(job_yaml(learning_rate=".nan"), ["learning_rate: must be a finite number, got nan"],
                 id="nan-learning-rate"),
    pytest.param(job_yaml(learning_rate="0"), ["learning_rate: must be > 0, got 0.0"],
                 id="zero-learning-rate"),
    pytest.param(job_yaml(batch_size="0"), ["batch_size: must be >= 1, got 0"], id="zero-batch-size"),
    # batch_size as a mapping: {per_worker, scaling}
    pytest.param(job_yaml(batch_size="{per_worker: 0}"), ["batch_size.per_worker: must be >= 1, got 0"],
                 id="zero-per-worker"),
    pytest.param(job_yaml(batch_size="{per_worker: '64'}"),
                 ["batch_size.per_worker: expected an integer, got str '64'"], id="string-per-worker"),
    pytest.param(job_yaml(batch_size="{scaling: linear}"), ["batch_size.per_worker: required field missing"],
                 id="mapping-without-per-worker"),
    pytest.param(job_yaml(batch_size="{per_worker: 64, scaling: elastic}"),
                 ["batch_size.scaling: unknown scaling 'elastic', allowed: fixed, linear, adaptive"],
                 id="unknown-scaling"),
    pytest.param(job_yaml(batch_size="{per_worker: 64, scaling: 2}"),
                 ["batch_size.scaling: expected a string, got int 2"], id="scaling-a-number"),
    pytest.param(job_yaml(batch_size="{per_worker: 64, scalling: linear}"),
                 ["batch_size.scalling: unknown field, allowed: per_worker, scaling (did you mean 'scaling'?)"],
                 id="unknown-batch-size-key"),
    pytest.param(job_yaml(batch_size="[64]"), ["batch_size: expected an integer, got list [64]"],
                 id="batch-size-a-list"),
    pytest.param(job_yaml(batch_size="-8"), ["batch_size: must be >= 1, got -8"],
                 id="negative-batch-size"),
    pytest.param(job_yaml(target_loss="-0.1"), ["target_loss: must be >= 0, got -0.1"],
                 id="negative-target-loss"),
    pytest.param(job_yaml(max_epochs="0"), ["max_epochs: must be >= 1, got 0"], id="zero-max-epochs"),
    pytest.param(job_yaml() + "consecutive: 0\n", ["consecutive: must be >= 1, got 0"],
                 id="zero-consecutive"),
    pytest.param(job_yaml() + "seed: -1\n", ["seed: must be >= 0, got -1"], id="negative-seed"),
    pytest.param(job_yaml() + "epoch_timeout_s: 0\n", ["epoch_timeout_s: must be > 0, got 0.0"],
                 id="zero-epoch-timeout"),
    # model file
    pytest.param(job_yaml(model="missing.py"), ["model: file not found: {dir}/missing.py"],
                 id="missing-model-file"),
    pytest.param(job_yaml(model="models"), ["model: is a directory, expected a .py file: {dir}/models"],
                 id="model-is-a-directory"),
    pytest.param(job_yaml(model="model.txt"), ["model: must be a .py file, got {dir}/model.txt"],
                 id="model-not-python"),
    pytest.param(job_yaml(model="broken.py"),
                 ["model: syntax error in {dir}/broken.py at line 1: expected ':'"],
                 id="model-syntax-error"),
    pytest.param(
        job_yaml(model="nobuild.py"),
        ["model: {dir}/nobuild.py must define top-level function(s) build_model, load_data; "
         "missing: build_model"],
        id="model-without-build-model",
    ),
    # optimizer
    pytest.param(job_yaml(optimizer="adamw"),
                 [f"optimizer: unknown optimizer 'adamw', allowed: {ALLOWED} (did you mean 'adam'?)"],
                 id="bad-optimizer"),
    pytest.param(job_yaml(optimizer="ftrl"),
                 [f"optimizer: unknown optimizer 'ftrl', allowed: {ALLOWED}"],
                 id="bad-optimizer-no-suggestion"),
    pytest.param(
        job_yaml() + "optimizer_params: {momentum: 0.9, lr: 0.1}\n",
        ["optimizer_params.lr: not allowed here, set the top-level 'learning_rate' field instead"],
        id="lr-in-optimizer-params",
    ),
    pytest.param(
        job_yaml() + "optimizer_params:\n  learning_rate: 0.1\n",
        ["optimizer_params.learning_rate: not allowed here, "
         "set the top-level 'learning_rate' field instead"],
        id="learning-rate-in-optimizer-params",
    ),
    pytest.param(job_yaml() + "optimizer_params: {momentum: high}\n",
                 ["optimizer_params.momentum: expected a number, got str 'high'"],
                 id="string-optimizer-param"),
    pytest.param(job_yaml() + "optimizer_params: [0.9]\n",
                 ["optimizer_params: expected a mapping of parameter name to number, got list [0.9]"],
                 id="optimizer-params-not-a-mapping"),
    # static / dynamic
    pytest.param(job_yaml() + "workers: 4\n", ["servers: required when workers is given (static job)"],
                 id="only-workers"),
    pytest.param(job_yaml() + "servers: 2\n", ["workers: required when servers is given (static job)"],
                 id="only-servers"),
    pytest.param(job_yaml() + "workers: 8\nservers: 2\nmax_workers: 4\n",
                 ["workers: must be <= max_workers (4), got 8"], id="workers-above-max-workers"),
    pytest.param(job_yaml() + "workers: 2\nservers: 3\nmax_servers: 1\n",
                 ["servers: must be <= max_servers (1), got 3"], id="servers-above-max-servers"),
    pytest.param(job_yaml() + "max_workers: 0\n", ["max_workers: must be >= 1, got 0"],
                 id="zero-max-workers"),
    # name is used as a file name
    pytest.param(job_yaml(name="a/b"), [f"name: {NAME_RULE}'a/b'"], id="name-with-slash"),
    pytest.param(job_yaml(name="../escape"), [f"name: {NAME_RULE}'../escape'"], id="name-escape"),
    pytest.param(job_yaml(name='"my job"'), [f"name: {NAME_RULE}'my job'"], id="name-with-space"),
    pytest.param(job_yaml(name='""'), [f"name: {NAME_RULE}''"], id="empty-name"),
    pytest.param(job_yaml(name='"a\\nb"'), [f"name: {NAME_RULE}'a\\nb'"], id="name-with-newline"),
    # the file as a whole
    pytest.param("name: mnist\nbudget: 1: 2\n",
                 ["(file): invalid YAML at line 2: mapping values are not allowed here"],
                 id="invalid-yaml"),
    pytest.param("", ["(file): file is empty, expected a mapping of job fields"], id="empty-file"),
    pytest.param("# only a comment\n", ["(file): file is empty, expected a mapping of job fields"],
                 id="comment-only-file"),
    pytest.param("- name: mnist\n", ["(file): top level must be a mapping of job fields, got list"],
                 id="top-level-list"),
    pytest.param(job_yaml() + "budget: 5.0\n", ["budget: duplicate key (lines 8 and 9)"],
                 id="duplicate-key"),
    pytest.param(job_yaml() + "optimizer_params:\n  wd: 0.1\n  wd: 0.2\n",
                 ["optimizer_params.wd: duplicate key (lines 10 and 11)"],
                 id="duplicate-nested-key"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_JOBS)
def test_a_bad_job_file_is_reported_as_exact_single_lines(
    folder: Path, text: str, expected: list[str]
) -> None:
    path = write(folder, text)

    lines = errors_of(path)

    assert lines == [f"{path}: " + line.replace("{dir}", str(folder)) for line in expected]
    assert all("\n" not in line for line in lines)


def test_enough_distinct_bad_job_files_are_covered() -> None:
    assert len(BAD_JOBS) >= 25


def test_a_nonexistent_job_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"

    assert errors_of(path) == [f"{path}: (file): file not found"]


def test_a_job_path_that_is_a_directory(tmp_path: Path) -> None:
    assert errors_of(tmp_path) == [f"{tmp_path}: (file): is a directory, expected a YAML job file"]


def test_file_in_the_error_is_the_path_exactly_as_given(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(folder, job_yaml(budget="-1"))
    monkeypatch.chdir(folder)

    assert errors_of("./job.yaml") == ["./job.yaml: budget: must be > 0, got -1.0"]


def test_all_problems_of_one_file_are_reported_together(folder: Path) -> None:
    path = write(folder, job_yaml(batch_size="0", budget=None, optimizer="adamx") + "colour: red\n")

    assert errors_of(path) == [
        f"{path}: colour: unknown field",
        f"{path}: budget: required field missing",
        f"{path}: batch_size: must be >= 1, got 0",
        f"{path}: optimizer: unknown optimizer 'adamx', allowed: {ALLOWED} (did you mean 'adam'?)",
    ]


def test_the_error_message_is_the_lines_joined(folder: Path) -> None:
    path = write(folder, job_yaml(budget="0", batch_size="0"))

    with pytest.raises(JobFileError) as excinfo:
        load_job(path)

    assert str(excinfo.value) == "\n".join(excinfo.value.lines)
    assert len(excinfo.value.lines) == 2


# --------------------------------------------------------------------------- several files


def test_load_jobs_returns_specs_in_the_given_order(folder: Path) -> None:
    first = write(folder, job_yaml(name="first"), "first.yaml")
    second = write(folder, job_yaml(name="second") + "workers: 2\nservers: 1\n", "second.yaml")

    specs = load_jobs([str(second), first])

    assert [spec.name for spec in specs] == ["second", "first"]
    assert [spec.fixed_counts for spec in specs] == [(2, 1), None]


def test_load_jobs_rejects_duplicate_job_names_across_files(folder: Path) -> None:
    first = write(folder, job_yaml(name="mnist"), "a.yaml")
    second = write(folder, job_yaml(name="mnist"), "b.yaml")

    with pytest.raises(JobFileError) as excinfo:
        load_jobs([first, second])

    assert excinfo.value.lines == [f"{second}: name: duplicate job name 'mnist' (also in {first})"]


def test_load_jobs_collects_the_errors_of_all_bad_files_in_one_error(folder: Path) -> None:
    good = write(folder, job_yaml(name="good"), "good.yaml")
    no_budget = write(folder, job_yaml(name="no-budget", budget=None), "no_budget.yaml")
    empty = write(folder, "", "empty.yaml")
    missing = folder / "missing.yaml"
    # A file with other problems still takes part in the duplicate-name check.
    clash = write(folder, job_yaml(name="good", batch_size="0"), "clash.yaml")

    with pytest.raises(JobFileError) as excinfo:
        load_jobs([good, no_budget, empty, missing, clash])

    assert excinfo.value.lines == [
        f"{no_budget}: budget: required field missing",
        f"{empty}: (file): file is empty, expected a mapping of job fields",
        f"{missing}: (file): file not found",
        f"{clash}: batch_size: must be >= 1, got 0",
        f"{clash}: name: duplicate job name 'good' (also in {good})",
    ]
    assert all("\n" not in line for line in excinfo.value.lines)


def test_load_jobs_wants_a_sequence_not_a_single_path(folder: Path) -> None:
    with pytest.raises(TypeError):
        load_jobs(str(write(folder, job_yaml())))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- module hygiene


def test_the_model_file_is_parsed_never_executed(folder: Path) -> None:
    (folder / "loud.py").write_text(
        "raise SystemExit('imported!')\n\n"
        "def build_model():\n    return None\n\n"
        "def load_data():\n    return None\n"
    )

    spec = load_job(write(folder, job_yaml(model="loud.py")))

    assert spec.model_path == folder / "loud.py"


def test_the_module_does_not_import_mxnet() -> None:
    import coach.inputs.jobs

    tree = ast.parse(Path(coach.inputs.jobs.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert "mxnet" not in imported
    assert coach.inputs.jobs.__doc__ and "reading" in coach.inputs.jobs.__doc__


def test_two_yaml_documents_in_one_job_file_are_rejected(folder: Path) -> None:
    path = write(folder, job_yaml() + "---\nname: other\n")

    assert errors_of(path) == [
        f"{path}: (file): invalid YAML at line 9: "
        "expected a single document in the stream, but found another document"
    ]


# --------------------------------------------------------------------------- a job already parsed: check_job


def test_check_job_gives_the_spec_that_loading_the_file_gives(folder: Path) -> None:
    path = write(folder, job_yaml(learning_rate="1e-3") + "workers: 2\nservers: 1\n")
    data = yaml.load(path.read_text(), Loader=YamlLoader)

    checked = check_job(data, str(path), folder)

    assert checked == JobCheck((), spec=load_job(path), name="mnist")


# BAD_JOBS whose text parses to one value without repeated keys: a parsed mapping cannot be empty YAML or repeat a key.
PARSED_BAD_JOBS = [param for param in BAD_JOBS if param.id not in
                   ("invalid-yaml", "empty-file", "comment-only-file", "duplicate-key", "duplicate-nested-key")]


@pytest.mark.parametrize(("text", "expected"), PARSED_BAD_JOBS)
def test_check_job_reports_a_parsed_job_exactly_as_its_file(folder: Path, text: str, expected: list[str]) -> None:
    checked = check_job(yaml.load(text, Loader=YamlLoader), "from-memory", folder)

    assert checked.spec is None
    assert list(checked.lines) == ["from-memory: " + line.replace("{dir}", str(folder)) for line in expected]


def test_check_job_resolves_the_model_from_the_folder_it_is_given(folder: Path, tmp_path_factory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    data = yaml.load(job_yaml(), Loader=YamlLoader)

    assert check_job(data, "job", folder).spec.model_path == folder / "model.py"
    assert check_job(data, "job", elsewhere).lines == (f"job: model: file not found: {elsewhere / 'model.py'}",)



# --------------------------------------------------------------------------- bounds and optimizer parameters


def test_every_numeric_field_has_a_bound_table_entry() -> None:
    from coach.inputs.jobs import JOB_BOUNDS

    numeric = {"batch_size", "consecutive", "max_epochs", "workers", "servers", "max_workers", "max_servers",
               "seed", "max_retries", "learning_rate", "target_loss", "budget", "epoch_timeout_s",
               "calibration_fraction"}
    assert set(JOB_BOUNDS) == numeric
    assert all(bound.high < float("inf") for bound in JOB_BOUNDS.values())


@pytest.mark.parametrize(("changes", "extra"), [
    ({"batch_size": "1000000", "max_epochs": "1000000", "budget": "1e12"}, ""),
    ({}, "workers: 1024\nservers: 1024\nmax_retries: 100\nepoch_timeout_s: 604800\nseed: 4294967295\n"),
    ({"max_epochs": "3"}, "consecutive: 3\n"),
])
def test_the_largest_allowed_values_are_accepted(folder: Path, changes, extra) -> None:
    assert load_job(write(folder, job_yaml(**changes) + extra)).name == "mnist"


@pytest.mark.parametrize(("extra", "expected"), [
    ("workers: 1025\nservers: 1\n", "workers: must be <= 1024, got 1025"),
    ("workers: 100000000000000000000\nservers: 1\n", "workers: must be <= 1024, got 100000000000000000000"),
    ("max_retries: 101\n", "max_retries: must be <= 100, got 101"),
    ("seed: 4294967296\n", "seed: must be <= 4294967295, got 4294967296"),
    ("epoch_timeout_s: 604801\n", "epoch_timeout_s: must be <= 604800, got 604801.0"),
    ("consecutive: 21\n", "consecutive: must be <= max_epochs (20), got 21"),
])
def test_one_past_a_bound_is_one_line(folder: Path, extra: str, expected: str) -> None:
    path = write(folder, job_yaml() + extra)

    assert errors_of(path) == [f"{path}: {expected}"]


def test_each_optimizer_accepts_its_own_mxnet_parameters(folder: Path) -> None:
    from coach.inputs.jobs import OPTIMIZER_PARAMS

    for optimizer, names in OPTIMIZER_PARAMS.items():
        params = ", ".join(f"{name}: 0.5" for name in names)
        spec = load_job(write(folder, job_yaml(optimizer=optimizer) + f"optimizer_params: {{{params}}}\n"))
        assert set(spec.optimizer_params) == set(names)


def test_an_unknown_optimizer_parameter_lists_the_allowed_ones(folder: Path) -> None:
    path = write(folder, job_yaml(optimizer="adagrad") + "optimizer_params: {epsilon: 0.1}\n")

    assert errors_of(path) == [
        f"{path}: optimizer_params.epsilon: unknown parameter of optimizer 'adagrad'; allowed: begin_num_update, "
        "clip_gradient, eps, multi_precision, rescale_grad, wd (did you mean 'eps'?)"]


def test_the_optimizer_parameter_table_matches_mxnet() -> None:
    # The table is written out so that validation never imports mxnet; this reads the real signatures once, in a
    # separate process so that this one does not load mxnet.
    from coach.inputs.jobs import MXNET_OPTIMIZER_KWARGS

    script = (
        "import inspect, json\n"
        "from mxnet import optimizer as o\n"
        "out = {}\n"
        "for name in %r:\n"
        "    names = set()\n"
        "    for cls in o.Optimizer.opt_registry[name].__mro__:\n"
        "        init = cls.__dict__.get('__init__')\n"
        "        if init is not None and cls is not object:\n"
        "            names |= {p.name for p in inspect.signature(init).parameters.values()\n"
        "                      if p.name != 'self' and p.kind is not p.VAR_KEYWORD}\n"
        "    out[name] = sorted(names)\n"
        "print(json.dumps(out))\n"
    ) % (sorted(MXNET_OPTIMIZER_KWARGS),)
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    if done.returncode != 0 and "No module named 'mxnet'" in done.stderr:
        pytest.skip("mxnet is not installed")
    assert done.returncode == 0, done.stderr
    signatures = json.loads(done.stdout.splitlines()[-1])
    assert {name: sorted(set(kwargs)) for name, kwargs in MXNET_OPTIMIZER_KWARGS.items()} == signatures


def test_a_control_character_is_one_line_not_a_reader_error(folder: Path) -> None:
    path = write(folder, job_yaml(name="mn\x07ist"))

    assert errors_of(path) == [
        f"{path}: (file): invalid YAML: unacceptable character #x0007: special characters are not allowed"]


def test_load_jobs_reports_a_control_character_with_the_other_files(folder: Path) -> None:
    bad = write(folder, "budget: \x01\n", "bad.yaml")
    good = write(folder, job_yaml(), "good.yaml")

    with pytest.raises(JobFileError) as caught:
        load_jobs([good, bad])

    assert caught.value.lines == [
        f"{bad}: (file): invalid YAML: unacceptable character #x0001: special characters are not allowed"]


def test_an_alias_bomb_is_refused_before_anything_expands_it(folder: Path) -> None:
    bomb = "".join(f"  {c}: &{c} [{', '.join([f'*{chr(ord(c) - 1)}' if c != 'a' else '1'] * 9)}]\n"
                   for c in "abcdefghi")
    path = write(folder, job_yaml() + "optimizer_params:\n" + bomb)

    assert errors_of(path) == [f"{path}: (file): YAML holds more than 10000 values after expanding aliases "
                               "(the limit)"]


def test_an_anchor_used_a_few_times_is_still_fine(folder: Path) -> None:
    path = write(folder, job_yaml() + "optimizer_params: &p {momentum: 0.9}\nx-shared: *p\n")

    assert errors_of(path) == [f"{path}: x-shared: unknown field"]


def test_a_long_value_is_cut_in_the_message(folder: Path) -> None:
    path = write(folder, job_yaml(batch_size='"' + "6" * 5000 + '"'))

    (line,) = errors_of(path)
    assert line == f"{path}: batch_size: expected an integer, got str '{'6' * 36}..."
