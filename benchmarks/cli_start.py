"""How long the light commands take from exec to exit: `coach --version`, `validate`, `status`, `submit`, `stop`.

Goal: each at most 0.5 s on a 2-core machine. They import no MXNet, numpy or scipy (an install without the `run`
extra runs them: tests/unit/test_install_without_run_extra.py), so what is left is Python's start, argparse and
the command's own work. `status`, `submit` and `stop` talk to a stand-in server on loopback that answers as
`coach serve` does, so that the figure is the client's and not a training run's.

    .venv/bin/python benchmarks/cli_start.py [--repeat 7]

Prints one row per command: the median and the slowest of the repeats, in seconds, and whether the median meets
the goal; exits 1 when one does not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COACH = str(Path(sys.executable).parent / "coach")
GOAL_S = 0.5
JOB = {"job": "lenet-mnist", "phase": "training", "epoch": 3, "loss": 0.41, "val_loss": 0.39, "workers": 2,
       "servers": 1, "cost": 0.01, "budget": 0.05, "message": ""}


class StandIn(BaseHTTPRequestHandler):
    """Answers `coach serve`'s three client endpoints with what the server would say."""

    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer({"run_id": "bench", "jobs": [JOB]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer({"job": "lenet-mnist", "run_id": "bench"} if self.path == "/api/jobs" else {"stopping": True})

    def log_message(self, *args) -> None:
        pass


def seconds(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([COACH, *argv], capture_output=True, cwd=ROOT)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"coach {' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="runs of each command (default: %(default)s)")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    commands = {
        "--version": ["--version"],
        "validate": ["validate", "jobs/lenet-mnist.yaml"],
        "status": ["status", "--server", url],
        "submit": ["submit", "--server", url, "jobs/lenet-mnist.yaml"],
        "stop": ["stop", "--server", url, "lenet-mnist"],
    }
    missed = 0
    print(f"{'command':<10} {'median_s':>9} {'slowest_s':>10}  goal <= {GOAL_S} s")
    for name, argv in commands.items():
        seconds(argv)  # once to warm the page cache
        times = [seconds(argv) for _ in range(args.repeat)]
        median = statistics.median(times)
        missed += median > GOAL_S
        print(f"{name:<10} {median:>9.3f} {max(times):>10.3f}  {'ok' if median <= GOAL_S else 'MISSED'}")
    server.shutdown()
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
