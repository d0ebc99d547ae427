"""Names Coach's parts agree on when they meet on Kubernetes. Pure constants, no I/O.

The controller (coach.placement.kube), the scheduler (coach.kube_scheduler), the Nuclio platform
(coach.platforms.nuclio), the test fakes (tests/fakes) and the manifests under deploy/ all use these; deploy/
spells them out as YAML, and a test checks that the two agree.
"""

from __future__ import annotations

#: `spec.schedulerName` of Coach's pods; Nuclio's platform config sets it on the functions' Deployments.
SCHEDULER_NAME = "coach-scheduler"

#: The schedulerName of the cluster's own scheduler (kube-scheduler).
DEFAULT_SCHEDULER_NAME = "default-scheduler"

#: On Kubernetes, who binds a run's pods, by the run's `--scheduler`: `default` means kube-scheduler itself (the
#: thesis's baseline); every other profile is `coach scheduler`'s (whose profile is set where it runs).
KUBE_SCHEDULER_OF = {"default": DEFAULT_SCHEDULER_NAME}

#: Function (and pod) label naming the scheduler that binds it; Nuclio's platform config sets Coach's
#: schedulerName only on functions whose label says so, and the others keep the cluster's default.
SCHEDULER_LABEL = "coach.io/scheduler-name"


#: The label Nuclio's Helm chart puts on its dashboard's pods (`nuclio.io/app: dashboard`), in whatever namespace
#: the chart was installed: a job's NetworkPolicy admits those pods, and only those, to its HTTP trigger.
NUCLIO_DASHBOARD_POD_LABEL = ("nuclio.io/app", "dashboard")

#: How Coach asks the dashboard to reach a function (header `X-Nuclio-Invoke-Via`): through the function's Service,
#: from the dashboard's own pod address. Nuclio's default tries a node's address and the NodePort first, where
#: kube-proxy rewrites the source to a node's address, which no pod selector of a NetworkPolicy can admit.
NUCLIO_INVOKE_VIA = "domain-name"


def kube_scheduler_name(profile: str) -> str:
    """The schedulerName the pods of a run with `--scheduler profile` carry on Kubernetes."""
    return KUBE_SCHEDULER_OF.get(profile, SCHEDULER_NAME)


#: Node label that caps how many of Coach's functions a node takes (optional; allocatable limits them anyway).
SLOTS_LABEL = "coach.io/slots"

#: The PodGroup custom resource (the coscheduling plugin's), one per job, created by the controller.
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL, PODGROUP_KIND = (
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")

#: Pod label naming the pod's PodGroup (the coscheduling plugin's v1alpha1 convention).
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

#: Lease the scheduler replicas elect a leader with (coordination.k8s.io/v1).
LEASE_NAME = "coach-scheduler"

#: Reason of the Event the scheduler posts on a pod it cannot place (kube-scheduler's own reason).
FAILED_SCHEDULING = "FailedScheduling"

#: Nuclio label the dashboard puts on a function's Deployment and pods.
NUCLIO_FUNCTION_LABEL = "nuclio.io/function-name"

#: The function image (coach_functions/Dockerfile) a Nuclio site deploys unless `--image` names another.
DEFAULT_IMAGE = "coach-functions:latest"
