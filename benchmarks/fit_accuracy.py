"""How well do the speed-model forms, fitted on what a job has measured, predict epochs it has not run?

Two modes, so that the slow part (real MXNet epochs) runs once and the fits can be compared again at will:

measure  runs a real job through Coach: dynamic runs for its calibration (the policy's mini-epochs,
         coach.policy.planning.CALIBRATION_POINTS, on a slice of the data) and static runs of full epochs at
         several (workers, servers). `--calibrations N` (default 3) runs N independent calibrations, spread
         evenly between the points: one calibration is one draw of a noisy measurement (on a shared 2-vCPU VM one
         vCPU can run the same work at half speed for seconds, see benchmarks/machine_noise.py), so one alone says
         little about how far the fit is off in general.
         It saves what it measured (calibration log lines and every epoch's time per point) to a JSON file,
         e.g. benchmarks/data/fit_points_lenet.json. Run it under the shared lock on an otherwise idle machine:

    flock /tmp/coach-measure.lock .venv/bin/python benchmarks/fit_accuracy.py measure \\
        --job jobs/lenet-dynamic.yaml --out benchmarks/data/fit_points_lenet.json

compare  re-fits every form of coach.estimates.speed_forms.FORMS from saved files and prints, per form and file,
         the relative error of the predicted epoch time at held-out points, in two settings:
         - calibration: fitted on one calibration's mini-epochs only (what the policy has at the start),
           predicting the measured points calibration did not sample; the median is over every calibration of
           the file and every such point, and each calibration's own median is shown too;
         - leave-one-out: fitted on the calibration plus every other measured point (full epochs, as the policy
           sees once it has run some), predicting the one left out, over every measured point;
         - full-calibration: fitted on the full epochs measured at the calibration counts, predicting the
           others: the form's own error, without that of scaling a mini-epoch to a full epoch.
         Then every file of a model is pooled (`pooled`): the median over every calibration of every file, a seeded
         bootstrap interval for it, the share of calibrations that met the goal alone, and the noise floor (each
         calibration's error at the points it sampled). The verdict, the last line, is the pooled median's.

    .venv/bin/python benchmarks/fit_accuracy.py compare benchmarks/data/fit_runs/*.json [--markdown]

The goal (issue 13): median error <= 10% on the points calibration did not sample, for LeNet and ResNet-18.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, UTC
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coach.estimates.speed import SpeedObservation  # noqa: E402
from coach.estimates.speed_forms import CHOSEN_FORM, FORMS  # noqa: E402
from coach.policy.history import observations  # noqa: E402
from coach.ui.errors import integer  # noqa: E402

DEFAULT_POINTS = "1x1,1x2,2x1,2x2,3x1,1x3,3x2,2x3,4x1,3x3"
GOAL = 0.10
BOOTSTRAP_RESAMPLES = 2000  # seeded: the interval printed is the same on every run
SCHEMA = 2  # 2: "calibrations", every calibration (1: "calibration" only, one)
# Fields of a calibration log line that the fit reads (through coach.policy.history.observations).
CALIBRATION_FIELDS = ("phase", "workers", "servers", "epoch_time_s", "compute_s", "data_fraction", "warmup_s")


class BadInput(Exception):
    """A saved points file that cannot be used: one line naming the file and the field."""


# ---------------------------------------------------------------------------------------------------- measure

def job_file(folder: Path, base: dict, name: str, **fields) -> Path:
    data = {**base, "name": name, "target_loss": 0.0, "budget": 1000.0, **fields}
    for key in ("workers", "servers", "max_workers", "max_servers", "consecutive"):
        if key not in fields:
            data.pop(key, None)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_one(folder: Path, base: dict, name: str, **fields) -> list[dict]:
    from coach.app.run import run_jobs
    from coach.domain.cluster import DEFAULT_CLUSTER
    from coach.inputs.jobs import load_job
    from coach.storage.results import read_log

    spec = load_job(job_file(folder, base, name, **fields))
    report = run_jobs([spec], DEFAULT_CLUSTER, folder / "results", view="quiet")
    return read_log(report.run_dir / f"{name}.jsonl")


def calibration_slots(points: int, calibrations: int) -> list[int]:
    """Before which point (its index) each calibration runs: spread evenly, so that the machine's drift over the
    measurement reaches calibrations and full epochs alike."""
    return [min(round(k * points / calibrations), points - 1) for k in range(calibrations)]


def measure(args) -> int:
    job_path = args.job.resolve()
    base = yaml.safe_load(job_path.read_text())
    base["model"] = str(args.model.resolve() if args.model else (job_path.parent / base["model"]).resolve())
    from epoch_overhead import CpuMeter  # what other processes use meanwhile: the machine is shared
    points = [tuple(int(n) for n in p.split("x")) for p in args.points.split(",")]
    started = time.monotonic()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    print(f"# {' '.join(sys.argv)}  (cpus: {os.cpu_count()})", flush=True)
    saved = {"schema": SCHEMA, "model": args.name or Path(base["model"]).stem, "job": str(args.job),
             "command": " ".join(sys.argv), "cpus": os.cpu_count(), "started": started_at, "duration_s": None,
             "epochs_per_point": args.epochs, "warm_up_epochs_dropped": 1, "calibration_fraction": args.fraction,
             "calibration": [], "calibrations": [], "calibration_foreign_cpu_shares": [], "points": []}
    calibrate_before = calibration_slots(len(points), args.calibrations)
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every point, so that an interrupted measurement keeps what it has
        saved["duration_s"] = round(time.monotonic() - started, 1)
        args.out.write_text(json.dumps(saved, indent=1) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)

        def calibrate() -> None:
            meter = CpuMeter()
            number = len(saved["calibrations"])
            records = run_one(folder, base, f"calibrate{number}", max_epochs=1, calibration_fraction=args.fraction)
            lines = [{k: r.get(k) for k in CALIBRATION_FIELDS} for r in records if r["phase"] == "calibration"]
            saved["calibrations"].append(lines)
            saved["calibration"] = saved["calibrations"][0]  # what readers of schema 1 (choice_regret.py) take
            saved["calibration_foreign_cpu_shares"].append(round(meter.stop()["foreign_share"], 3))
            save()
            print(f"calibration {number + 1}: {len(lines)} mini-epochs, {time.monotonic() - started:.0f} s, "
                  f"others used {saved['calibration_foreign_cpu_shares'][-1]:.0%} of the CPUs", flush=True)

        for index, (workers, servers) in enumerate(points):
            for _ in range(calibrate_before.count(index)):
                calibrate()
            meter = CpuMeter()
            records = [r for r in run_one(folder, base, f"w{workers}s{servers}", workers=workers, servers=servers,
                                          max_epochs=args.epochs) if r["phase"] == "training"]
            saved["points"].append({"workers": workers, "servers": servers,
                                    "epoch_times_s": [r["epoch_time_s"] for r in records],
                                    "compute_s": [r.get("compute_s") for r in records],
                                    "foreign_cpu_share": round(meter.stop()["foreign_share"], 3)})
            save()
            print(f"({workers},{servers}): {[round(r['epoch_time_s'], 3) for r in records]} "
                  f"{time.monotonic() - started:.0f} s, others used {saved['points'][-1]['foreign_cpu_share']:.0%} "
                  f"of the CPUs", flush=True)
    print(f"saved {args.out} ({saved['duration_s']:.0f} s)")
    return 0


# ---------------------------------------------------------------------------------------------------- compare

def load_points(path: Path) -> dict:
    """A saved file, checked: calibration observations and the measured epoch time per point."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise BadInput(f"{path}: (file): {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: (file): expected a JSON object")
    if "calibrations" in data:
        runs = data["calibrations"]
        if not isinstance(runs, list) or not runs:
            raise BadInput(f"{path}: calibrations: expected a non-empty list of calibrations")
        named = [(f"calibrations[{i}]", run) for i, run in enumerate(runs)]
    else:  # schema 1: one calibration
        named = [("calibration", data.get("calibration"))]
    calibrations = []
    for field, calibration in named:
        if not isinstance(calibration, list) or not calibration:
            raise BadInput(f"{path}: {field}: expected a non-empty list of calibration log lines")
        try:
            calibration_obs = observations(calibration)
        except (TypeError, ValueError, KeyError, AttributeError) as error:
            raise BadInput(f"{path}: {field}: {error}") from None
        if not calibration_obs:
            raise BadInput(f"{path}: {field}: no line with phase, workers, servers and epoch_time_s")
        calibrations.append(calibration_obs)
    points = data.get("points")
    if not isinstance(points, list) or not points:
        raise BadInput(f"{path}: points: expected a non-empty list")
    drop = int(data.get("warm_up_epochs_dropped", 1))
    measured = {}
    for i, point in enumerate(points):
        field = f"points[{i}]"
        if not isinstance(point, dict):
            raise BadInput(f"{path}: {field}: expected an object")
        workers, servers, times = point.get("workers"), point.get("servers"), point.get("epoch_times_s")
        if not (isinstance(workers, int) and isinstance(servers, int) and workers >= 1 and servers >= 1):
            raise BadInput(f"{path}: {field}.workers: workers and servers must be integers >= 1")
        if not (isinstance(times, list) and len(times) > drop
                and all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times)):
            raise BadInput(f"{path}: {field}.epoch_times_s: expected more than {drop} finite positive times")
        measured[(workers, servers)] = statistics.median(times[drop:])
    sampled = tuple(dict.fromkeys((o.workers, o.servers) for run in calibrations for o in run))
    if not set(measured) - set(sampled):  # a measurement still under way, or cut short: nothing to predict
        raise BadInput(f"{path}: points: every measured point was sampled by calibration, none is left to predict")
    return {"name": str(data.get("model") or path.stem), "calibrations": calibrations, "measured": measured,
            "duration_s": data.get("duration_s"), "sampled": sampled}


def relative_error(predicted_s: float, measured_s: float) -> float:
    return abs(predicted_s - measured_s) / measured_s


def calibration_errors(form, data) -> list[dict[tuple[int, int], tuple[float, float]]]:
    """Fitted on each calibration alone: (predicted, error) at every measured point, one dict per calibration."""
    errors = []
    for calibration in data["calibrations"]:
        fit = form.fit(calibration)
        errors.append({point: (fit.epoch_time_s(*point), relative_error(fit.epoch_time_s(*point), measured_s))
                       for point, measured_s in data["measured"].items()})
    return errors


def full_calibration_errors(form, data) -> dict[tuple[int, int], float]:
    """Fitted on the full epochs measured at the calibration counts instead of the scaled mini-epochs: the
    error of the form alone, without the error of scaling a mini-epoch to a full epoch."""
    full = [SpeedObservation(w, s, 1.0 / t) for (w, s), t in data["measured"].items() if (w, s) in data["sampled"]]
    if not full:
        return {}
    fit = form.fit(full)
    return {point: relative_error(fit.epoch_time_s(*point), measured_s)
            for point, measured_s in data["measured"].items() if point not in data["sampled"]}


def leave_one_out_errors(form, data) -> dict[tuple[int, int], float]:
    """Fitted on a calibration plus every other measured point (one full-epoch observation each): the median error
    over the file's calibrations, per point."""
    errors = {}
    for held_out, measured_s in data["measured"].items():
        others = [SpeedObservation(w, s, 1.0 / t) for (w, s), t in data["measured"].items() if (w, s) != held_out]
        errors[held_out] = statistics.median(
            relative_error(form.fit(list(calibration) + others).epoch_time_s(*held_out), measured_s)
            for calibration in data["calibrations"])
    return errors


def sampled_errors(calibration, measured) -> list[float]:
    """A calibration's own mini-epochs, scaled to full epochs, against the full epochs measured at the same
    counts: the measurement's noise, which no fit of that calibration can be expected to beat at other points."""
    return [relative_error(1.0 / o.epochs_per_s, measured[o.workers, o.servers])
            for o in calibration if (o.workers, o.servers) in measured]


def held_out(run: dict, data) -> list[float]:
    """One calibration's errors (`calibration_errors`) at the measured points no calibration of its file sampled."""
    return [error for point, (_, error) in run.items() if point not in data["sampled"]]


def pooled(files, runs_by_file, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> dict[str, dict]:
    """Per model, every calibration of every file together (`runs_by_file`: one form's `calibration_errors` of each
    file): the median error on the points each calibration did not sample, a 95% bootstrap interval for it
    (calibrations resampled whole, since one calibration's errors move together), the share of calibrations whose
    own median met the goal, and the noise floor (sampled_errors)."""
    by_model: dict[str, list] = {}
    for data, runs in zip(files, runs_by_file):
        by_model.setdefault(data["name"], []).extend(
            (held_out(run, data), sampled_errors(calibration, data["measured"]))
            for run, calibration in zip(runs, data["calibrations"]))
    rng = np.random.default_rng(seed)
    result = {}
    for model, pairs in by_model.items():
        held = [errors for errors, _ in pairs]
        medians = []
        for _ in range(resamples):
            picked = rng.integers(0, len(held), len(held))
            medians.append(float(np.median(np.concatenate([held[i] for i in picked]))))
        result[model] = {"median": statistics.median(e for errors in held for e in errors),
                         "low": float(np.percentile(medians, 2.5)), "high": float(np.percentile(medians, 97.5)),
                         "calibrations": len(held),
                         "met_share": sum(statistics.median(errors) <= GOAL for errors in held) / len(held),
                         "floor": summary(e for _, floor in pairs for e in floor)[0]}  # nan: none sampled
    return result


def floor_text(floor: float) -> str:
    return f"{floor:.1%}" if math.isfinite(floor) else "none (no sampled count measured)"


def summary(errors) -> tuple[float, float]:
    values = list(errors)
    return (statistics.median(values), max(values)) if values else (math.nan, math.nan)


def compare(args) -> int:
    try:
        files = [load_points(path) for path in args.files]
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    table = []  # (form, model, calibration median, max, per-calibration medians, loo median, max, full-cal.)
    details = {}
    for name, form in FORMS.items():
        for index, data in enumerate(files):
            runs = calibration_errors(form, data)
            per_run = [held_out(run, data) for run in runs]
            loo = leave_one_out_errors(form, data)
            full = full_calibration_errors(form, data)
            table.append((name, data["name"], *summary(e for run in per_run for e in run),
                          "/".join(f"{summary(run)[0]:.0%}" for run in per_run), *summary(loo.values()),
                          summary(full.values())[0]))
            details[name, index] = (runs, loo)  # by file: two files may measure one model

    bar = "|" if args.markdown else " "
    head = ["form", "model", "cal. median", "cal. max", "per calibration", "LOO median", "LOO max",
            "full-cal. median"]
    print(f"{bar}{bar.join(f' {h} ' for h in head)}{bar}")
    if args.markdown:
        print("|" + "---|" * len(head))
    for name, model, cal_med, cal_max, per_run, loo_med, loo_max, full_med in table:
        chosen = " (chosen)" if name == CHOSEN_FORM else ""
        mark = "**" if args.markdown and name == CHOSEN_FORM else ""
        cells = [f"{name}{chosen}", model, f"{mark}{cal_med:.1%}{mark}", f"{cal_max:.1%}", per_run,
                 f"{mark}{loo_med:.1%}{mark}", f"{loo_max:.1%}", f"{full_med:.1%}"]
        print(f"{bar}{bar.join(f' {c} ' for c in cells)}{bar}")

    for index, data in enumerate(files):
        print(f"\n{data['name']} ({args.files[index]}): predicted epoch time s (fitted on calibration only; median over the "
              f"{len(data['calibrations'])} calibrations, and its error) / LOO error; * = sampled by calibration")
        print(f"{bar} w {bar} s {bar} measured s {bar}" + bar.join(f" {n} " for n in FORMS) + bar)
        if args.markdown:
            print("|" + "---|" * (3 + len(FORMS)))
        for point, measured_s in data["measured"].items():
            star = "*" if point in data["sampled"] else ""
            cells = []
            for name in FORMS:
                runs, loo = details[name, index]
                predicted = statistics.median(run[point][0] for run in runs)
                error = relative_error(predicted, measured_s)
                cells.append(f"{predicted:.3f} ({error:.0%}) / {loo[point]:.0%}")
            print(f"{bar} {point[0]}{star} {bar} {point[1]} {bar} {measured_s:.3f} {bar}"
                  + bar.join(f" {c} " for c in cells) + bar)

    pools = {name: pooled(files, [details[name, index][0] for index in range(len(files))]) for name in FORMS}
    print(f"\npooled by model, every calibration of every file: median error on the points calibration did not "
          f"sample [95% bootstrap interval over calibrations]; share of calibrations whose own median met "
          f"{GOAL:.0%}; noise floor = a calibration's own error at the points it sampled")
    head = ["form", "model", "files", "calibrations", "median", "95% interval", "met alone", "noise floor"]
    print(f"{bar}{bar.join(f' {h} ' for h in head)}{bar}")
    if args.markdown:
        print("|" + "---|" * len(head))
    for name, pool in pools.items():
        for model, p in pool.items():
            chosen = " (chosen)" if name == CHOSEN_FORM else ""
            cells = [f"{name}{chosen}", model, str(sum(data["name"] == model for data in files)),
                     str(p["calibrations"]), f"{p['median']:.1%}", f"{p['low']:.1%}-{p['high']:.1%}",
                     f"{p['met_share']:.0%}", floor_text(p["floor"])]
            print(f"{bar}{bar.join(f' {c} ' for c in cells)}{bar}")

    chosen = pools[CHOSEN_FORM]
    met = all(p["median"] <= GOAL for p in chosen.values())
    print(f"\nchosen form {CHOSEN_FORM!r}: median error on points calibration did not sample, over every "
          f"calibration: " + ", ".join(
              f"{model} {p['median']:.1%} [{p['low']:.1%}-{p['high']:.1%}] ({p['calibrations']} calibrations, "
              f"noise floor {floor_text(p['floor'])})" for model, p in chosen.items())
          + f" (goal <= {GOAL:.0%}: {'met' if met else 'NOT met'}"
          + ("" if not met or all(p["high"] <= GOAL for p in chosen.values())
             else "; the interval reaches past the goal: not robustly") + ")")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    m = sub.add_parser("measure", help="run real epochs and save them")
    m.add_argument("--job", type=Path, default=ROOT / "jobs" / "lenet-dynamic.yaml",
                   help="job file whose model and hyper-parameters to use (counts, budget, target are replaced)")
    m.add_argument("--model", type=Path, default=None, help="model file to use instead of the job's")
    m.add_argument("--name", default=None, help="model name in the saved file (default: the model file's stem)")
    m.add_argument("--out", type=Path, required=True, help="JSON file to write")
    m.add_argument("--epochs", type=integer(2, 1000), default=5,
                   help="full epochs per measured point, the first dropped (default 5: the median of four is the "
                        "point's time; one epoch varies by 5-8%% on this VM)")
    m.add_argument("--fraction", type=float, default=0.25, help="calibration data fraction")
    m.add_argument("--points", default=DEFAULT_POINTS, help="comma-separated WxS points to measure")
    m.add_argument("--calibrations", type=integer(1, 10**6), default=3,
                   help="independent calibrations, spread evenly between the points (default 3)")
    c = sub.add_parser("compare", help="re-fit every form on saved files and compare")
    c.add_argument("files", type=Path, nargs="+")
    c.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args(argv)
    return measure(args) if args.mode == "measure" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
