"""Memory of `coach experiment` for its whole process group: the controller, the template that forks the function
hosts, every host and every epoch child (issue 37, item 4: below 1.5 GB on the example matrix).

`coach experiment MATRIX` runs as its own process group (a new session), and every `--every` seconds the script
sums, over the group's live processes, VmRSS from /proc/<pid>/status and PSS from /proc/<pid>/smaps_rollup. RSS
counts the pages that forked hosts share with their template once per process (an overestimate of what the group
holds); PSS divides each shared page among the processes that map it, so the sum of PSS is what the group really
occupies, and the goal is on it (measured 2026-11-28 on jobs/experiments/tiny.yaml: 32 processes at the peak,
one run's 10 hosts and their epoch children; PSS 0.8 GB, the RSS sum 4.9 GB). It prints the peak of each sum, the number of processes at that moment and the command's exit code,
as one JSON line:

    .venv/bin/python benchmarks/experiment_memory.py                      # jobs/experiments/tiny.yaml
    .venv/bin/python benchmarks/experiment_memory.py jobs/experiments/batch-scaling.yaml --every 0.2

Side effects: the experiment's folder under a temporary results folder, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MATRIX = REPO / "jobs" / "experiments" / "tiny.yaml"
GOAL_BYTES = 1.5 * 1024**3


def group_members(group: int) -> list[int]:
    """The live (not zombie) processes of process group `group`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _kib(path: Path, key: str) -> int:
    """The value in kB of line `key:` of a /proc file; 0 when the process is gone or has no such line."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def sample(group: int) -> tuple[int, int, int]:
    """(RSS bytes, PSS bytes, processes) of the group now."""
    members = group_members(group)
    rss = sum(_kib(Path(f"/proc/{pid}/status"), "VmRSS") for pid in members)
    pss = sum(_kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss") for pid in members)
    return rss * 1024, pss * 1024, len(members)


def measure(matrix: Path, every_s: float) -> dict:
    """Run `coach experiment matrix` and sample its process group until it exits; the peaks."""
    with tempfile.TemporaryDirectory(prefix="coach-experiment-memory-") as results:
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "coach.ui.cli", "experiment", str(matrix),
                                    "--results", results], cwd=REPO, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
        peak = {"rss_bytes": 0, "pss_bytes": 0, "processes_at_pss_peak": 0, "most_processes": 0}
        while process.poll() is None:
            rss, pss, count = sample(process.pid)
            peak["rss_bytes"] = max(peak["rss_bytes"], rss)
            peak["most_processes"] = max(peak["most_processes"], count)
            if pss > peak["pss_bytes"]:
                peak["pss_bytes"], peak["processes_at_pss_peak"] = pss, count
            time.sleep(every_s)
        stderr = process.stderr.read() if process.stderr else ""
        return {"matrix": str(matrix.relative_to(REPO) if matrix.is_relative_to(REPO) else matrix),
                "exit_code": process.returncode, "seconds": round(time.monotonic() - started, 1),
                "peak_rss_mib": round(peak["rss_bytes"] / 2**20), "peak_pss_mib": round(peak["pss_bytes"] / 2**20),
                "processes_at_pss_peak": peak["processes_at_pss_peak"], "most_processes": peak["most_processes"],
                "within_goal": peak["pss_bytes"] <= GOAL_BYTES,  # PSS: what the group occupies (docstring)
                "stderr": stderr.strip()[-500:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("matrix", nargs="?", type=Path, default=DEFAULT_MATRIX)
    parser.add_argument("--every", type=float, default=0.2, help="seconds between samples (default: %(default)s)")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.matrix.resolve(), args.every)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
