"""Do real epochs cut at their deadline reply in time, with how much of the epoch, and what does the stop vote cost?

Runs one LeNet job's four function hosts (PS scheduler, 1 server, 2 workers) on the embedded platform, as
tests/integration/test_runtime_epochs.py does: a warm-up epoch, `--full` whole epochs (deadline 120 s, each from
the last checkpoint), then `--repeat` epochs at each deadline of `--deadlines` (each from the last whole epoch's
checkpoint). For whole epochs it prints the epoch's wall time (the slowest function's HTTP duration) and the
training loop's time per step, the stop vote included; for cut epochs, how many answered 200 with
`stopped_early`, the share of the epoch done, and the slack: deadline minus the slowest function's duration.

    flock /tmp/coach-measure.lock .venv/bin/python benchmarks/partial_epoch.py [--full 6] [--repeat 4]
                                                                                [--deadlines 1.0,1.25,1.5]

Side effects: starts and stops four function hosts; writes to a temporary directory only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coach.domain.contracts import WorkerReply  # noqa: E402
from coach.domain.invocation import Reply  # noqa: E402
from tests.integration.test_runtime_epochs import Epochs  # noqa: E402  (the same four hosts as the tests)

LENET = Path(__file__).resolve().parents[1] / "jobs" / "models" / "lenet.py"
STEPS = 2000 // 32  # the helper trains batches of 32 on each worker's 2,000 digits


def epoch(runner: Epochs, checkpoint: str | None, deadline_s: float):
    """(all answered 200, slowest duration, rank-0 and rank-1 replies or None)."""
    results = runner.run(LENET, learning_rate=0.05, checkpoint_load=checkpoint, deadline_s=deadline_s)
    slowest_s = max(r.duration_s for r in results.values())
    if not all(isinstance(r, Reply) for r in results.values()):
        return False, slowest_s, None
    replies = sorted((WorkerReply.from_dict(r.body) for r in runner.workers(results)), key=lambda r: r.rank)
    return True, slowest_s, replies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--deadlines", default="1.0,1.25,1.5")
    args = parser.parse_args()
    runner = Epochs(Path(tempfile.mkdtemp(prefix="partial-epoch-")))
    try:
        ok, _, replies = epoch(runner, None, 120.0)  # warm-up: loads the data in the hosts
        checkpoint = replies[0].checkpoint_saved
        walls, per_step = [], []
        for _ in range(args.full):
            ok, slowest_s, replies = epoch(runner, checkpoint, 120.0)
            checkpoint = replies[0].checkpoint_saved
            walls.append(slowest_s)
            per_step.append(max(r.compute_s for r in replies) / STEPS)
        print(f"whole epochs ({args.full}): wall median {statistics.median(walls):.3f} s "
              f"(min {min(walls):.3f}, max {max(walls):.3f}); training loop {statistics.median(per_step) * 1e3:.1f} "
              f"ms per step, stop vote included")
        print("deadline_s  answered_200  stopped_early  epoch_fraction(median)  slack_s(min, median)")
        for deadline_s in (float(d) for d in args.deadlines.split(",")):
            answered, stopped, fractions, slacks = 0, 0, [], []
            for _ in range(args.repeat):
                ok, slowest_s, replies = epoch(runner, checkpoint, deadline_s)
                answered += ok
                if ok:
                    slacks.append(deadline_s - slowest_s)
                    if replies[0].stopped_early:
                        stopped += 1
                        fractions.append(sum(r.samples for r in replies) / sum(r.shard_samples for r in replies))
            fraction = f"{statistics.median(fractions):.2f}" if fractions else "-"
            slack = f"{min(slacks):.3f}, {statistics.median(slacks):.3f}" if slacks else "-"
            print(f"{deadline_s:10.2f}  {answered:>5}/{args.repeat:<6}  {stopped:>5}/{args.repeat:<7}  {fraction:>22}  "
                  f"{slack:>20}")
    finally:
        runner.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
