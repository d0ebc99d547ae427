"""How steady are this machine's CPUs? The same fixed work, timed in chunks, by one process alone and then by one
process per CPU at once.

Why: every speed Coach measures (calibration mini-epochs, full epochs, the overhead ratio) is only as steady as the
cores under it. On a dedicated machine each process of the second phase runs its chunks about as fast as the lone
process did. On a shared VM a vCPU can run the same work much slower for seconds while the process still holds
it (its CPU time grows with its wall time), which no scheduling inside the VM can avoid: a calibration
mini-epoch that falls into such a stretch is measured slow. Run it before trusting one measurement:

    .venv/bin/python benchmarks/machine_noise.py [--chunks 30] [--work 3000000]

Takes about 2 x chunks x 0.2 s (the chunk time of a fast core). Prints per process the median, fastest and slowest
chunk, and the CPU time the VM's host took away (steal, from /proc/stat where there is one).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coach.ui.errors import integer  # noqa: E402


def chunk_times_s(chunks: int, work: int, start=None) -> list:
    """(wall s, CPU s) of each chunk of `work` additions."""
    if start is not None:
        start.wait()
    times = []
    for _ in range(chunks):
        wall, cpu = time.perf_counter(), time.process_time()
        total = 0
        for i in range(work):
            total += i
        times.append((time.perf_counter() - wall, time.process_time() - cpu))
    return times


def _report(results, index: int, chunks: int, work: int, start) -> None:
    results.put((index, chunk_times_s(chunks, work, start)))


def all_at_once(processes: int, chunks: int, work: int) -> list[list]:
    """Each process's chunk times, the processes started together (forked: nothing needs to be importable)."""
    context = multiprocessing.get_context("fork")
    start, results = context.Barrier(processes), context.Queue()
    children = [context.Process(target=_report, args=(results, i, chunks, work, start), daemon=True)
                for i in range(processes)]
    for child in children:
        child.start()
    found: dict[int, list] = {}
    try:
        while len(found) < processes:
            try:
                index, times = results.get(timeout=1.0)
            except queue.Empty:  # a child that died never reports: say so instead of waiting for ever
                if not all(child.is_alive() or child.exitcode == 0 for child in children):
                    raise RuntimeError("a timing process died before it reported") from None
                continue
            found[index] = times
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
    return [found[i] for i in range(processes)]


def cpu_ticks() -> list[int] | None:
    """/proc/stat's first line (user nice system idle iowait irq softirq steal ...), or None elsewhere."""
    try:
        return [int(n) for n in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None


def describe(times: list) -> dict:
    """What one process's chunks say: median, fastest and slowest wall time, and the CPU share it held."""
    walls = [wall for wall, _ in times]
    return {"median_s": statistics.median(walls), "fastest_s": min(walls), "slowest_s": max(walls),
            "cpu_share": sum(cpu for _, cpu in times) / sum(walls)}


def steal_share(before: list[int] | None, after: list[int] | None) -> float | None:
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    spent = [b - a for a, b in zip(before, after)]
    return spent[7] / sum(spent) if sum(spent) else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=integer(2, 10_000), default=30, metavar="N",
                        help="chunks per process (2-10000, default 30)")
    parser.add_argument("--work", type=integer(1000, 10**9), default=3_000_000, metavar="N",
                        help="additions per chunk (1000-1e9, default 3,000,000: 0.1-0.2 s on one core)")
    args = parser.parse_args(argv)
    cpus = os.cpu_count() or 1
    alone = describe(chunk_times_s(args.chunks, args.work))
    before = cpu_ticks()
    try:
        together = [describe(times) for times in all_at_once(cpus, args.chunks, args.work)]
    except RuntimeError as error:
        print(f"error: machine_noise: {error}", file=sys.stderr)
        return 1
    steal = steal_share(before, cpu_ticks())
    print(f"{cpus} CPUs, {args.chunks} chunks of {args.work:,} additions per process")
    print(f"{'process':>20} {'median s':>9} {'fastest s':>10} {'slowest s':>10} {'CPU share':>10} {'vs alone':>9}")
    for name, row in [("alone", alone)] + [(f"{i + 1} of {cpus} at once", r) for i, r in enumerate(together)]:
        print(f"{name:>20} {row['median_s']:>9.3f} {row['fastest_s']:>10.3f} {row['slowest_s']:>10.3f} "
              f"{row['cpu_share']:>10.0%} {row['median_s'] / alone['median_s']:>8.2f}x")
    print("steal (CPU time the VM's host took), while all ran: "
          + ("unknown (no /proc/stat)" if steal is None else f"{steal:.1%}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
