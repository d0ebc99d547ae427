"""What `coach run` and `coach serve` both do before a run starts: read and check the job and cluster files, the
site and the checkpoint store (each problem a BadInput line naming the option or file), and say the cluster."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from coach.inputs.cluster import ClusterFileError, load_cluster
from coach.inputs.jobs import JobFileError, load_jobs
from coach.inputs.limits import one_line
from coach.ui.errors import BadInput


def inputs(job_files, cluster_file):
    """Validated job specs and cluster, or BadInput naming every problem (job files first)."""
    try:
        specs = load_jobs(job_files)
    except JobFileError as error:
        raise BadInput(error.lines) from None
    try:
        return specs, load_cluster(cluster_file)
    except ClusterFileError as error:
        raise BadInput(error.lines) from None


def _prices(cluster) -> str:
    """`0.0001 per slot-second`, or `0.0001-0.0002 per slot-second` when the nodes' prices differ."""
    prices = sorted({node.price_per_slot_s for node in cluster.nodes})
    shown = f"{prices[0]:g}" if len(prices) == 1 else f"{prices[0]:g}-{prices[-1]:g}"
    return f"{shown} per slot-second"


def stdout_closed() -> None:
    """Point stdout at /dev/null after a reader closed it (`coach ... | head -1`): later prints are lost, not errors."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stdout without a file descriptor (captured): nothing to redirect
        pass


def say(line: str) -> None:
    """Print one line of a run's own output; a closed stdout loses it but does not stop the run."""
    try:
        print(line, flush=True)
    except BrokenPipeError:
        stdout_closed()


def say_cluster(cluster) -> None:
    """Money is never silent: the cluster a run places its functions on, and what a slot-second costs there."""
    origin = "the default cluster" if cluster.source == "(default)" else cluster.source
    say(f"cluster: {cluster.name} ({origin}): {len(cluster.nodes)} nodes, {cluster.total_slots} slots, "
        f"{_prices(cluster)}")


def results_folder(option: str, folder: str) -> None:
    """BadInput unless `folder` is a folder or does not exist yet (it is created)."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise BadInput([f"{option}: {folder}: not a folder"])


def run_site(args):
    """The run's Site from the options, or BadInput naming the option; a Nuclio site must answer now."""
    from coach.app.compose import Site, check_site

    if args.platform == "local":
        given = [f"--{name}" for name in ("dashboard", "kubeconfig") if getattr(args, name)]
        if given:
            raise BadInput([f"{given[0]}: only with --platform nuclio"])
        return Site()
    for name in ("dashboard", "kubeconfig"):
        if not getattr(args, name):
            raise BadInput([f"--{name}: required with --platform {args.platform}"])
    kubeconfig = Path(args.kubeconfig)
    if not kubeconfig.is_file():
        raise BadInput([f"--kubeconfig: {args.kubeconfig}: not a file"])
    site = Site(platform=args.platform, dashboard=args.dashboard, namespace=args.namespace,
                kubeconfig=str(kubeconfig.resolve()), image=args.image)
    problem = check_site(site)
    if problem is not None:
        raise BadInput([one_line(problem, 400)])
    return site


def check_store(where: str, url: str) -> None:
    """BadInput naming `where` and `url` unless the checkpoint store answers now (checked before any job starts:
    a missing bucket, refused access or an unreachable endpoint, a file where a folder should be)."""
    from coach.app.compose import checkpoint_store

    try:
        store = checkpoint_store(url)
        problem = store.check()
    except ValueError as error:
        problem = str(error)
    if problem is not None:
        raise BadInput([one_line(f"{where}: {url}: {problem}", 400)])
