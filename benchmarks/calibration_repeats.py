"""How far is each calibration mini-epoch, scaled to a full epoch, from the full epochs at the same counts?

Runs one real dynamic job through Coach whose calibration repeats the policy's points `--repeats` times (the
`coach` policy with a repeated calibration, registered for this run only), then static runs of `--epochs` full
epochs at each calibration point, and prints every mini-epoch's parts (fixed part, loop time / data fraction, the
warm-up it reports) against the full epochs' (median of all but the first), and the error of its full-epoch
estimate (coach.policy.history.full_epoch_time_s, what the speed fit is given).

    flock /tmp/coach-measure.lock .venv/bin/python benchmarks/calibration_repeats.py [--job jobs/lenet-dynamic.yaml]
        [--repeats 3] [--epochs 4] [--out FILE.json]

Takes about 1 minute for LeNet on 2 cores (fast day). Side effects: a temporary results folder, removed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coach.app.run_policies import RUN_POLICIES  # noqa: E402
from coach.domain.jobs import JobSpec  # noqa: E402
from coach.policy.history import full_epoch_time_s  # noqa: E402
from coach.policy.run_policy import CoachPolicy  # noqa: E402

POLICY = "coach-repeated-calibration"


@dataclass(frozen=True)
class RepeatedCalibration(CoachPolicy):
    """`coach`, calibrating at its points `repeats` times over."""

    repeats: int = 3

    def calibration(self, spec: JobSpec) -> tuple[tuple[int, int], ...]:
        return super().calibration(spec) * self.repeats


def run(folder: Path, base: dict, name: str, policy: str, **fields) -> list[dict]:
    from coach.app.run import run_jobs
    from coach.domain.cluster import DEFAULT_CLUSTER
    from coach.inputs.jobs import load_job
    from coach.storage.results import read_log

    data = {**base, "name": name, "target_loss": 0.0, "budget": 1000.0, **fields}
    for key in ("workers", "servers", "consecutive"):  # consecutive: its default fits any max_epochs
        if key not in fields:
            data.pop(key, None)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    report = run_jobs([load_job(path)], DEFAULT_CLUSTER, folder / "results", view="quiet", policy=policy)
    return read_log(report.run_dir / f"{name}.jsonl")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", type=Path, default=ROOT / "jobs" / "lenet-dynamic.yaml")
    parser.add_argument("--model", type=Path, help="another model file for the job (default: the job's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="full epochs per point (the first is dropped)")
    parser.add_argument("--out", type=Path, help="save what was measured as JSON")
    args = parser.parse_args(argv)
    base = yaml.safe_load(args.job.read_text())
    base["model"] = str(args.model.resolve() if args.model else (args.job.parent / base["model"]).resolve())
    RUN_POLICIES[POLICY] = RepeatedCalibration(repeats=args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        mini = [r for r in run(folder, base, "calibrate", POLICY, max_epochs=1) if r["phase"] == "calibration"]
        points = list(dict.fromkeys((r["workers"], r["servers"]) for r in mini))
        full = {}
        for w, s in points:
            records = run(folder, base, f"w{w}s{s}", "static", workers=w, servers=s, max_epochs=args.epochs)
            full[w, s] = [r for r in records if r["phase"] == "training"][1:]
    print(f"{'w,s':>5} {'fixed s (full)':>15} {'loop/q s (full)':>16} {'warm-up s':>10} {'estimate s':>11} "
          f"{'full s':>7} {'error':>7}")
    rows = []
    for r in mini:
        w, s = r["workers"], r["servers"]
        epochs = full[w, s]
        full_s = statistics.median(e["epoch_time_s"] for e in epochs)
        full_loop_s = statistics.median(e["compute_s"] for e in epochs)
        estimate = full_epoch_time_s(r["epoch_time_s"], r["compute_s"], r["data_fraction"], r.get("warmup_s"))
        rows.append({"workers": w, "servers": s, "epoch_time_s": r["epoch_time_s"], "compute_s": r["compute_s"],
                     "warmup_s": r.get("warmup_s"), "estimate_s": estimate, "full_s": full_s})
        print(f"{w},{s:<3} {r['epoch_time_s'] - r['compute_s']:>6.3f} ({full_s - full_loop_s:.3f}) "
              f"{r['compute_s'] / r['data_fraction']:>7.3f} ({full_loop_s:.3f}) {r.get('warmup_s') or 0:>10.4f} "
              f"{estimate:>11.3f} {full_s:>7.3f} {estimate / full_s - 1:>+7.1%}")
    errors = [abs(row["estimate_s"] / row["full_s"] - 1) for row in rows]
    print(f"median |error| {statistics.median(errors):.1%}, max {max(errors):.1%} over {len(rows)} mini-epochs")
    if args.out:
        args.out.write_text(json.dumps({"job": str(args.job), "repeats": args.repeats, "mini_epochs": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
