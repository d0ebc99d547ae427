"""A run's ports, chosen from its configuration through registries: no caller names a concrete class.

A `Site` says where the functions run: `local` (warm hosts on this machine, placed by scheduler_fork in this
process) or `nuclio` (functions deployed through a Nuclio dashboard, their pods bound by `coach scheduler` on
the kube-apiserver the kubeconfig names). Each platform names the placement that goes with it. Checkpoint stores
are chosen by URL scheme (`file://`, `s3://`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import unquote, urlparse

from coach.domain.kube import DEFAULT_IMAGE
from coach.domain.cluster import ClusterSpec
from coach.placement.in_process import InProcessPlacement
from coach.platforms.local import LocalPlatform
from coach.ports import CheckpointStore, Placement, Platform
from coach.storage.checkpoints import FileCheckpointStore
from coach.storage.s3 import S3CheckpointStore



@dataclass(frozen=True)
class Site:
    """Where a run's functions are placed and run, as `coach run` was told; run.json keeps it for a resume."""

    platform: str = "local"  # a key of PLATFORMS
    dashboard: str = ""  # the Nuclio dashboard's URL (nuclio)
    namespace: str = "default"  # the Kubernetes namespace of the functions, pods and PodGroups (nuclio)
    kubeconfig: str = ""  # path of the kubeconfig that reaches the kube-apiserver (nuclio)
    image: str = DEFAULT_IMAGE  # the function image the dashboard deploys (nuclio)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: object, platform: str) -> Site:
        """The site a run.json recorded (none before sites were recorded: the local one); ValueError naming the
        field that is not a string."""
        if data is None:
            return cls(platform=platform)
        if not isinstance(data, dict):
            raise ValueError(f"site: expected a mapping, got {type(data).__name__}")
        known = {key: value for key, value in data.items() if key in cls.__dataclass_fields__}
        for key, value in known.items():
            if not isinstance(value, str):
                raise ValueError(f"site.{key}: expected text, got {type(value).__name__}")
        if known.get("platform", platform) != platform:
            raise ValueError(f"site.platform: {known['platform']!r} is not the run's platform {platform!r}")
        return cls(**{**known, "platform": platform})


def kube_api(site: Site):
    """An API client of the official `kubernetes` package for the site's kubeconfig; ValueError (one line) when
    the kubeconfig is not usable."""
    from coach.placement.kube_connect import connect

    api, problem = connect(site.kubeconfig)
    if api is None:
        raise ValueError(problem)
    return api


SITE_CHECK_TIMEOUT_S = 5.0


def check_site(site: Site) -> str | None:
    """None when the site's dashboard and kube-apiserver answer now; else one line naming the option and what
    failed. Checked once before any job starts, so a typo is an error, not a run of requeued jobs."""
    import requests

    from coach.net.http import Limits, bounded_request, problem as http_problem
    from coach.placement.kube_connect import connect, reachable

    api, problem = connect(site.kubeconfig)
    if api is None:
        return problem
    try:
        problem = reachable(api)
    finally:
        api.close()
    if problem is not None:
        return f"--kubeconfig: {site.kubeconfig}: the kube-apiserver does not answer ({problem})"
    try:
        response = bounded_request("GET", f"{site.dashboard}/api/functions",
                                   Limits(SITE_CHECK_TIMEOUT_S, SITE_CHECK_TIMEOUT_S, 2 * SITE_CHECK_TIMEOUT_S),
                                   headers={"X-Nuclio-Function-Namespace": site.namespace})
    except requests.RequestException as error:
        return f"--dashboard: {site.dashboard}: does not answer ({http_problem(error)})"
    if response.status_code != 200:
        return f"--dashboard: {site.dashboard}: GET /api/functions answered HTTP {response.status_code}"
    return None


def _nuclio(logs: Path, token: str, site: Site) -> Platform:
    from coach.platforms.nuclio import NuclioPlatform, kube_pod_address

    return NuclioPlatform(site.dashboard, site.namespace, image=site.image, token=token,
                          pod_address=kube_pod_address(kube_api(site), site.namespace))


def _kube(cluster: ClusterSpec, profile: str, platform: Platform, site: Site) -> Placement:
    """`platform` makes the pods; `coach scheduler` binds them (its own profile, set where it runs), or, for the
    `default` profile, the cluster's kube-scheduler."""
    from coach.domain.kube import kube_scheduler_name
    from coach.placement.kube import KubePlacement

    return KubePlacement(kube_api(site), site.namespace, workloads=platform, scheduler_name=kube_scheduler_name(profile))


#: Platform name -> factory(log folder, run token, site).
PLATFORMS: Mapping[str, Callable[[Path, str, Site], Platform]] = {
    "local": lambda logs, token, site: LocalPlatform(logs, token),
    "nuclio": _nuclio,
}

#: Platform name -> the placement that goes with it.
PLACEMENT_OF: Mapping[str, str] = {"local": "scheduler_fork", "nuclio": "kube"}

#: Placement name -> factory(cluster, scheduler profile, platform, site).
PLACEMENTS: Mapping[str, Callable[[ClusterSpec, str, Platform, Site], Placement]] = {
    "scheduler_fork": lambda cluster, profile, platform, site: InProcessPlacement(cluster, profile),
    "kube": _kube,
}

#: URL scheme -> factory(url) of the checkpoint store.
STORES: Mapping[str, Callable[[str], CheckpointStore]] = {
    "file": lambda url: FileCheckpointStore(Path(unquote(urlparse(url).path))),
    "s3": lambda url: S3CheckpointStore(url),
}


def checkpoint_store(url: str) -> CheckpointStore:
    """The store for `file:///abs/path` or `s3://bucket/prefix`; ValueError (one line) for another URL."""
    scheme = urlparse(url).scheme
    if scheme not in STORES:
        raise ValueError(f"unknown checkpoint store {scheme!r}; known: {', '.join(sorted(STORES))}")
    return STORES[scheme](url)
