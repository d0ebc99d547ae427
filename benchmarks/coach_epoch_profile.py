"""Where a Coach epoch's time goes, segment by segment, inside the forked worker child.

Runs one Coach job (same defaults as epoch_overhead.py) on the local platform, but its function hosts are
started through this file, which wraps a few functions of `coach_functions` and MXNet with timers *in the
host process only* (nothing in the repository is modified; children inherit the wrappers through fork).
Each wrapper ends with `mx.nd.waitall()` so asynchronous engine work is charged to the segment that queued it;
this serialises a little and makes the profiled epochs slightly slower than unprofiled ones.

    .venv/bin/python benchmarks/coach_epoch_profile.py [--model PATH] [--workers 2] [--servers 1] [--epochs 8]

Prints, per worker rank, the median over epochs 2.. of every segment, and the parent-side split (fork,
host + HTTP) from the controller's own timings. Side effects: starts and stops function hosts; writes to a
temporary directory only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for entry in (str(REPO), str(BENCH)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

SEGMENTS = (
    ("fork", "fork (or hand-off to the spare child) until the epoch code starts"),
    ("wait_scheduler", "what-if scheduler-first: wait until the scheduler's port accepts"),
    ("kv_create", "mx.kv.create('dist_sync'): ps-lite start + rendezvous with scheduler"),
    ("shard_build", "shard + seed + build_model() (hybridize)"),
    ("init_forward", "net.initialize + first forward (shape inference, CachedOp)"),
    ("load_params", "net.load_parameters(checkpoint)"),
    ("trainer_load_states", "Trainer(...) + load_states: kvstore init/broadcast of params"),
    ("first_step", "first batch (forward/backward/push/pull), inside compute_s"),
    ("other_steps", "remaining batches, inside compute_s"),
    ("validate", "shared validation: this worker's slice, then the kvstore sum"),
    ("save", "rank 0 checkpoint save (params + states)"),
    ("shutdown", "del trainer/net/kvstore + gc.collect: ps-lite finalize, server/scheduler stop"),
)


# ------------------------------------------------------------------------------------------- host side


WHAT_IF = set(filter(None, os.environ.get("COACH_PROFILE_WHAT_IF", "").split(",")))
WHAT_IFS = ("scheduler-first",)


def wait_for_scheduler(request, limit_s: float = 10.0) -> None:
    """What-if `scheduler-first`: connect to the scheduler only once it listens.

    A ps-lite node that connects before the scheduler has bound its port waits for ZeroMQ's reconnect
    interval (100 ms) and then for one more 100 ms poll in ps-lite's Van::Start; probing the port first avoids it.
    """
    import socket

    address = (request.ps.root_uri, request.ps.root_port)  # request: a coach.domain.contracts.EpochRequest
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(address, timeout=0.05):
                return
        except OSError:
            time.sleep(0.002)


def install_wrappers() -> None:
    """Wrap coach_functions/MXNet functions with timers; called in the warm host before any fork."""
    import gc as real_gc

    import mxnet as mx
    from mxnet import gluon

    from coach_functions import spares, training

    marks: list[tuple[str, float]] = []
    steps: list[float] = []

    def mark(name: str) -> None:
        marks.append((name, time.monotonic()))

    def timed(name: str, fn, sync: bool = True):
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            if sync:
                mx.nd.waitall()
            mark(name)
            return result
        return wrapper

    original_epoch = spares.run_worker_epoch

    def run_worker_epoch(request, module, data, *rest):
        marks.clear()
        steps.clear()
        if not getattr(module, "_profiled", False):
            module.build_model = timed("shard_build", module.build_model)
            module._profiled = True
        entered = time.monotonic()
        mark("entered")
        if "scheduler-first" in WHAT_IF:
            wait_for_scheduler(request)
            mark("wait_scheduler")
        reply = original_epoch(request, module, data, *rest)
        mark("returned")
        if steps:
            marks.append(("other_steps", steps[-1]))  # end of the training loop (every batch syncs on asscalar)
        marks.sort(key=lambda item: item[1])
        out, previous = {}, entered
        for name, at in marks[1:]:
            out[name] = out.get(name, 0.0) + (at - previous)
            previous = at
        out["steps"] = len(steps)
        reply["profile"] = out
        reply["profile_entered_s"] = entered
        reply["profile_returned_s"] = time.monotonic()
        return reply

    spares.run_worker_epoch = run_worker_epoch
    original_ps_node = spares.run_ps_node

    def run_ps_node(request):
        if request.role == "server" and "scheduler-first" in WHAT_IF:
            wait_for_scheduler(request)
        return original_ps_node(request)

    spares.run_ps_node = run_ps_node
    mx.kv.create = timed("kv_create", mx.kv.create)

    original_load = gluon.Block.load_parameters

    def load_parameters(self, *args, **kwargs):
        mx.nd.waitall()
        mark("init_forward")
        result = original_load(self, *args, **kwargs)
        mx.nd.waitall()
        mark("load_params")
        return result

    gluon.Block.load_parameters = load_parameters
    gluon.HybridBlock.load_parameters = load_parameters
    gluon.Trainer.load_states = timed("trainer_load_states", gluon.Trainer.load_states)

    original_step = gluon.Trainer.step

    def step(self, *args, **kwargs):
        result = original_step(self, *args, **kwargs)
        if not steps:
            mx.nd.waitall()
            mark("first_step")
        steps.append(time.monotonic())
        return result

    gluon.Trainer.step = step

    training.SharedValidation.run = timed("validate", training.SharedValidation.run)
    training._save_checkpoint = timed("save", training._save_checkpoint)

    class TimedGc:
        def collect(self, *args):
            result = real_gc.collect(*args)
            mark("shutdown")
            return result

        def __getattr__(self, name):
            return getattr(real_gc, name)

    training.gc = TimedGc()


def host_main(argv) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    install_wrappers()
    from coach.platforms import host

    return host.main(argv)


# ------------------------------------------------------------------------------------------- controller side


def make_platform_class():
    from coach.domain.invocation import Reply
    from coach.platforms.local import LocalPlatform

    from host_redirect import redirect_hosts

    redirect_hosts(Path(__file__))  # this process only runs the profiled job

    class ProfilingPlatform(LocalPlatform):
        """LocalPlatform whose hosts run through this file (wrapped runtime); records every reply."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.records: list[dict] = []
            self._records_lock = threading.Lock()

        def invoke(self, ref, payload, timeout_s):
            result = super().invoke(ref, payload, timeout_s)
            epoch = getattr(payload, "epoch", None)  # an EpochRequest; a WarmRequest has none
            if epoch is not None and isinstance(result, Reply):
                with self._records_lock:
                    self.records.append({"epoch": int(epoch), "role": ref.role,
                                         "duration_s": result.duration_s, **result.body})
            return result

    return ProfilingPlatform


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--host":
        return host_main(argv[1:])
    from bare_dist_sync import add_job_arguments
    from coach.domain.cluster import DEFAULT_CLUSTER
    from coach.inputs.jobs import load_job
    from coach.app.run import run_jobs
    from epoch_overhead import CpuMeter, job_yaml, wait_until_quiet

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--what-if", default="", help=f"comma-separated emulated changes: {', '.join(WHAT_IFS)}")
    parser.add_argument("--epoch-timeout", type=float, default=300.0, help="Coach's per-epoch deadline (s)")
    parser.add_argument("--coach-timeout", type=float, default=1800.0, help="total deadline of the Coach run (s)")
    args = parser.parse_args(argv)

    unknown = set(filter(None, args.what_if.split(","))) - set(WHAT_IFS)
    if unknown:
        parser.error(f"--what-if: unknown {sorted(unknown)}; known: {', '.join(WHAT_IFS)}")
    os.environ["COACH_PROFILE_WHAT_IF"] = args.what_if  # the hosts read it (LocalPlatform passes os.environ on)
    ProfilingPlatform = make_platform_class()
    platforms = []
    with tempfile.TemporaryDirectory(prefix="coach-profile-") as tmp_name:
        tmp = Path(tmp_name)
        model = Path(args.model).resolve()
        name = f"profile-{model.stem}"[:60]
        (tmp / f"{name}.yaml").write_text(job_yaml(name, model, args))
        spec = load_job(tmp / f"{name}.yaml")

        def factory(log_dir, token):
            platforms.append(ProfilingPlatform(log_dir, token))
            return platforms[-1]

        watchdog = threading.Timer(args.coach_timeout, lambda: os.kill(os.getpid(), signal.SIGINT))
        watchdog.daemon = True  # run_jobs turns SIGINT into a clean stop: functions killed, job interrupted
        wait_until_quiet(180.0)
        meter = CpuMeter()
        watchdog.start()
        try:
            report = run_jobs([spec], DEFAULT_CLUSTER, tmp / "results", view="quiet", platform_factory=factory)
        finally:
            watchdog.cancel()
        cpu = meter.stop()
        lines = (report.run_dir / f"{name}.jsonl").read_text().splitlines()
        epochs = {r["epoch"]: r for r in map(json.loads, lines) if r.get("phase") == "training"}
        if report.exit_code != 0:
            print(f"coach run failed: exit code {report.exit_code}: "
                  f"{[json.loads(line).get('stop_reason') for line in lines]}", file=sys.stderr)
            for log in sorted((report.run_dir / "logs").glob("*.log")):
                print(f"--- {log.name} (tail) ---\n{log.read_text(errors='replace')[-1500:]}", file=sys.stderr)
            return 1
    records = platforms[0].records
    later = [e for e in epochs if e > 1] or list(epochs)
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731

    print(f"machine: os.cpu_count()={os.cpu_count()}; epochs profiled: {sorted(epochs)}; medians over {later}; "
          f"what-if: {args.what_if or 'none'}")
    print(f"other processes used {cpu['foreign_cpu_s']:.1f} CPU-s during the run ({cpu['foreign_share']:.0%} of the "
          f"machine){'  WARNING: noisy' if cpu['foreign_share'] > 0.05 else ''}")
    print(f"epoch_time_s (controller): {med([epochs[e]['epoch_time_s'] for e in later]):.3f} s")
    workers = [r for r in records if r["role"] == "worker" and r["epoch"] in later and "profile" in r]
    for rank in sorted({r["rank"] for r in workers}):
        mine = [r for r in workers if r["rank"] == rank]
        print(f"\nworker rank {rank} (median s):")
        for key, label in SEGMENTS:
            if key == "fork":
                values = [r["wall_s"] - (r["profile_returned_s"] - r["profile_entered_s"]) for r in mine]
            else:
                values = [r["profile"].get(key, 0.0) for r in mine]
            print(f"  {med(values):7.3f}  {key:<20} {label}")
        print(f"  {med([r['compute_s'] for r in mine]):7.3f}  {'(compute_s)':<20} training loop as the reply reports it")
        by_epoch = sorted((r["epoch"], r["profile"].get("kv_create", 0.0), r["profile"].get("shutdown", 0.0))
                          for r in records if r["role"] == "worker" and r.get("rank") == rank and "profile" in r)
        print(f"  {'':7}  {'(per epoch)':<20} kv_create " + " ".join(f"{k:.2f}" for _, k, _ in by_epoch)
              + " | shutdown " + " ".join(f"{d:.2f}" for _, _, d in by_epoch))
        print(f"  {med([r['wall_s'] for r in mine]):7.3f}  {'(wall_s)':<20} child: before fork -> reply ready")
        print(f"  {med([r['duration_s'] - r['wall_s'] for r in mine]):7.3f}  {'(host + HTTP)':<20} "
              "invocation duration minus wall_s")
    for role in ("server", "scheduler"):
        mine = [r for r in records if r["role"] == role and r["epoch"] in later]
        if mine:
            print(f"\n{role}: duration {med([r['duration_s'] for r in mine]):.3f} s, child wall "
                  f"{med([r['wall_s'] for r in mine]):.3f} s (serving from fork until the workers finalize)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
