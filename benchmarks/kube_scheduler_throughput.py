"""Pods bound per second by `coach scheduler` and by kube-scheduler, side by side, on the suite's real control plane.

Starts etcd, kube-apiserver and kube-scheduler (built from tests/controlplane/go.mod; kube-scheduler's client QPS
and burst raised to 5,000 as its scheduler_perf raises them), installs the PodGroup CRD, then runs
`coach bench kube-scheduler --kubeconfig ...`, which measures both schedulers on the same nodes and pods in one
run. Prints the bench's JSON line and the machine's load.

    .venv/bin/python benchmarks/kube_scheduler_throughput.py [--nodes 5000] [--pods 10000] [--binder process]

Goal: Coach's scheduler at least as fast as kube-scheduler (ratio >= 1.0), every pod bound once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.controlplane.cluster import ControlPlane  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--slots-per-node", type=int, default=4)
    parser.add_argument("--binder", default="process", choices=("process", "threads"))
    parser.add_argument("--profile", default="gang")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coach-kube-bench-") as folder:
        with ControlPlane(Path(folder) / "plane") as plane:
            plane.apply_crd(ROOT / "deploy" / "crds" / "podgroup-crd.yaml")
            plane.start_kube_scheduler(qps=5000, burst=5000)
            kubeconfig = plane.write_kubeconfig(Path(folder) / "admin.kubeconfig")
            load_before = os.getloadavg()
            done = subprocess.run(
                [str(Path(sys.executable).with_name("coach")), "bench", "kube-scheduler", "--kubeconfig",
                 str(kubeconfig), "--nodes", str(args.nodes), "--pods", str(args.pods), "--slots-per-node",
                 str(args.slots_per_node), "--binder", args.binder, "--profile", args.profile],
                capture_output=True, text=True)
            sys.stderr.write(done.stderr)
            if done.returncode not in (0, 1) or not done.stdout.strip():
                return done.returncode or 1
            result = json.loads(done.stdout)
            result["loadavg_before"] = [round(x, 2) for x in load_before]
            result["apiserver_start_s"] = round(plane.start_s, 1)
            print(json.dumps(result))
            return done.returncode


if __name__ == "__main__":
    sys.exit(main())
