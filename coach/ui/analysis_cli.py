"""`coach experiment`, `coach compare` and `coach report`: the analysis commands (wired into coach.cli).

This module only parses arguments, reads and writes files and prints; the statistics are in coach.analysis, the
matrix and the selections in coach.experiment, the figures in coach.plots. Bad input prints one
`WHERE: FIELD: what is wrong` line per problem on stderr and exits with 2, before anything is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from coach.analysis import DEFAULT_TEST
from coach.storage.folders import CannotWrite
from coach.inputs.limits import short
from coach.ui.errors import BadInput, LazyChoices, fail, integer, path_text, percent

#: Most runs per cell `coach experiment --repeat` may ask for (the matrix's `repeat` has the same bound).
MAX_REPEAT = 100


def _console():
    """Rich's console on stdout; a quiet one when stdout is closed (`>&-`: Python's sys.stdout is None), so the
    command still writes its files, as `print` does then."""
    from rich.console import Console

    if sys.stdout is None:
        return Console(quiet=True)
    return Console() if sys.stdout.isatty() else Console(width=140)


def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


# --------------------------------------------------------------------------- experiment


def _detectable_line(found: dict) -> str:
    """How small a difference this comparison could see: so that "no difference" is not read from too few runs."""
    head = f"power: with {found['n_a']} and {found['n_b']} jobs"
    if found["cohens_d"] is None:
        return f"{head} no difference can be detected (at least 2 jobs with a JCT per side are needed)"
    size = f"d = {found['cohens_d']:.2f}"
    if found["jct_s"] is not None:
        size = f"{_num(found['jct_s'])} s" + (f" ({found['percent_of_a_mean']:.1f}% of A's mean JCT, {size})"
                                               if found["percent_of_a_mean"] is not None else f" ({size})")
    return (f"{head}, the smallest difference in mean JCT this test detects (alpha = {found['alpha']:g}, power = "
            f"{found['power']:g}) is {size}; a smaller one may be real and missed")


def cmd_experiment(args) -> int:
    from coach.experiments.matrix import (ALLOCATIONS, MAX_RUNS, MatrixFileError, cells, load_matrix,
                                          run_experiment)

    try:
        matrix = load_matrix(args.matrix)
    except MatrixFileError as error:
        return fail(error.lines)
    runs = len(cells(matrix)) * (args.repeat or matrix.repeat)
    if runs > MAX_RUNS:
        return fail([f"--repeat: {len(cells(matrix))} cells x {args.repeat or matrix.repeat} repeats = {runs} runs, "
                     f"more than {MAX_RUNS}"])
    if args.dry_run:
        plan = cells(matrix)
        repeat = args.repeat or matrix.repeat
        pilot = (f" as a pilot, then up to {MAX_REPEAT} repeats to detect {args.detect * 100:g}%"
                 if args.detect else "")
        print(f"{args.matrix}: ok: {len(plan)} cells x {repeat} repeat(s) = {len(plan) * repeat} runs{pilot} on "
              f"{matrix.cluster.name} ({matrix.cluster.total_slots} slots)")
        for cell in plan:
            counts = ALLOCATIONS[cell.allocation](matrix)
            shown = f" ({counts['workers']} workers, {counts['servers']} servers)" if counts else ""
            print(f"  {cell.cell_id}: {cell.jobs} x {cell.model}, {cell.allocation}{shown}, scheduler {cell.scheduler}")
        return 0
    _folder("--results", args.results)
    report = run_experiment(matrix, Path(args.results), repeat=args.repeat, detect=args.detect,
                            most_repeats=MAX_REPEAT)
    print(f"experiment: {report.experiment_dir}")
    return report.exit_code


def _folder(option: str, folder: str) -> None:
    """BadInput unless `folder` is a folder or does not exist yet (it is created)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise BadInput([f"{option}: {folder}: not a folder"])


# --------------------------------------------------------------------------- compare


def _side_json(selection, stats: dict) -> dict:
    sources = [{"run": run.label, "run_dir": str(run.run_dir), "cell": dict(run.cell) if run.cell else None}
               for run in selection.runs]
    return {"argument": selection.argument, "label": selection.label, **stats, "sources": sources}


#: compare's files in its output folder: key in compare.json's `plots` -> file name.
COMPARE_PLOTS = {"jct_box": "jct_box.png", "epoch_time": "epoch_time.png", "runtime_bars": "runtime_bars.png"}


def compare_selections(a, b, test: str, out_dir: Path) -> dict:
    """Statistics, plots and compare.json for two selections, written whole into out_dir (an absent or empty
    folder; CannotWrite, and nothing written, when that fails); returns what compare.json holds."""
    from coach.analysis import plots, stats as analysis
    from coach.storage.folders import write_files, write_whole
    from coach.storage.results import write_json_atomic

    result = analysis.compare([(r.label, r.summary) for r in a.runs], [(r.label, r.summary) for r in b.runs], test)
    labels = (f"A: {a.label}", f"B: {b.label}")
    sides = (result["a"], result["b"])
    data = {
        "a": _side_json(a, result["a"]),
        "b": _side_json(b, result["b"]),
        "test": result["test"],
        "detectable": result["detectable"],
        "difference_a_minus_b": result["difference_a_minus_b"],
        "paired": result["paired"],
        "plots": dict(COMPARE_PLOTS),
    }
    files = [
        (COMPARE_PLOTS["jct_box"], lambda path: plots.jct_boxplot(
            [(label, [s["jct_s"] for s in side["samples"]]) for label, side in zip(labels, sides)], path)),
        (COMPARE_PLOTS["epoch_time"], lambda path: plots.epoch_time_plot(
            [(label, [record for run in sel.runs for records in run.logs.values() for record in records])
             for label, sel in zip(labels, (a, b))], path)),
        (COMPARE_PLOTS["runtime_bars"], lambda path: plots.runtime_bars(
            [(label, [(f"{s['run']}/{s['job']}", s["jct_s"]) for s in side["samples"]])
             for label, side in zip(labels, sides)], path)),
        ("compare.json", lambda path: write_json_atomic(path, data)),
    ]
    write_whole(out_dir, lambda folder: write_files(folder, files))
    return data


def out_problem(out_dir: Path, replaceable: frozenset[str] = frozenset()) -> str | None:
    """Why the output folder cannot take this command's files, found before any work, or None: not a folder,
    holding files already (but for files named in `replaceable`: a run's own report folder holds an earlier
    report of the same run), or in a place that takes no files."""
    from coach.storage.folders import writable_problem

    if out_dir.exists() and not out_dir.is_dir():
        return "not a folder"
    try:
        held = {entry.name for entry in out_dir.iterdir()} if out_dir.exists() else set()
    except OSError as error:
        return f"cannot read it ({error.strerror or error})"
    others = sorted(held - replaceable)
    if others:
        more = f" and {len(others) - 1} more" if len(others) > 1 else ""
        return (f"holds {short(others[0])}{more} already (an earlier result?); name a new or empty folder with "
                "--out")
    return writable_problem(out_dir.parent)


def _out_line(out_dir: Path, given: bool, message: str) -> str:
    return f"--out: {out_dir}: {message}" if given else f"{out_dir}: (the default --out): {message}"


def print_comparison(data: dict) -> None:
    from rich.table import Table

    from coach.analysis.stats import DESCRIBE_COLUMNS

    console = _console()
    names = [f"A: {data['a']['label']}", f"B: {data['b']['label']}"]
    table = Table(title="Job completion time (s)")
    table.add_column("side")
    for column in DESCRIBE_COLUMNS:
        table.add_column(column, justify="right")
    for name, side in zip(names, (data["a"], data["b"])):
        row = side["jct_s"]
        table.add_row(name, str(row["count"]), *(_num(row[c]) for c in DESCRIBE_COLUMNS[1:]))
    console.print(table)

    runs = Table(title="Per run, mean over runs (s)")
    for column in ("side", "runs", "first job done", "last job done", "makespan", "jobs ended by"):
        runs.add_column(column, justify="left" if column in ("side", "jobs ended by") else "right")
    for name, side in zip(names, (data["a"], data["b"])):
        endings = ", ".join(f"{reason} {count}" for reason, count in side["stop_reasons"].items())
        runs.add_row(name, str(side["runs"]), _num(side["first_job_done_s"]), _num(side["last_job_done_s"]),
                     _num(side["makespan_s"]), endings)
    console.print(runs)

    test = data["test"]
    effects = ", ".join(f"{key} = {_num(value)}" for key, value in test["effect_sizes"].items())
    if test["p_value"] is None:
        console.print(f"{test['title']}: not computed: {test['reason']}; {effects}", highlight=False)
    else:
        console.print(f"{test['title']}: {test['statistic_name']} = {test['statistic']:.4f}, "
                      f"p = {test['p_value']:.4g}; {effects}; mean JCT A - B = "
                      f"{_num(data['difference_a_minus_b']['mean_jct_s'])} s", highlight=False)
    console.print(_detectable_line(data["detectable"]), highlight=False)
    pair = data.get("paired")
    if pair is not None:
        console.print(f"Paired over {pair['pairs']} jobs (B - A): mean {_num(pair['mean_diff_s'])} s, t-test p = "
                      f"{pair['t_p']}, Wilcoxon p = {pair['wilcoxon_p']}, detectable {_num(pair['detectable_s'])} s: "
                      f"{pair['verdict']}", highlight=False)
    for side_name, side in zip(("A", "B"), (data["a"], data["b"])):
        for job in side["excluded_jobs"]:
            console.print(f"{side_name}: left out {job['run']}/{job['job']}: {job['reason']}", highlight=False)


def cmd_compare(args) -> int:
    from coach.experiments.matrix import SelectionError, select_runs
    from coach.storage.results import new_run_id

    selections = []
    for argument in (args.a, args.b):
        try:
            selections.append(select_runs(argument))
        except SelectionError as error:
            return fail([str(error)])
    a, b = selections
    out_dir = Path(args.out) if args.out else a.base_dir / f"compare-{new_run_id()}"
    problem = out_problem(out_dir)
    if problem is not None:
        return fail([_out_line(out_dir, bool(args.out), problem)])
    try:
        data = compare_selections(a, b, args.test, out_dir)
    except CannotWrite as error:
        return fail([_out_line(out_dir, bool(args.out), f"{error}; nothing was written")])
    print_comparison(data)
    print(f"compare: {out_dir / 'compare.json'}")
    print("plots: " + ", ".join(str(out_dir / name) for name in data["plots"].values()))
    return 0


# --------------------------------------------------------------------------- report


#: report's files in its output folder, in the order they are drawn and printed.
REPORT_FILES_IN_ORDER = ("loss.png", "allocation.png", "cost.png")
REPORT_FILES = frozenset(REPORT_FILES_IN_ORDER)


def write_report(run, out_dir: Path, replace: bool = False) -> list[Path]:
    """A run's loss, allocation and cost plots, written whole into out_dir (see compare_selections; `replace`
    lets an earlier report there be replaced); returns the files written."""
    from coach.analysis import plots
    from coach.storage.folders import write_files, write_whole

    started = run.summary["started"]
    budgets = {job: outcome.get("budget") for job, outcome in run.summary["jobs"].items()}
    draw = {"loss.png": lambda path: plots.loss_plot(run.logs, path),
            "allocation.png": lambda path: plots.allocation_plot(run.logs, started, path),
            "cost.png": lambda path: plots.cost_plot(run.logs, budgets, started, path)}
    files = [(name, draw[name]) for name in REPORT_FILES_IN_ORDER]
    write_whole(out_dir, lambda folder: write_files(folder, files), replace=replace)
    return [out_dir / name for name, _ in files]


def cmd_report(args) -> int:
    from coach.experiments.matrix import SUMMARY, SelectionError, read_run

    run_dir = Path(args.run_dir)
    if not (run_dir / SUMMARY).exists():  # one that is not a regular file is named so by read_run
        return fail([f"{args.run_dir}: (argument): not a run folder (no {SUMMARY})"])
    try:
        run = read_run(run_dir, args.run_dir)
    except SelectionError as error:
        return fail([str(error)])
    out_dir = Path(args.out) if args.out else run_dir / "report"
    replace = not args.out  # the run's own report folder holds an earlier report of the same run
    problem = out_problem(out_dir, REPORT_FILES if replace else frozenset())
    if problem is not None:
        return fail([_out_line(out_dir, bool(args.out), problem)])
    try:
        paths = write_report(run, out_dir, replace)
    except CannotWrite as error:
        return fail([_out_line(out_dir, bool(args.out), f"{error}; nothing was written")])
    for path in paths:
        print(f"plot: {path}")
    return 0


# --------------------------------------------------------------------------- wiring


def _test_names() -> list[str]:
    from coach.analysis.stats import TESTS

    return list(TESTS)


def add_commands(sub, subparser=None, epilog: str | None = None) -> None:
    """Add the analysis sub-commands to the `coach` parser's subparsers.

    `subparser(sub, name, **options)` makes each sub-command's parser (coach.ui.cli passes its own, so that help
    keeps its line breaks); `epilog` ends each one's help (the exit codes).
    """
    def make(name: str, **options):
        options = {**options, "epilog": epilog} if epilog else options
        return subparser(sub, name, **options) if subparser else sub.add_parser(name, **options)

    experiment = make("experiment", help="run a matrix of runs (model x jobs x allocation x scheduler)")
    experiment.add_argument("matrix", metavar="MATRIX",
                            help="matrix file (YAML; its format is at the top of coach/experiments/matrix.py)")
    experiment.add_argument("--repeat", type=integer(1, MAX_REPEAT), metavar="N",
                            help=f"runs per cell, 1 <= N <= {MAX_REPEAT} (default: the matrix's repeat)")
    experiment.add_argument("--results", default="results", metavar="DIR",
                            help="folder for results; the experiment goes to DIR/experiments/<id>/ "
                                 "(default: %(default)s)")
    experiment.add_argument("--detect", type=percent(0.0, 100.0), metavar="PCT",
                            help="run the repeats as a pilot, then repeat every cell as often as `coach compare` "
                                 "needs to detect a difference of PCT%% of the mean JCT (alpha 0.05, power 0.8), at "
                                 f"most {MAX_REPEAT} times; 0 < PCT <= 100, e.g. 10%% (default: off)")
    experiment.add_argument("--dry-run", action="store_true",
                            help="validate and list the cells; run nothing (default: off)")
    experiment.set_defaults(func=cmd_experiment)

    compare = make("compare", help="test whether two runs, experiments or groups of cells differ in JCT")
    compare.add_argument("a", metavar="A", help="RUN_DIR, EXPERIMENT_DIR, EXPERIMENT_DIR/CELL or EXPERIMENT_DIR:KEY=VALUE[,...]")
    compare.add_argument("b", metavar="B", help="the same forms as A")
    compare.add_argument("--test", choices=LazyChoices(_test_names), default=DEFAULT_TEST, metavar="TEST",
                         help="statistical test: %(choices)s (default: %(default)s)")
    compare.add_argument("--out", metavar="DIR", type=path_text,
                         help="a new or empty folder for compare.json and the plots (default: compare-<stamp>/ in "
                              "A's experiment folder, or beside A's run folder)")
    compare.set_defaults(func=cmd_compare)

    report = make("report", help="plot a run's loss, workers/servers and cost against budget")
    report.add_argument("run_dir", metavar="RUN_DIR", type=path_text, help="a run folder (with summary.json)")
    report.add_argument("--out", metavar="DIR", type=path_text, help="a new or empty folder for the PNGs (default: RUN_DIR/report, "
                                                     "replacing an earlier report there)")
    report.set_defaults(func=cmd_report)
