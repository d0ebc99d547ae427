"""How well does the speed surface fitted on the four calibration mini-epochs predict real epochs?

Runs a real job through Coach: one dynamic run for its calibration (4 mini-epochs at (1,1), (1,2), (2,1),
(2,2) on a slice of the data), then static runs of full epochs at several (workers, servers). Fits the surface
on the calibration points only and prints, per point, the predicted and measured epoch time and the relative
error, and the median error over the points that calibration did not sample. Goal: median under 15%.

    .venv/bin/python benchmarks/fit_accuracy.py [--model jobs/models/lenet.py] [--epochs 3]

Run by hand on an otherwise idle machine; each (w, s) runs alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

from coach.domain.cluster import DEFAULT_CLUSTER
from coach.files.jobs import load_job
from coach.model.speed import fit_speed
from coach.policy.history import observations
from coach.policy.planning import CALIBRATION_POINTS
from coach.storage.results import read_log
from coach.app.run import run_jobs

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_POINTS = "1x1,1x2,2x1,2x2,3x1,1x3,3x2,2x3,4x1,3x3"


def job_file(folder: Path, name: str, model: Path, **fields) -> Path:
    data = {"name": name, "model": str(model), "batch_size": 64, "optimizer": "sgd",
            "optimizer_params": {"momentum": 0.9}, "learning_rate": 0.05, "target_loss": 0.0,
            "max_epochs": 3, "budget": 1000.0, **fields}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_one(folder: Path, name: str, model: Path, **fields) -> list[dict]:
    spec = load_job(job_file(folder, name, model, **fields))
    report = run_jobs([spec], DEFAULT_CLUSTER, folder / "results", view="quiet")
    return read_log(report.run_dir / f"{name}.jsonl")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "jobs" / "models" / "lenet.py")
    parser.add_argument("--epochs", type=int, default=3, help="full epochs per measured point (first dropped)")
    parser.add_argument("--fraction", type=float, default=0.25, help="calibration data fraction")
    parser.add_argument("--points", default=DEFAULT_POINTS, help="comma-separated WxS points to measure")
    args = parser.parse_args(argv)
    points = [tuple(int(n) for n in p.split("x")) for p in args.points.split(",")]
    print(f"# {' '.join(sys.argv)}  (cpus: {os.cpu_count()})")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        calibration = [r for r in run_one(folder, "calibrate", args.model.resolve(), max_epochs=1,
                                          calibration_fraction=args.fraction) if r["phase"] == "calibration"]
        fit = fit_speed(observations(calibration))
        rows = []
        for workers, servers in points:
            records = run_one(folder, f"w{workers}s{servers}", args.model.resolve(), workers=workers,
                              servers=servers, max_epochs=args.epochs)
            times = [r["epoch_time_s"] for r in records if r["phase"] == "training"][1:]  # drop the warm-up
            measured_s = statistics.median(times)
            predicted_s = fit.epoch_time_s(workers, servers)
            rows.append((workers, servers, predicted_s, measured_s, abs(predicted_s - measured_s) / measured_s))

    print(f"fit on calibration: b1={fit.b1:.4g} b2={fit.b2:.3g} b3={fit.b3:.4g} b4={fit.b4:.3g} b5={fit.b5:.4g}")
    for note in fit.notes:
        print(f"  note: {note}")
    print(f"{'w':>2} {'s':>2} {'predicted s':>12} {'measured s':>11} {'error':>7}  sampled")
    for workers, servers, predicted_s, measured_s, error in rows:
        sampled = "calibration" if (workers, servers) in CALIBRATION_POINTS else ""
        print(f"{workers:>2} {servers:>2} {predicted_s:>12.3f} {measured_s:>11.3f} {error:>6.1%}  {sampled}")
    unseen = [row[4] for row in rows if (row[0], row[1]) not in CALIBRATION_POINTS]
    everywhere = [row[4] for row in rows]
    print(f"median error, points calibration did not sample: {statistics.median(unseen):.1%} (goal < 15%)"
          if unseen else "no unsampled points measured")
    print(f"median error, all points: {statistics.median(everywhere):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
