"""Does the same seeded job give the same losses on every run? Runs a real Coach job N times and tabulates.

Each repetition is one `coach.app.run.run_jobs` call on the embedded platform with `--jobs` identical copies of
the job (same model, counts, seed; only the names differ), so one repetition gives `--jobs` samples. It prints
the distinct epoch-1 losses (exact floats) with their counts, the distinct whole trajectories, and the time
per epoch and per training step.

`--variant` changes the worker's synchronisation around `Trainer.step`, in the function hosts only: the hosts
are started through this file, which wraps functions *in the host process* (children inherit the wrappers
through fork); nothing in the repository is modified.

    current         coach_functions/training.py as it is
    head            coach_functions/training.py as the last commit has it (`git show HEAD:coach_functions/training.py`)
    unsynced        training.py with `_await_broadcast` made a no-op: the broadcast happens inside the first step,
                    as before the fix
    waitall-after   unsynced + mx.nd.waitall() after every trainer.step
    waitall-before  unsynced + mx.nd.waitall() before every trainer.step
    grads-after     unsynced + wait_to_read on every gradient after every step (the pushpull's output)
    data-after      unsynced + wait_to_read on every parameter after every step (the update's output)
    init-data       unsynced + on the first step only: set up the kvstore, broadcast, wait on every parameter
    init-waitall    unsynced + on the first step only: set up the kvstore, broadcast, mx.nd.waitall()
    diagnose        unsynced + after the first step only: mx.nd.waitall() and log every parameter's sum (and the
                    first values of the last parameter and its summed gradient); ranks that disagree after that
                    step show which parameter the race hit, and on which rank

What the variants show (2 shared cores, LeNet, 2 workers, 1 server, seed 0; the guarantee is docs/models.md,
"Determinism"): `unsynced` and `waitall-after` give some runs another epoch-1 loss (a waitall after every step
does not remove the race); `diagnose` shows that such a run had a parameter wrong after step 1 already, the
wrong worker having started the step from the summed gradient G (its parameter exactly G * (1 - lr / global
batch)); `init-data` and `current` give every run the same losses. The current figure is in
benchmarks/results.md.

    .venv/bin/python benchmarks/reproducibility.py --runs 10 --jobs 3 --epochs 1 [--variant unsynced]

Side effects: starts and stops function hosts; writes to a temporary directory only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
for entry in (str(REPO), str(BENCH)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

VARIANTS = ("current", "head", "unsynced", "waitall-after", "waitall-before", "grads-after", "data-after", "init-data",
            "init-waitall", "diagnose")
DIAG = "REPRO-DIAG"  # diagnose: a worker's line on stderr (its function log) after its first step
VARIANT_ENV = "COACH_REPRO_VARIANT"


# ------------------------------------------------------------------------------------------- host side


def install_variant(variant: str) -> None:
    """Wrap Trainer.step (and the training loop's own synchronisation) for `variant`; runs in the warm host."""
    import mxnet as mx
    from mxnet import gluon

    from coach_functions import training

    if variant == "current":
        return
    if variant == "head":  # the committed training loop replaces the working tree's before the handler imports it
        import types

        source = subprocess.run(["git", "show", "HEAD:coach_functions/training.py"], cwd=REPO, check=True,
                                capture_output=True, text=True).stdout
        module = types.ModuleType("coach_functions.training")
        module.__file__ = "HEAD:coach_functions/training.py"
        sys.modules["coach_functions.training"] = module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        import coach_functions

        coach_functions.training = module
        return
    if hasattr(training, "_await_broadcast"):  # the fix: replaced by a no-op to get the old behaviour back
        training._await_broadcast = lambda trainer, params: None
    original_step = gluon.Trainer.step

    def params_of(trainer):
        return [p for p in trainer._params if p.grad_req != "null"]

    def step(self, *args, **kwargs):
        if variant == "waitall-before":
            mx.nd.waitall()
        if variant in ("init-data", "init-waitall") and not self._kv_initialized:
            self._init_kvstore()
            if self._params_to_init:
                self._init_params()
            if variant == "init-waitall":
                mx.nd.waitall()
            else:
                for param in params_of(self):
                    for array in param.list_data():
                        array.wait_to_read()
        first = not self._kv_initialized
        result = original_step(self, *args, **kwargs)
        if variant == "diagnose" and first:
            mx.nd.waitall()
            sums = [float(p.data().astype("float64").sum().asscalar()) for p in params_of(self)]
            print(f"{DIAG} rank={self._kvstore.rank} sums={json.dumps(sums)}", file=sys.stderr, flush=True)
            last = params_of(self)[-1]  # the last key broadcast, where the race shows most
            print(f"{DIAG}-LAST rank={self._kvstore.rank} name={last.name} data={json.dumps(last.data().asnumpy().ravel()[:4].tolist())} "
                  f"grad={json.dumps(last.grad().asnumpy().ravel()[:4].tolist())}", file=sys.stderr, flush=True)
        if variant == "waitall-after":
            mx.nd.waitall()
        elif variant == "grads-after":
            for param in params_of(self):
                for array in param.list_grad():
                    array.wait_to_read()
        elif variant == "data-after":
            for param in params_of(self):
                for array in param.list_data():
                    array.wait_to_read()
        return result

    gluon.Trainer.step = step


def host_main(argv) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    install_variant(os.environ.get(VARIANT_ENV, "current"))
    from coach.platforms import host

    return host.main(argv)


# ------------------------------------------------------------------------------------------- controller side


def redirect_hosts() -> None:
    """Start function hosts through this file (`-m coach.platforms.host ARGS` -> `THIS_FILE --host ARGS`)."""
    from host_redirect import redirect_hosts as redirect

    redirect(Path(__file__))


def job_yaml(name: str, args: argparse.Namespace) -> str:
    return "\n".join([
        f"name: {name}", f"model: {json.dumps(str(Path(args.model).resolve()))}", f"batch_size: {args.batch_size}",
        "optimizer: sgd", "optimizer_params:", f"  momentum: {args.momentum}", f"learning_rate: {args.lr}",
        "target_loss: 0", "consecutive: 1", f"max_epochs: {args.epochs}", "budget: 1000000000",
        f"workers: {args.workers}", f"servers: {args.servers}", f"seed: {args.seed}", "epoch_timeout_s: 300", ""])


def run_once(args, tmp: Path, index: int) -> list[dict]:
    """One run_jobs call with args.jobs identical jobs; one dict per job: losses, epoch and compute times."""
    from coach.app.run import run_jobs
    from coach.domain.cluster import ClusterSpec, NodeSpec
    from coach.inputs.jobs import load_job

    per_job = args.workers + args.servers + 1
    cluster = ClusterSpec(name="repro", nodes=tuple(NodeSpec(f"node-{i}", per_job, 0.0001)
                                                    for i in range(args.jobs)))
    specs = []
    for j in range(args.jobs):
        path = tmp / f"r{index}-j{j}.yaml"
        path.write_text(job_yaml(f"repro-r{index}-j{j}", args))
        specs.append(load_job(path))
    report = run_jobs(specs, cluster, tmp / "results", view="quiet")
    out = []
    for spec in specs:
        records = [json.loads(line) for line in (report.run_dir / f"{spec.name}.jsonl").read_text().splitlines()]
        training = [r for r in records if r.get("phase") == "training"]
        out.append({"losses": [r["loss"] for r in training], "epoch_time_s": [r["epoch_time_s"] for r in training],
                    "compute_s": [r["compute_s"] for r in training], "stop": records[-1].get("stop_reason"),
                    "diagnosis": diagnose(report.run_dir / "logs", spec.name),
                    "diagnosis_lines": [line for log in sorted((report.run_dir / "logs").glob(f"{spec.name}-worker-*.log"))
                                        for line in log.read_text(errors="replace").splitlines()
                                        if line.startswith(DIAG + "-LAST")]})
    return out


def diagnose(logs: Path, job: str) -> dict | None:
    """Variant diagnose: every rank's parameter sums after its first step, as the workers logged them."""
    sums = {}
    for log in logs.glob(f"{job}-worker-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith(DIAG + " "):
                sums[int(line.split()[1].split("=")[1])] = json.loads(line.split("sums=", 1)[1])
    return sums or None


def describe(diagnosis: dict | None, reference: dict | None) -> str:
    """`ranks agree, = reference` or which parameters differ between the ranks / from the reference sample."""
    if not diagnosis:
        return ""
    base = diagnosis[0]
    parts = [f"rank0!=rank{rank} at params {[i for i, (a, b) in enumerate(zip(base, other)) if a != b]}"
             for rank, other in sorted(diagnosis.items()) if rank and other != base] or ["ranks agree"]
    if reference:
        wrong = {rank: [i for i, (a, b) in enumerate(zip(reference[0], sums)) if a != b]
                 for rank, sums in sorted(diagnosis.items())}
        parts.append("step 1 = reference" if not any(wrong.values()) else
                     "step 1 differs from reference: " + ", ".join(f"rank{r} params {i}" for r, i in wrong.items() if i))
    return "(" + "; ".join(parts) + ")"


def steps_per_worker(args) -> int:
    """Training steps per worker in one full epoch (loads the model file's data, as a worker does)."""
    from coach_functions.host_state import HostState
    from coach_functions.models import load_model

    _, data = load_model(HostState(), str(Path(args.model).resolve()))
    return -(-(len(data["X_train"]) // args.workers) // args.batch_size)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--host":
        return host_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(REPO / "jobs" / "models" / "lenet.py"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=10, help="run_jobs calls, one after another")
    parser.add_argument("--jobs", type=int, default=1, help="identical jobs per run_jobs call, run concurrently")
    parser.add_argument("--variant", choices=VARIANTS, default="current")
    parser.add_argument("--json", help="also write every sample to this file")
    args = parser.parse_args(argv)

    os.environ[VARIANT_ENV] = args.variant  # LocalPlatform passes os.environ on to the hosts
    redirect_hosts()
    samples: list[dict] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="coach-repro-") as name:
        for index in range(args.runs):
            got = run_once(args, Path(name), index)
            samples.extend(got)
            print(f"run {index + 1}/{args.runs}: " + "  ".join(
                " ".join(f"{loss:.6f}" for loss in s["losses"]) for s in got), flush=True)
    steps = steps_per_worker(args)
    print(f"\nvariant {args.variant}: {len(samples)} samples ({args.runs} runs x {args.jobs} concurrent jobs), "
          f"{args.workers} workers, {args.servers} servers, seed {args.seed}, {time.monotonic() - started:.0f} s")
    first = collections.Counter(repr(s["losses"][0]) if s["losses"] else repr(s["stop"]) for s in samples)
    print("distinct epoch-1 losses:")
    for loss, count in first.most_common():
        print(f"  {loss:>24}  x{count}")
    diagnosed = [s for s in samples if s["diagnosis"]]
    if diagnosed:  # reference: the first sample of the most common epoch-1 loss whose ranks agree
        common = first.most_common(1)[0][0]
        reference = next((s["diagnosis"] for s in diagnosed if s["losses"] and repr(s["losses"][0]) == common
                          and describe(s["diagnosis"], None) == "(ranks agree)"), None)
        print("parameters after the first step, per sample that did not give the most common loss:")
        for s in diagnosed:
            if not s["losses"] or repr(s["losses"][0]) != common:
                print(f"  {s['losses'][0] if s['losses'] else s['stop']!r:>24}  {describe(s['diagnosis'], reference)}")
    if args.epochs > 1:
        whole = collections.Counter(tuple(s["losses"]) for s in samples)
        print(f"distinct trajectories over {args.epochs} epochs: {len(whole)}")
        for losses, count in whole.most_common():
            print(f"  x{count}: " + " ".join(f"{loss:.6f}" for loss in losses))
    epoch_times = [t for s in samples for t in s["epoch_time_s"]]
    computes = [t for s in samples for t in s["compute_s"]]
    if epoch_times:
        print(f"epoch_time_s median {statistics.median(epoch_times):.3f} s, compute_s median "
              f"{statistics.median(computes):.3f} s (mean {statistics.mean(computes):.3f})"
              + f", {steps} steps per worker: {1000 * statistics.median(computes) / steps:.2f} ms per step")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
