"""How long does the embedded platform take to start a function host, and what memory does one hold?

Why: every placed function is a warm host that imports MXNet (seconds of CPU); a job of four functions on two
cores waited seconds for its hosts when each imported it. Hosts are forked from a template process that imported
MXNet once (coach/platforms/template.py). This measures both ways, one host at a time on an otherwise idle machine:

- a fresh process, `python -m coach.platforms.host` (as the platform started hosts before), until it prints READY;
- `LocalPlatform.deploy` through the template: the first host (the template's imports included), then the rest;

and each way's proportional memory (PSS, from /proc/<pid>/smaps_rollup: shared pages split between their users).

    .venv/bin/python benchmarks/host_start.py [--hosts 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coach.domain.identity import FunctionId, Role  # noqa: E402
from coach.domain.invocation import Failure  # noqa: E402
from coach.platforms.host import TOKEN_ENV  # noqa: E402
from coach.platforms.local import ROLE_HANDLERS, LocalPlatform  # noqa: E402
from coach.platforms.template import template_for  # noqa: E402
from coach.ui.errors import integer  # noqa: E402

TOKEN = "benchmark"


def pss_mib(pid: int) -> float:
    """Proportional set size of `pid` in MiB (0 where the kernel does not tell it)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def fresh_hosts(count: int) -> tuple[list[float], list[float]]:
    """(seconds to READY, PSS MiB) of `count` hosts started as their own processes, one at a time."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", TOKEN_ENV: TOKEN}
    times, memory = [], []
    for index in range(count):
        started = time.monotonic()
        process = subprocess.Popen([sys.executable, "-m", "coach.platforms.host", "--handler",
                                    ROLE_HANDLERS[Role.WORKER], "--name", f"fresh-{index}"], cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            line = process.stdout.readline().decode()
            if not line.startswith("READY "):
                raise SystemExit(f"host_start: a fresh host did not start (exit code {process.poll()})")
            times.append(time.monotonic() - started)
            time.sleep(0.5)  # its spare epoch child forks meanwhile, as in a run
            memory.append(pss_mib(process.pid))
        finally:
            process.kill()
            process.wait()
            process.stdout.close()
    return times, memory


def forked_hosts(count: int) -> tuple[list[float], list[float], float]:
    """(seconds per deploy, PSS MiB per host, the template's PSS MiB) of `count` hosts from a new template."""
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory() as folder:
        platform = LocalPlatform(Path(folder), TOKEN)
        try:
            times, pids = [], []
            for index in range(count):
                started = time.monotonic()
                ref = platform.deploy(FunctionId("bench", Role.WORKER, index), "local")
                if isinstance(ref, Failure):
                    raise SystemExit(f"host_start: {ref.describe()}")
                times.append(time.monotonic() - started)
                pids.append(int(ref.instance))
            time.sleep(0.5)
            memory = [pss_mib(pid) for pid in pids]
            template_mib = pss_mib(template_for(platform.env).pid)
        finally:
            platform.close()
    return times, memory, template_mib


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=integer(2, 100), default=8, help="hosts to start each way (default 8)")
    args = parser.parse_args(argv)
    fresh_s, fresh_mib = fresh_hosts(args.hosts)
    forked_s, forked_mib, template_mib = forked_hosts(args.hosts)
    print(f"# benchmarks/host_start.py --hosts {args.hosts}  (cpus: {os.cpu_count()})")
    print("| way | start (median, range) | PSS per host (median) |")
    print("|---|---|---|")
    print(f"| fresh process | {statistics.median(fresh_s):.2f} s ({min(fresh_s):.2f}-{max(fresh_s):.2f}) | "
          f"{statistics.median(fresh_mib):.0f} MiB |")
    print(f"| template, first host (its imports included) | {forked_s[0]:.2f} s | {forked_mib[0]:.0f} MiB |")
    rest = forked_s[1:]
    print(f"| template, the next {len(rest)} | {statistics.median(rest) * 1000:.0f} ms "
          f"({min(rest) * 1000:.0f}-{max(rest) * 1000:.0f}) | {statistics.median(forked_mib[1:]):.0f} MiB |")
    print(f"| the template itself | | {template_mib:.0f} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
