"""PodGroup status from its member pods (coach.kube_scheduler.group_status): the coscheduling plugin's phases."""

from __future__ import annotations

import pytest

from coach.kube_scheduler.group_status import group_status
from coach.kube_scheduler.objects import GroupInfo, PodInfo


def pod(name: str, node: str | None = None, phase: str = "Pending", deleting: bool = False) -> PodInfo:
    return PodInfo("ns", name, f"uid-{name}", node, None, "g", None, False, deleting, "1", phase=phase)


@pytest.mark.parametrize("members, expected", [
    ([pod("a"), pod("b")], {"phase": "Pending", "scheduled": 0, "running": 0}),
    ([pod("a", "n1"), pod("b"), pod("c")], {"phase": "Scheduling", "scheduled": 1, "running": 0}),
    ([pod("a", "n1"), pod("b", "n1"), pod("c", "n2")], {"phase": "Scheduled", "scheduled": 3, "running": 0}),
    ([pod("a", "n1", "Running"), pod("b", "n1", "Running"), pod("c", "n2")],
     {"phase": "Scheduled", "scheduled": 3, "running": 2}),
    ([pod(x, "n1", "Running") for x in "abcd"], {"phase": "Running", "scheduled": 4, "running": 4}),
    ([pod("a", "n1"), pod("b", "n1"), pod("c", "n1", deleting=True)],  # a Terminating pod is no member
     {"phase": "Pending", "scheduled": 2, "running": 0}),
])
def test_the_phase_follows_the_members_against_min_member(members, expected):
    assert group_status(GroupInfo("ns", "g", 3), members, quorum_pods=3) == expected


def test_a_group_without_min_member_is_judged_by_coachs_quorum():
    members = [pod("a", "n1"), pod("b", "n1")]
    assert group_status(GroupInfo("ns", "g", None), members, quorum_pods=2)["phase"] == "Scheduled"
    assert group_status(GroupInfo("ns", "g", None), members, quorum_pods=3)["phase"] == "Pending"
