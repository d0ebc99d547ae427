"""The kube scheduler's list+watch (`Informer`) against the suite's real kube-apiserver: order, BOOKMARKs, 410 Gone."""

from __future__ import annotations

import threading
from functools import partial

import pytest
from kubernetes import client

from coach.domain.kube import SCHEDULER_NAME
from coach.kube_scheduler.watch import Change, Informer, Replace
from tests.contract.kube_scheduler_support import kube, wait_for  # noqa: F401 (a fixture)


@pytest.fixture
def informer(kube):
    """A pods informer (Coach's schedulerName only) whose sink records what it hands over."""
    seen: list = []
    lock = threading.Lock()

    def sink(item) -> None:
        with lock:
            seen.append(item)

    core = client.CoreV1Api(kube.api)
    coachs = partial(core.list_namespaced_pod, kube.ns, field_selector=f"spec.schedulerName={SCHEDULER_NAME}")
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
    kube.core.create_namespaced_pod(kube.ns, {"metadata": {"name": "not-ours"},
                                         "spec": {"containers": [{"name": "f", "image": "x:1"}]}})
    kube.pod("after")
    kube.bind("after", "n1")
    kube.delete(["before"])
    wait_for("the deletion", lambda: ("DELETED", "before") in names(informer.seen))
    first = informer.seen[0]
    assert isinstance(first, Replace) and [o["metadata"]["name"] for o in first.items] == ["before"]
    # the apiserver may first mark the deleted pod (deletionTimestamp), then remove it
    marked = [item for item in informer.seen if isinstance(item, Change) and item.type == "MODIFIED"
              and item.obj["metadata"]["name"] == "before"]
    assert all(item.obj["metadata"].get("deletionTimestamp") for item in marked)
    assert [name for name in names(informer.seen) if name != ("MODIFIED", "before")] == [
        ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]
    assert informer.seen[2].obj["spec"]["nodeName"] == kube.node_name("n1")
    assert informer.healthy()


def test_bookmarks_keep_the_resource_version_current(kube, informer):
    informer.watch_timeout_s = 4  # kube-apiserver sends a BOOKMARK two seconds before a watch's deadline
    informer.start()
    assert informer.synced.wait(10)
    listed = int(informer.resource_version)
    newest = 0
    for i in range(5):  # changes the watch does not show (another scheduler's pods): only BOOKMARKs tell of them
        made = kube.core.create_namespaced_pod(kube.ns, {"metadata": {"name": f"not-ours-{i}"},
                                                         "spec": {"containers": [{"name": "f", "image": "x:1"}]}})
        newest = max(newest, int(made.metadata.resource_version))
    wait_for("a bookmark past the other pods", lambda: int(informer.resource_version) >= newest, timeout_s=15)
    assert int(informer.resource_version) > listed
    kube.pod("later")
    wait_for("the new pod", lambda: ("ADDED", "later") in names(informer.seen))
    assert names(informer.seen) == [("ADDED", "later")] and informer.lists == 1


def test_a_410_gone_lists_again_and_hands_the_whole_list_over(kube, informer, control_plane):
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
    control_plane.restart_apiserver()  # its new watch cache starts after the informer's resourceVersion
    resume.set()
    wait_for("the relist", lambda: informer.lists == 2)
    relisted = [item for item in informer.seen if isinstance(item, Replace)]
    assert [[o["metadata"]["name"] for o in r.items] for r in relisted] == [[], ["missed"]]
    assert names(informer.seen) == []  # the missed pod came with the list, not as an event
