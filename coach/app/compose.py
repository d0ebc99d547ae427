"""A run's ports, chosen from its configuration through registries: no caller names a concrete class.

Kubernetes (a Placement that is a kube-scheduler, a Platform that is the Nuclio dashboard) and an `s3://`
checkpoint store plug in here as new entries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Mapping
from urllib.parse import urlparse

from coach.domain.cluster import ClusterSpec
from coach.placement.fork import ForkPlacement
from coach.platforms.local import LocalPlatform
from coach.ports import CheckpointStore, Placement, Platform
from coach.storage.checkpoints import FileCheckpointStore

#: Platform name -> factory(log folder, run token).
PLATFORMS: Mapping[str, Callable[[Path, str], Platform]] = {
    "local": lambda logs, token: LocalPlatform(logs, token),
}

#: Placement name -> factory(cluster, scheduler profile).
PLACEMENTS: Mapping[str, Callable[[ClusterSpec, str], Placement]] = {
    "fork": lambda cluster, profile: ForkPlacement(cluster, profile),
}

#: URL scheme -> factory(url) of the checkpoint store.
STORES: Mapping[str, Callable[[str], CheckpointStore]] = {
    "file": lambda url: FileCheckpointStore(Path(urlparse(url).path)),
}


def checkpoint_store(url: str) -> CheckpointStore:
    """The store for `file:///abs/path` (and, later, `s3://bucket/prefix`)."""
    scheme = urlparse(url).scheme
    if scheme not in STORES:
        raise ValueError(f"unknown checkpoint store {scheme!r}; known: {', '.join(sorted(STORES))}")
    return STORES[scheme](url)
