"""The kube scheduler's list+watch (`Informer`) against the fake kube-apiserver: order, BOOKMARKs, 410 Gone."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from kubernetes import client

from coach.domain.kube import SCHEDULER_NAME
from tests.fakes.kube_apiserver import FakeApiServer
from coach.placement.kube_connect import connect
from coach.kube_scheduler.watch import Change, Informer, Replace
from tests.contract.kube_scheduler_support import NS, Kube, wait_for


@pytest.fixture
def fake():
    with FakeApiServer(bookmark_interval_s=0.1) as server:
        yield server


@pytest.fixture
def kube(fake, tmp_path):
    api, _ = connect(str(fake.write_kubeconfig(tmp_path / "kubeconfig")))
    yield Kube(api)
    api.close()


@pytest.fixture
def informer(kube):
    """A pods informer (Coach's schedulerName only) whose sink records what it hands over."""
    seen: list = []
    lock = threading.Lock()

    def sink(item) -> None:
        with lock:
            seen.append(item)

    core = client.CoreV1Api(kube.api)
    coachs = partial(core.list_namespaced_pod, NS, field_selector=f"spec.schedulerName={SCHEDULER_NAME}")
    running = Informer("pods", coachs, sink)
    running.seen = seen
    yield running
    running.stop()


def names(items) -> list[tuple[str, str]]:
    return [(item.type, item.obj["metadata"]["name"]) for item in items if isinstance(item, Change)]


def test_a_list_then_every_change_in_order_and_only_coachs_pods(kube, informer):
    kube.pod("before")
    informer.start()
    assert informer.synced.wait(10)
    kube.core.create_namespaced_pod(NS, {"metadata": {"name": "not-ours"},
                                         "spec": {"containers": [{"name": "f", "image": "x:1"}]}})
    kube.pod("after")
    kube.bind("after", "n1")
    kube.delete(["before"])
    wait_for("the deletion", lambda: ("DELETED", "before") in names(informer.seen))
    first = informer.seen[0]
    assert isinstance(first, Replace) and [o["metadata"]["name"] for o in first.items] == ["before"]
    assert names(informer.seen) == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]
    assert informer.seen[2].obj["spec"]["nodeName"] == "n1"
    assert informer.healthy()


def test_bookmarks_keep_the_resource_version_current_so_a_compaction_needs_no_relist(kube, fake, informer):
    informer.start()
    assert informer.synced.wait(10)
    for i in range(5):  # changes the pods watch does not see: only BOOKMARKs tell it how far the store is
        kube.group(f"g{i}")
    latest = str(fake.store.resource_version)
    wait_for("a bookmark at the latest version", lambda: informer.resource_version == latest)
    fake.compact()
    informer.interrupt()  # watch again from the bookmarked version: still in the history
    kube.pod("later")
    wait_for("the new pod", lambda: ("ADDED", "later") in names(informer.seen))
    assert informer.lists == 1


def test_a_410_gone_lists_again_and_hands_the_whole_list_over(kube, fake, informer):
    informer.start()
    assert informer.synced.wait(10)
    resume, watching = threading.Event(), informer._list_call

    def held_back(**kwargs):  # the next watch waits until the history it needs is gone
        if kwargs.get("watch"):
            resume.wait(10)
        return watching(**kwargs)

    informer._list_call = held_back
    informer.interrupt()
    kube.pod("missed")
    fake.compact()
    resume.set()
    wait_for("the relist", lambda: informer.lists == 2)
    relisted = [item for item in informer.seen if isinstance(item, Replace)]
    assert [[o["metadata"]["name"] for o in r.items] for r in relisted] == [[], ["missed"]]
    assert names(informer.seen) == []  # the missed pod came with the list, not as an event
